"""GC105 tensor-as-index — Flags `range(t)` and Python sequences indexed by a tensor (`lst[t]`), which call `__index__`."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC105',
    name='tensor-as-index',
    message='a tensor used as a host integer in `{call}`',
    hint='use device-side indexing (`index_select`, `gather`, masking)',
    what='Flags `range(t)` and Python sequences indexed by a tensor (`lst[t]`), which call `__index__`.',
    why='Reading a device value on the host blocks the CPU until every queued kernel has finished (a device-to-host sync). During CUDA-graph capture nothing has run yet, so the read fails with `operation failed due to a previous error during capture` — which names neither the op nor the line.',
    example='for i in range(n_tokens):\n    ...',
    instead='i = torch.arange(max_tokens, device=x.device)\nvalid = i < n_tokens',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ('torch.Tensor.__index__',)


@on(ast.Call, names=("range",))
def check_range(ctx, node: ast.Call) -> None:
    f = node.func
    if isinstance(f, ast.Name) and f.id == "range" and not ctx.is_shadowed("range") and ctx.any_dev(node.args):
        ctx.report(RULE.code, node, call="range(...)")


@on(ast.Subscript)
def check_index(ctx, node: ast.Subscript) -> None:
    # lst[t] where lst is a host sequence and t a tensor calls t.__index__
    if isinstance(node.ctx, ast.Load) and ctx.is_host_sequence(node.value) and ctx.dev(node.slice):
        ctx.report(RULE.code, node, call="sequence[tensor]")
