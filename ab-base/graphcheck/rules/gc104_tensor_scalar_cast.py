"""GC104 tensor-scalar-cast — Flags `int(t)`, `float(t)`, `bool(t)` and `complex(t)` where `t` is a tensor."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC104',
    name='tensor-scalar-cast',
    message='`{call}()` of a tensor reads it back to the host',
    hint='keep the value as a tensor; compute with it on the device',
    what='Flags `int(t)`, `float(t)`, `bool(t)` and `complex(t)` where `t` is a tensor.',
    why='Reading a device value on the host blocks the CPU until every queued kernel has finished (a device-to-host sync). During CUDA-graph capture nothing has run yet, so the read fails with `operation failed due to a previous error during capture` — which names neither the op nor the line.',
    example='scale = float(x.abs().max())',
    instead='scale = x.abs().amax()      # 0-d tensor, broadcasts',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = (
    'torch.Tensor.__bool__',
    'torch.Tensor.__int__',
    'torch.Tensor.__float__',
    'torch.Tensor.__complex__',
    'aten::_local_scalar_dense',
    'aten::is_nonzero',
)


@on(ast.Call, names=("int", "float", "bool", "complex"))
def check(ctx, node: ast.Call) -> None:
    f = node.func
    if isinstance(f, ast.Name) and f.id in ("int", "float", "bool", "complex") and len(node.args) == 1 \
            and not ctx.is_shadowed(f.id) and ctx.dev(node.args[0]):
        ctx.report(RULE.code, node, call=f.id)
