"""GC106 tensor-format — Flags `print(t)`, `str(t)`/`repr(t)`, f-strings, `%`-formatting, `.format()` and logging calls with a tensor argument."""
from __future__ import annotations

import ast

from ._base import Rule, on
from ._base import dotted

RULE = Rule(
    code='GC106',
    name='tensor-format',
    message='formatting a tensor (`{call}`) reads it back to the host',
    hint='format `.shape`/`.dtype`, or log outside the captured step',
    what='Flags `print(t)`, `str(t)`/`repr(t)`, f-strings, `%`-formatting, `.format()` and logging calls with a tensor argument.',
    why='Reading a device value on the host blocks the CPU until every queued kernel has finished (a device-to-host sync). During CUDA-graph capture nothing has run yet, so the read fails with `operation failed due to a previous error during capture` — which names neither the op nor the line. Formatting prints the values, so it copies them to the host first.',
    example='logger.debug(f"router scores {scores}")',
    instead='logger.debug(f"router scores {scores.shape}")',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ('torch.Tensor.__format__', 'torch.Tensor.__repr__', 'torch.Tensor.__str__')


_LOG_METHODS = {"debug", "info", "warning", "warn", "error", "critical", "exception", "log"}


@on(ast.Call, names=("print", "str", "repr", "format", *_LOG_METHODS))
def check_call(ctx, node: ast.Call) -> None:
    f = node.func
    if isinstance(f, ast.Name):
        if f.id in ("print", "str", "repr") and not ctx.is_shadowed(f.id) and ctx.any_dev(node.args):
            ctx.report(RULE.code, node, call=f"{f.id}(...)")
    elif isinstance(f, ast.Attribute):
        if f.attr in _LOG_METHODS and ctx.is_logger(f.value) and ctx.any_dev(node.args):
            ctx.report(RULE.code, node, call=f"{dotted(f)}(...)")
        elif f.attr == "format" and isinstance(f.value, ast.Constant) and ctx.any_dev(
                [*node.args, *(k.value for k in node.keywords)]):
            ctx.report(RULE.code, node, call="str.format")


@on(ast.JoinedStr)
def check_fstring(ctx, node: ast.JoinedStr) -> None:
    if ctx.any_dev(v.value for v in node.values if isinstance(v, ast.FormattedValue)):
        ctx.report(RULE.code, node, call="f-string")


@on(ast.BinOp)
def check_percent(ctx, node: ast.BinOp) -> None:
    if isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
        r = node.right
        if ctx.any_dev(r.elts if isinstance(r, ast.Tuple) else [r]):
            ctx.report(RULE.code, node, call="%-format")
