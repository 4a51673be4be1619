"""GC202 tensor-while — Flags `while` loops whose condition is a tensor, such as a convergence early-exit on a device residual."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC202',
    name='tensor-while',
    message='`while` on a device value loops on the host',
    hint='run a fixed number of iterations on the device',
    what='Flags `while` loops whose condition is a tensor, such as a convergence early-exit on a device residual.',
    why='Python must know the value to pick a branch, so it reads the device value back (a sync). Under capture the read fails; and even where it could be read, a graph records one path only and replays it whatever the data says next time.',
    example='while (err > tol):\n    x, err = step(x)',
    instead='for _ in range(n_iters):   # fixed count, host int\n    x, err = step(x)',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()


@on(ast.While)
def check(ctx, node: ast.While) -> None:
    if not ctx.mentions_nan_guard(node.test) and ctx.dev(node.test):
        ctx.report(RULE.code, node.test)
