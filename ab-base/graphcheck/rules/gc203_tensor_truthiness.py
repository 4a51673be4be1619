"""GC203 tensor-truthiness — Flags `not t`, `t and u`, `t or u` and `a if t else b` on tensors."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC203',
    name='tensor-truthiness',
    message='`{op}` on a device value reads it back to the host',
    hint='use `torch.where`, `torch.logical_and/or` or `~mask`',
    what='Flags `not t`, `t and u`, `t or u`, `a if t else b` and `v in t` on tensors.',
    why='Python must know the value to pick a branch, so it reads the device value back (a sync). Under capture the read fails; and even where it could be read, a graph records one path only and replays it whatever the data says next time.',
    example='y = a if flag_t else b',
    instead='y = torch.where(flag_t, a, b)',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()


@on(ast.IfExp)
def check_ifexp(ctx, node: ast.IfExp) -> None:
    if ctx.dev(node.test):
        ctx.report(RULE.code, node.test, op="x if t else y")


@on(ast.BoolOp)
def check_boolop(ctx, node: ast.BoolOp) -> None:
    if ctx.any_dev(node.values):
        ctx.report(RULE.code, node, op="and" if isinstance(node.op, ast.And) else "or")


@on(ast.UnaryOp)
def check_not(ctx, node: ast.UnaryOp) -> None:
    if isinstance(node.op, ast.Not) and ctx.dev(node.operand):
        ctx.report(RULE.code, node, op="not")


@on(ast.Compare)
def check_in(ctx, node: ast.Compare) -> None:
    # `0.0 in mask` calls Tensor.__contains__: (mask == 0.0).any() read back as a bool
    for op, right in zip(node.ops, node.comparators):
        if isinstance(op, (ast.In, ast.NotIn)) and ctx.dev(right):
            ctx.report(RULE.code, node, op="in")
            return
