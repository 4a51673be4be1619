"""GC303 unique — Flags `torch.unique`, `.unique()` and `unique_consecutive`."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC303',
    name='unique',
    message='`{call}` has a data-dependent output size',
    hint='use a fixed-size one-hot or scatter over the known value range',
    what='Flags `torch.unique`, `.unique()` and `unique_consecutive`.',
    why="The output's size is known only after the kernel has run, so the host must read the count back (a sync) before it can allocate. A CUDA graph records fixed sizes: capture fails, or replay reuses the size seen at capture time.",
    example='experts = topk_idx.unique()',
    instead='hit = torch.zeros(n_experts, dtype=torch.bool, device=d).scatter_(0, topk_idx.flatten(), True)',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = (
    'torch.unique',
    'torch.Tensor.unique',
    'torch.unique_consecutive',
    'torch.Tensor.unique_consecutive',
    'aten::_unique',
    'aten::_unique2',
    'aten::unique_dim',
    'aten::unique_consecutive',
)


@on(ast.Call, names=("unique", "unique_consecutive"))
def check(ctx, node: ast.Call) -> None:
    t = ctx.torch(node)
    if t in ("unique", "unique_consecutive") and node.args and ctx.maybe_dev(node.args[0]):
        ctx.report(RULE.code, node, call=f"torch.{t}")
    elif ctx.method(node) in ("unique", "unique_consecutive") and ctx.dev(node.func.value):
        ctx.report(RULE.code, node, call=f".{node.func.attr}()")
