"""GC108 tensor-compare-host — Flags `torch.equal`, `torch.allclose` and their method forms."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC108',
    name='tensor-compare-host',
    message='`{call}` returns a host bool',
    hint='compare on the device (`(a - b).abs().amax()`), outside the step',
    what='Flags `torch.equal`, `torch.allclose` and their method forms.',
    why='Reading a device value on the host blocks the CPU until every queued kernel has finished (a device-to-host sync). During CUDA-graph capture nothing has run yet, so the read fails with `operation failed due to a previous error during capture` — which names neither the op nor the line.',
    example='if torch.allclose(a, b):\n    ...',
    instead='close = ((a - b).abs() <= atol + rtol * b.abs()).all()   # device bool',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = (
    'torch.equal',
    'torch.allclose',
    'torch.Tensor.equal',
    'torch.Tensor.allclose',
    'aten::equal',
    'aten::allclose',
)


@on(ast.Call, names=("equal", "allclose"))
def check(ctx, node: ast.Call) -> None:
    t = ctx.torch(node)
    if t in ("equal", "allclose") and any(ctx.maybe_dev(a) for a in node.args[:2]):
        ctx.report(RULE.code, node, call=f"torch.{t}")
    elif ctx.method(node) in ("equal", "allclose") and ctx.dev(node.func.value):
        ctx.report(RULE.code, node, call=f".{node.func.attr}()")
