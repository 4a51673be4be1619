"""GC101 tensor-item — Flags `.item()` calls."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC101',
    name='tensor-item',
    message='`.item()` reads a device value back to the host',
    hint='keep the value on the device; use it as a 0-d tensor',
    what='Flags `.item()` calls.',
    why='Reading a device value on the host blocks the CPU until every queued kernel has finished (a device-to-host sync). During CUDA-graph capture nothing has run yet, so the read fails with `operation failed due to a previous error during capture` — which names neither the op nor the line.',
    example='n = counts.sum().item()\nout = x[:n]',
    instead='n = counts.sum()              # stays a 0-d device tensor\nout = torch.where(idx < n, x, 0)',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ('torch.Tensor.item',)


@on(ast.Call, names=("item",))
def check(ctx, node: ast.Call) -> None:
    if ctx.method(node) == "item" and not node.args and ctx.maybe_dev(node.func.value):
        ctx.report(RULE.code, node)
