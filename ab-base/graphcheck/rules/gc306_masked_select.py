"""GC306 masked-select — Flags `torch.masked_select` and `.masked_select()`."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC306',
    name='masked-select',
    message='`masked_select` has a data-dependent output size',
    hint='use `torch.where` / `masked_fill` at full size',
    what='Flags `torch.masked_select` and `.masked_select()`.',
    why="The output's size is known only after the kernel has run, so the host must read the count back (a sync) before it can allocate. A CUDA graph records fixed sizes: capture fails, or replay reuses the size seen at capture time.",
    example='v = x.masked_select(m)',
    instead='v = x.masked_fill(~m, 0)',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ('torch.masked_select', 'torch.Tensor.masked_select', 'aten::masked_select')


@on(ast.Call, names=("masked_select",))
def check(ctx, node: ast.Call) -> None:
    if ctx.torch(node) == "masked_select" and node.args and ctx.maybe_dev(node.args[0]):
        ctx.report(RULE.code, node)
    elif ctx.method(node) == "masked_select" and ctx.maybe_dev(node.func.value):
        ctx.report(RULE.code, node)
