"""GC402 host-to-device-copy — Flags `.cuda()`, `.to('cuda')` and `.pin_memory()` in the captured region."""
from __future__ import annotations

import ast

from ._base import Rule, on
from ._base import dotted

RULE = Rule(
    code='GC402',
    name='host-to-device-copy',
    message='`{call}` copies host memory to the device',
    hint='keep inputs in static device buffers written outside the graph',
    what="Flags `.cuda()`, `.to('cuda')` and `.pin_memory()` in the captured region.",
    why='A host-to-device copy from pageable memory blocks the CPU, and during capture it fails with `Cannot copy between CPU and CUDA tensors during CUDA graph capture unless the CPU tensor is pinned`. Even when it captures, the graph copies the host data seen at capture time on every replay.',
    example='ids = ids.cuda()',
    instead='static_ids.copy_(ids_host, non_blocking=True)   # before replay, from pinned memory',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = (
    'torch.Tensor.cuda',
    'torch.Tensor.pin_memory',
    'aten::_to_copy',
    'aten::copy_',
)


@on(ast.Call, names=("cuda", "to", "pin_memory", "copy_"))
def check(ctx, node: ast.Call) -> None:
    m = ctx.method(node)
    if not m:
        return
    src = node.func.value
    if m in ("cuda", "to") and ctx.non_blocking(node):
        return     # GC403 judges non_blocking copies: from pinned memory they are the cure
    if m == "cuda" and ctx.not_dev(src):
        ctx.report(RULE.code, node, call=".cuda()")
    elif m == "to" and ctx.target_is_device(node) and (ctx.host(src) or (ctx.target_is_cuda(node) and ctx.not_dev(src))
                                                        or ctx.pageable(src)):
        ctx.report(RULE.code, node, call=f"{dotted(src) or 'x'}.to(device)")
    elif m == "pin_memory" and not node.args:
        ctx.report(RULE.code, node, call=".pin_memory()")
    elif m == "copy_" and node.args and not ctx.non_blocking(node) and ctx.dev(src) and ctx.pageable(node.args[0]):
        ctx.report(RULE.code, node, call=".copy_(host)")
