"""GC302 where-one-arg — Flags `torch.where(cond)` with a single argument (it is `nonzero` in disguise)."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC302',
    name='where-one-arg',
    message='one-argument `torch.where` returns data-dependent indices',
    hint='use three-argument `torch.where(cond, a, b)`',
    what='Flags `torch.where(cond)` with a single argument (it is `nonzero` in disguise).',
    why="The output's size is known only after the kernel has run, so the host must read the count back (a sync) before it can allocate. A CUDA graph records fixed sizes: capture fails, or replay reuses the size seen at capture time.",
    example='rows, cols = torch.where(mask)',
    instead='out = torch.where(mask, x, 0)',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ('torch.where',)


@on(ast.Call, names=("where",))
def check(ctx, node: ast.Call) -> None:
    if ctx.torch(node) == "where" and len(node.args) == 1 and not node.keywords and ctx.maybe_dev(node.args[0]):
        ctx.report(RULE.code, node)
