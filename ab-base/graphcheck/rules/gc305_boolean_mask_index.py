"""GC305 boolean-mask-index — Flags reading `x[mask]` where `mask` is a boolean tensor (a comparison, `isnan`, `~m`, `m & n`)."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC305',
    name='boolean-mask-index',
    message='boolean-mask indexing `x[mask]` has a data-dependent size',
    hint='use `torch.where(mask, x, fill)` or `masked_fill`',
    what='Flags reading `x[mask]` where `mask` is a boolean tensor (a comparison, `isnan`, `~m`, `m & n`).',
    why="The output's size is known only after the kernel has run, so the host must read the count back (a sync) before it can allocate. A CUDA graph records fixed sizes: capture fails, or replay reuses the size seen at capture time.",
    example='kept = scores[scores > thr]',
    instead="kept = scores.masked_fill(scores <= thr, float('-inf'))",
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ('torch.Tensor.__getitem__', 'aten::index')


@on(ast.Subscript)
def check(ctx, node: ast.Subscript) -> None:
    if not isinstance(node.ctx, ast.Load):
        return
    parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    if any(ctx.bool_tensor(p) for p in parts) and ctx.dev(node.value):
        ctx.report(RULE.code, node)
