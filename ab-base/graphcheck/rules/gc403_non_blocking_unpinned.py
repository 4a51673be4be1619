"""GC403 non-blocking-unpinned — Flags `non_blocking=True` copies whose source is not visibly pinned (`pin_memory()`, or `pin_memory=` anything but False: `True` or a flag such as `is_pin_memory_available()`)."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC403',
    name='non-blocking-unpinned',
    message='`non_blocking=True` copy from a tensor not known to be pinned',
    hint='copy from a `pin_memory()` buffer, or drop `non_blocking`',
    what='Flags `non_blocking=True` copies whose source is not visibly pinned (`pin_memory()`, or `pin_memory=` anything but False: `True` or a flag such as `is_pin_memory_available()`).',
    why='A `non_blocking` copy from pageable memory silently becomes synchronous, and a device-to-host one races with the host reading the buffer; the CUDA sync-debug mode reports neither.',
    example="host = x.to('cpu', non_blocking=True)\nuse(host)",
    instead='pinned = torch.empty(n, pin_memory=True)\npinned.copy_(x, non_blocking=True); event.record()',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ('torch.Tensor.copy_',)


@on(ast.Call, names=("copy_", "to", "cuda"))
def check(ctx, node: ast.Call) -> None:
    m = ctx.method(node)
    if not m or not ctx.non_blocking(node):
        return
    recv = node.func.value
    if m == "copy_" and node.args:
        src = node.args[0]
        unpinned = (ctx.host(src) and ctx.dev(recv)) or (ctx.dev(src) and ctx.host(recv))
    elif m == "to" and ctx.target_is_cpu(node):
        unpinned = ctx.dev(recv)              # device-to-host into fresh pageable memory: races with the reader
    elif m in ("to", "cuda"):
        unpinned = ctx.host(recv)
    else:
        unpinned = False
    if unpinned:
        ctx.report(RULE.code, node)
