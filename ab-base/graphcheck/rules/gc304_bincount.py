"""GC304 bincount — Flags `torch.bincount` and `.bincount()` (its length is `max(x) + 1` unless `minlength` alone decides, and it reads the max back)."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC304',
    name='bincount',
    message='`{call}` sizes its output from the data',
    hint='use `scatter_add_` into a buffer of known size',
    what='Flags `torch.bincount` and `.bincount()` (its length is `max(x) + 1` unless `minlength` alone decides, and it reads the max back).',
    why="The output's size is known only after the kernel has run, so the host must read the count back (a sync) before it can allocate. A CUDA graph records fixed sizes: capture fails, or replay reuses the size seen at capture time.",
    example='counts = torch.bincount(idx, minlength=E)',
    instead='counts = torch.zeros(E, dtype=torch.long, device=d).scatter_add_(0, idx, torch.ones_like(idx))',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ('torch.bincount', 'torch.Tensor.bincount', 'aten::bincount')


@on(ast.Call, names=("bincount",))
def check(ctx, node: ast.Call) -> None:
    if ctx.torch(node) == "bincount" and node.args and ctx.maybe_dev(node.args[0]):
        ctx.report(RULE.code, node, call="torch.bincount")
    elif ctx.method(node) == "bincount" and ctx.maybe_dev(node.func.value):
        ctx.report(RULE.code, node, call=".bincount()")
