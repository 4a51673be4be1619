"""GC401 tensor-from-host-data — Flags `torch.tensor`, `torch.as_tensor`, `torch.from_numpy` and the legacy `torch.LongTensor(...)` constructors."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC401',
    name='tensor-from-host-data',
    message='`{call}` builds a tensor from host data every step',
    hint='allocate a static buffer once and `copy_` into it',
    what='Flags `torch.tensor`, `torch.as_tensor`, `torch.from_numpy` and the legacy `torch.LongTensor(...)` constructors.',
    why='A host-to-device copy from pageable memory blocks the CPU, and during capture it fails with `Cannot copy between CPU and CUDA tensors during CUDA graph capture unless the CPU tensor is pinned`. Even when it captures, the graph copies the host data seen at capture time on every replay.',
    example="pos = torch.tensor([p], device='cuda')",
    instead='self.pos_buf.fill_(p)   # outside the graph; or advance it on device: self.pos_buf += 1',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = (
    'torch.tensor',
    'torch.as_tensor',
    'torch.from_numpy',
    'torch.Tensor.new_tensor',
    'aten::lift_fresh',
    'aten::lift_fresh_copy',
)


_FROM_HOST = {"tensor", "as_tensor", "LongTensor", "FloatTensor", "IntTensor", "BoolTensor", "HalfTensor",
              "BFloat16Tensor", "DoubleTensor", "ByteTensor"}


@on(ast.Call, names=(*_FROM_HOST, "new_tensor"))
def check(ctx, node: ast.Call) -> None:
    t = ctx.torch(node)
    data = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "data"), None)
    if t in _FROM_HOST and data is not None and ctx.host_data(data) and ctx.dev(node):
        ctx.report(RULE.code, node, call=f"torch.{t}")
    elif ctx.method(node) == "new_tensor" and node.args and ctx.host_data(node.args[0]) and ctx.dev(node):
        ctx.report(RULE.code, node, call=".new_tensor")
