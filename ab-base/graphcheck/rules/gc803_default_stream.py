"""GC803 default-stream — Flags `torch.cuda.default_stream()` and a literal `stream=0`/`stream=None` inside the captured region."""
from __future__ import annotations

import ast

from ._base import Rule, on
from ._base import dotted

RULE = Rule(
    code='GC803',
    name='default-stream',
    message='`{call}` targets the default stream inside the captured region',
    hint='use `torch.cuda.current_stream()`',
    what='Flags `torch.cuda.default_stream()` and a literal `stream=0`/`stream=None` inside the captured region.',
    why='Capture happens on a side stream; work sent to the default stream is not captured (or breaks capture with an illegal cross-stream dependency).',
    example='with torch.cuda.stream(torch.cuda.default_stream()):\n    k(x)',
    instead='k(x, stream=torch.cuda.current_stream())',
    runtime=True,
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
# CuTeDSL (graphcheck/runtime/kernel_jit.py): a compiled function called with stream 0 / the default stream.
RUNTIME: tuple[str, ...] = ("cutlass.cute.launch_default_stream",)


def _zero_stream(ctx, v: ast.AST) -> bool:
    if isinstance(v, ast.Constant) and (v.value == 0 or v.value is None):
        return True
    if isinstance(v, ast.Call) and dotted(v.func).endswith("CUstream") and v.args and isinstance(v.args[0], ast.Constant) \
            and v.args[0].value == 0:
        return True
    return isinstance(v, ast.Call) and ctx.qual(v.func).startswith("torch.") and dotted(v.func).endswith("default_stream")


@on(ast.Call)
def check(ctx, node: ast.Call) -> None:
    q = ctx.qual(node.func)
    if q.startswith("torch.") and q.endswith(".default_stream"):
        ctx.report(RULE.code, node, call=(dotted(node.func) or q) + "()")
        return
    for k in node.keywords:      # runs on every call: a loop, not a list, for the usual none or few keywords
        if k.arg == "stream":
            if _zero_stream(ctx, k.value):
                ctx.report(RULE.code, node, call="stream=0")
            return
