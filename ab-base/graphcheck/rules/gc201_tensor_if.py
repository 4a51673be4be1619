"""GC201 tensor-if — Flags `if`/`elif` whose condition is a tensor (`if t:`, `if mask.any():`, `if x.sum() > thr:`)."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC201',
    name='tensor-if',
    message='`if` on a device value branches on the host',
    hint='compute both sides and select with `torch.where`, or mask',
    what='Flags `if`/`elif` whose condition is a tensor (`if t:`, `if mask.any():`, `if x.sum() > thr:`).',
    why='Python must know the value to pick a branch, so it reads the device value back (a sync). Under capture the read fails; and even where it could be read, a graph records one path only and replays it whatever the data says next time.',
    example='if mask.any():\n    x = x * 2',
    instead='x = torch.where(mask.any(), x * 2, x)',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()


@on(ast.If)
def check(ctx, node: ast.If) -> None:
    if not ctx.mentions_nan_guard(node.test) and ctx.dev(node.test):
        ctx.report(RULE.code, node.test)
