"""GC103 tensor-to-cpu — Flags `.cpu()` and `.to('cpu')`."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC103',
    name='tensor-to-cpu',
    message='`{call}` moves a tensor to the host',
    hint='keep it on the device; copy to a pinned host buffer outside the graph',
    what="Flags `.cpu()` and `.to('cpu')`.",
    why='Reading a device value on the host blocks the CPU until every queued kernel has finished (a device-to-host sync). During CUDA-graph capture nothing has run yet, so the read fails with `operation failed due to a previous error during capture` — which names neither the op nor the line.',
    example='logits_host = logits.cpu()',
    instead='out_buf.copy_(logits)   # static device buffer; read it after replay',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ('torch.Tensor.cpu', 'torch.Tensor.to')


@on(ast.Call, names=("cpu", "to"))
def check(ctx, node: ast.Call) -> None:
    m = ctx.method(node)
    if m == "cpu" and not node.args and ctx.maybe_dev(node.func.value):
        ctx.report(RULE.code, node, call=".cpu()")
    elif m == "to" and ctx.target_is_cpu(node) and ctx.maybe_dev(node.func.value):
        ctx.report(RULE.code, node, call=".to('cpu')")
