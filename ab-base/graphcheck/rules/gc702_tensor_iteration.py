"""GC702 tensor-iteration — Flags `for v in t:` where `t` is a tensor."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC702',
    name='tensor-iteration',
    message='iterating a tensor in a Python `for` loop',
    hint='vectorise over the dimension, or iterate over a host range',
    what='Flags `for v in t:` where `t` is a tensor.',
    why="Each iteration slices on the host; the loop count is the tensor's length, and any use of `v` as a host value reads it back.",
    example='for tok in tokens:\n    emb.append(table[tok])',
    instead='emb = table[tokens]',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()


@on(ast.For)
def check(ctx, node: ast.For) -> None:
    if ctx.dev(node.iter):
        ctx.report(RULE.code, node.iter)
