"""GC405 numpy-in-region — Flags NumPy calls in the captured region."""
from __future__ import annotations

import ast

from ._base import Rule, on
from ._base import dotted

RULE = Rule(
    code='GC405',
    name='numpy-in-region',
    message='`{call}` runs NumPy inside the captured region',
    hint='do the math in torch on the device, or move it to load time',
    what='Flags NumPy calls in the captured region.',
    why='NumPy works on host memory: its inputs must be read back and its results copied in; a graph records neither.',
    example='w = np.exp(x)',
    instead='w = torch.exp(x)',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()


@on(ast.Call, prefixes=("numpy.",))
def check(ctx, node: ast.Call) -> None:
    q = ctx.qual(node.func)
    if not q.startswith("numpy.") or q.startswith("numpy.random.") or q in (
            "numpy.asarray", "numpy.array", "numpy.asanyarray", "numpy.ascontiguousarray"):   # those are GC109
        return
    if ctx.any_dev([*node.args, *(k.value for k in node.keywords)]):
        ctx.report(RULE.code, node, call=dotted(node.func) + "(...)")
