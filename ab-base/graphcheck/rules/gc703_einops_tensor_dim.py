"""GC703 einops-tensor-dim — Flags einops `rearrange`/`repeat`/`reduce` calls whose axis-size keywords are tensors."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC703',
    name='einops-tensor-dim',
    message='`{call}` takes a dimension from a tensor',
    hint='pass a host int (a static shape) as the einops axis size',
    what='Flags einops `rearrange`/`repeat`/`reduce` calls whose axis-size keywords are tensors.',
    why='einops needs the axis size as a Python int, so it reads the tensor back.',
    example="rearrange(x, '(b n) d -> b n d', n=n_t)",
    instead="rearrange(x, '(b n) d -> b n d', n=x.shape[0] // b)",
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()


@on(ast.Call, names=("rearrange", "repeat", "reduce", "pack", "unpack"))
def check(ctx, node: ast.Call) -> None:
    q = ctx.qual(node.func)
    if q.startswith("einops.") and q.rsplit(".", 1)[-1] in ("rearrange", "repeat", "reduce", "pack", "unpack") \
            and ctx.any_dev(k.value for k in node.keywords):
        ctx.report(RULE.code, node, call=f"einops.{q.rsplit('.', 1)[-1]}")
