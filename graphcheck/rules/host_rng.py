"""GC5xx — host random number generators feeding device work."""
from __future__ import annotations

import ast

from ._base import Family, Rule
from ..static.inference import dotted

_WHY = ("A host RNG draws on the CPU at capture time; the graph bakes that one draw in and replays it every "
        "step, so sampling stops being random. Using it on tensors also means a host-to-device copy.")
FAMILY = Family("Host random number generators", [
    Rule("GC501", "python-random", "`{call}` draws from Python's host RNG", "use device RNG (`torch.rand(..., device=d, generator=g)`)",
         "Flags calls into the standard-library `random` module.", _WHY,
         "if random.random() < p:\n    tok = sample(logits)", "u = torch.rand((), device=logits.device)\ntok = torch.where(u < p, sample(logits), greedy)"),
    Rule("GC502", "numpy-random", "`{call}` draws from NumPy's host RNG", "use device RNG (`torch.rand`/`torch.multinomial`/Gumbel noise)",
         "Flags `np.random.*` calls.", _WHY,
         "noise = np.random.gumbel(size=V)", "noise = -torch.log(-torch.log(torch.rand(V, device=d)))"),
])
on = FAMILY.on


@on(ast.Call)
def _calls(ctx, node: ast.Call) -> None:
    name = dotted(node.func)
    if not name or "." not in name:
        return
    head = name.split(".")[0]
    if ctx.module_alias(head) == "random":
        ctx.report("GC501", node, call=name + "(...)")
    elif ctx.module_alias(head) in ("numpy", "numpy.random") and (".random." in f".{name}." or ctx.module_alias(head) == "numpy.random"):
        ctx.report("GC502", node, call=name + "(...)")
