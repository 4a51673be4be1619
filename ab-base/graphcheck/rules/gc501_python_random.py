"""GC501 python-random — Flags calls into the standard-library `random` module."""
from __future__ import annotations

import ast

from ._base import Rule, on
from ._base import dotted

RULE = Rule(
    code='GC501',
    name='python-random',
    message="`{call}` draws from Python's host RNG",
    hint='use device RNG (`torch.rand(..., device=d, generator=g)`)',
    what='Flags calls into the standard-library `random` module.',
    why='A host RNG draws on the CPU at capture time; the graph bakes that one draw in and replays it every step, so sampling stops being random. Using it on tensors also means a host-to-device copy.',
    example='if random.random() < p:\n    tok = sample(logits)',
    instead='u = torch.rand((), device=logits.device)\ntok = torch.where(u < p, sample(logits), greedy)',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()


@on(ast.Call, prefixes=("random.",))
def check(ctx, node: ast.Call) -> None:
    q = ctx.qual(node.func)
    if q.startswith("random.") and q.count(".") == 1:
        ctx.report(RULE.code, node, call=(dotted(node.func) or q) + "(...)")
