"""GC2xx — host control flow on device values."""
from __future__ import annotations

import ast

from ._base import Family, Rule

_WHY = ("Python must know the value to pick a branch, so it reads the device value back (a sync). Under "
        "capture the read fails; and even where it could be read, a graph records one path only and replays it "
        "whatever the data says next time.")

FAMILY = Family("Host control flow on device values", [
    Rule("GC201", "tensor-if", "`if` on a device value branches on the host", "compute both sides and select with `torch.where`, or mask",
         "Flags `if`/`elif` whose condition is a tensor (`if t:`, `if mask.any():`, `if x.sum() > thr:`).", _WHY,
         "if mask.any():\n    x = x * 2", "x = torch.where(mask.any(), x * 2, x)"),
    Rule("GC202", "tensor-while", "`while` on a device value loops on the host", "run a fixed number of iterations on the device",
         "Flags `while` loops whose condition is a tensor, such as a convergence early-exit on a device residual.", _WHY,
         "while (err > tol):\n    x, err = step(x)", "for _ in range(n_iters):   # fixed count, host int\n    x, err = step(x)"),
    Rule("GC203", "tensor-truthiness", "`{op}` on a device value reads it back to the host", "use `torch.where`, `torch.logical_and/or` or `~mask`",
         "Flags `not t`, `t and u`, `t or u` and `a if t else b` on tensors.", _WHY,
         "y = a if flag_t else b", "y = torch.where(flag_t, a, b)"),
])
on = FAMILY.on


@on(ast.If)
def _if(ctx, node: ast.If) -> None:
    if ctx.scope.is_tensor(node.test) and not ctx.mentions_nan_guard(node.test):
        ctx.report("GC201", node.test)


@on(ast.While)
def _while(ctx, node: ast.While) -> None:
    if ctx.scope.is_tensor(node.test) and not ctx.mentions_nan_guard(node.test):
        ctx.report("GC202", node.test)


@on(ast.IfExp)
def _ifexp(ctx, node: ast.IfExp) -> None:
    if ctx.scope.is_tensor(node.test):
        ctx.report("GC203", node.test, op="x if t else y")


@on(ast.BoolOp)
def _boolop(ctx, node: ast.BoolOp) -> None:
    if any(ctx.scope.is_tensor(v) for v in node.values):
        ctx.report("GC203", node, op="and" if isinstance(node.op, ast.And) else "or")


@on(ast.UnaryOp)
def _not(ctx, node: ast.UnaryOp) -> None:
    if isinstance(node.op, ast.Not) and ctx.scope.is_tensor(node.operand):
        ctx.report("GC203", node, op="not")
