"""GC102 tensor-tolist — Flags `.tolist()` and `.numpy()`."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC102',
    name='tensor-tolist',
    message='`.{method}()` copies a tensor to host memory',
    hint='keep the data on the device, or move this out of the captured step',
    what='Flags `.tolist()` on a tensor not known to live on the host (NumPy arrays and CPU tensors are fine; `.numpy()` is GC109).',
    why='Reading a device value on the host blocks the CPU until every queued kernel has finished (a device-to-host sync). During CUDA-graph capture nothing has run yet, so the read fails with `operation failed due to a previous error during capture` — which names neither the op nor the line. `tolist()` is a blocking device-to-host copy.',
    example='for e in counts.tolist():\n    ...',
    instead='grouped = torch.ops.my.grouped_gemm(x, offsets)   # offsets stay on device',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ('torch.Tensor.tolist',)


@on(ast.Call, names=("tolist",))
def check(ctx, node: ast.Call) -> None:
    m = ctx.method(node)
    if m == "tolist" and not node.args and ctx.maybe_dev(node.func.value):
        ctx.report(RULE.code, node, method=m)
