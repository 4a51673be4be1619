"""GC605 cache-allocator-call — Flags `torch.cuda.empty_cache()` and memory statistics calls in the captured region."""
from __future__ import annotations

import ast

from ._base import Rule, on
from ._base import dotted

RULE = Rule(
    code='GC605',
    name='cache-allocator-call',
    message='`{call}` talks to the caching allocator from inside the step',
    hint='call it between steps, outside capture',
    what='Flags `torch.cuda.empty_cache()` and memory statistics calls in the captured region.',
    why="Releasing cached blocks synchronises the device and is illegal while a graph's private pool is being captured.",
    example='torch.cuda.empty_cache()',
    instead='# call once after generation, not per step',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ('torch.cuda.empty_cache', 'torch.accelerator.empty_cache')


_MEM = {"empty_cache", "memory_allocated", "max_memory_allocated", "memory_reserved", "mem_get_info", "memory_stats",
        "reset_peak_memory_stats", "ipc_collect"}


@on(ast.Call, names=tuple(_MEM))
def check(ctx, node: ast.Call) -> None:
    q = ctx.qual(node.func)
    parts = q.split(".")
    if len(parts) == 3 and parts[0] == "torch" and parts[1] in ("cuda", "accelerator", "xpu", "mps") and parts[2] in _MEM:
        ctx.report(RULE.code, node, call=(dotted(node.func) or q) + "()")
