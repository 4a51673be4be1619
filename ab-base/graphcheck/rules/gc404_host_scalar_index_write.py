"""GC404 host-scalar-index-write — Flags index assignment of Python scalars or lists into tensors (`x[3] = 1.0`, `x[[1, 2]] = v`)."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC404',
    name='host-scalar-index-write',
    message='writing host data into a device tensor by index (`{call}`)',
    hint='use `fill_`/`index_fill_`/`masked_fill_` with device indices',
    what='Flags index assignment of Python scalars or lists into tensors (`x[3] = 1.0`, `x[[1, 2]] = v`).',
    why='The scalar or index list is materialised on the host and copied to the device on every call (a sync); under capture the copy fails or is frozen.',
    example='cache[3] = 0.0',
    instead='cache.select(0, 3).zero_()',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ('torch.Tensor.__setitem__',)


def _host_literal(ctx, v: ast.AST) -> bool:
    if isinstance(v, ast.Constant):
        return isinstance(v.value, (int, float, bool, complex))
    if isinstance(v, ast.UnaryOp) and isinstance(v.op, (ast.USub, ast.UAdd)):
        return _host_literal(ctx, v.operand)
    if isinstance(v, (ast.List, ast.Tuple)):
        return bool(v.elts) and all(_host_literal(ctx, e) or ctx.py(e) for e in v.elts)
    return ctx.py(v)


@on(ast.Assign)
def check(ctx, node: ast.Assign) -> None:
    for t in node.targets:
        if not isinstance(t, ast.Subscript):
            continue
        parts = t.slice.elts if isinstance(t.slice, ast.Tuple) else [t.slice]
        # a slice or `...` fill is a `fill_` on a view: no host data crosses
        if any(isinstance(p, ast.Slice) or (isinstance(p, ast.Constant) and p.value is Ellipsis) for p in parts):
            continue
        if any(ctx.bool_tensor(p) for p in parts):
            continue    # x[mask] = 0 is masked_fill_
        list_index = any(isinstance(p, (ast.List, ast.ListComp)) for p in parts)
        if (list_index or _host_literal(ctx, node.value)) and ctx.dev(t.value):
            ctx.report(RULE.code, t, call="x[[i, j]] = v" if list_index else "x[i] = scalar")
