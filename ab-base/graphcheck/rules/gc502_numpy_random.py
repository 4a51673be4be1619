"""GC502 numpy-random — Flags `np.random.*` calls."""
from __future__ import annotations

import ast

from ._base import Rule, on
from ._base import dotted

RULE = Rule(
    code='GC502',
    name='numpy-random',
    message="`{call}` draws from NumPy's host RNG",
    hint='use device RNG (`torch.rand`/`torch.multinomial`/Gumbel noise)',
    what='Flags `np.random.*` calls.',
    why='A host RNG draws on the CPU at capture time; the graph bakes that one draw in and replays it every step, so sampling stops being random. Using it on tensors also means a host-to-device copy.',
    example='noise = np.random.gumbel(size=V)',
    instead='noise = -torch.log(-torch.log(torch.rand(V, device=d)))',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()


@on(ast.Call, prefixes=("numpy.random.",))
def check(ctx, node: ast.Call) -> None:
    if ctx.qual(node.func).startswith("numpy.random."):
        ctx.report(RULE.code, node, call=(dotted(node.func) or "numpy.random") + "(...)")
