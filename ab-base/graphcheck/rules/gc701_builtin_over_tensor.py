"""GC701 builtin-over-tensor — Flags the Python builtins `sum`, `min`, `max`, `any`, `all`, `sorted`, `list`, `tuple` applied to a tensor."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC701',
    name='builtin-over-tensor',
    message='builtin `{call}()` iterates a tensor on the host',
    hint='use the torch reduction (`t.sum()`, `t.amax()`, `t.any()`)',
    what='Flags the Python builtins `sum`, `min`, `max`, `any`, `all`, `sorted`, `list`, `tuple` applied to a tensor.',
    why='The builtin unbinds the tensor into 0-d tensors and combines them in Python; `min`/`max`/`any`/`all`/`sorted` also compare each element on the host (a readback per element). It is slow eagerly and freezes or fails under capture.',
    example='total = sum(expert_out)',
    instead='total = expert_out.sum(0)',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()


_BUILTINS = {"sum", "min", "max", "any", "all", "sorted", "list", "tuple"}


@on(ast.Call, names=tuple(_BUILTINS))
def check(ctx, node: ast.Call) -> None:
    f = node.func
    if isinstance(f, ast.Name) and f.id in _BUILTINS and len(node.args) == 1 and not ctx.is_shadowed(f.id) \
            and not ctx.is_host_sequence(node.args[0]) and ctx.dev(node.args[0]):   # sum(list_of_tensors) adds on the device
        ctx.report(RULE.code, node, call=f.id)
