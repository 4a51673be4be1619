"""GC107 device-assert — Flags `assert` statements whose condition is a tensor."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC107',
    name='device-assert',
    message='`assert` on a device value reads it back to the host',
    hint='check shapes only, or validate outside the captured step',
    what='Flags `assert` statements whose condition is a tensor.',
    why='Reading a device value on the host blocks the CPU until every queued kernel has finished (a device-to-host sync). During CUDA-graph capture nothing has run yet, so the read fails with `operation failed due to a previous error during capture` — which names neither the op nor the line.',
    example='assert (idx >= 0).all()',
    instead='idx = idx.clamp_min(0)       # or torch._assert_async(...) outside capture',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()


@on(ast.Assert)
def check(ctx, node: ast.Assert) -> None:
    if not ctx.mentions_nan_guard(node.test) and ctx.dev(node.test):
        ctx.report(RULE.code, node)
