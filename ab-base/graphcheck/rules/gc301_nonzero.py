"""GC301 nonzero — Flags `torch.nonzero`, `.nonzero()` and `torch.argwhere`."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC301',
    name='nonzero',
    message='`{call}` returns a data-dependent number of indices',
    hint='use a fixed-size mask, or `nonzero_static(size=...)`',
    what='Flags `torch.nonzero`, `.nonzero()` and `torch.argwhere`.',
    why="The output's size is known only after the kernel has run, so the host must read the count back (a sync) before it can allocate. A CUDA graph records fixed sizes: capture fails, or replay reuses the size seen at capture time.",
    example='idx = mask.nonzero()',
    instead='idx = torch.nonzero_static(mask.flatten(), size=max_n, fill_value=-1)',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = (
    'torch.nonzero',
    'torch.Tensor.nonzero',
    'torch.argwhere',
    'torch.Tensor.argwhere',
    'aten::nonzero',
    'aten::argwhere',
)


@on(ast.Call, names=("nonzero", "argwhere"))
def check(ctx, node: ast.Call) -> None:
    t = ctx.torch(node)
    if t in ("nonzero", "argwhere") and node.args and ctx.maybe_dev(node.args[0]):
        ctx.report(RULE.code, node, call=f"torch.{t}")
    elif ctx.method(node) in ("nonzero", "argwhere") and not node.args and ctx.maybe_dev(node.func.value):
        ctx.report(RULE.code, node, call=f".{node.func.attr}()")
