"""GC604 nan-guard — Flags `if`/`assert`/`while` conditions built from `torch.isnan`/`isinf`/`isfinite`."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC604',
    name='nan-guard',
    message='a NaN/Inf debug guard reads a device reduction back to the host',
    hint='drop the guard from the step, or record a device flag and check it after replay',
    what='Flags `if`/`assert`/`while` conditions built from `torch.isnan`/`isinf`/`isfinite`.',
    why='The guard reduces on the device and then reads the bool back: a sync every step, and a capture failure.',
    example='if torch.isnan(h).any():\n    raise FloatingPointError',
    instead='self.bad_flag |= torch.isnan(h).any()   # device flag, read after the step',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()


@on(ast.If, ast.While, ast.Assert)
def check(ctx, node) -> None:
    if ctx.mentions_nan_guard(node.test):
        ctx.report(RULE.code, node.test)
