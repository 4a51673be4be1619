"""GC801 launch-without-stream — Flags calls of CuTeDSL-compiled or `@cute.jit` kernels that pass no stream: no `stream=` argument and no positional one (a stream made by `cuda.CUstream(...)`, or named so)."""
from __future__ import annotations

import ast

from ._base import Rule, on
from ._base import dotted

RULE = Rule(
    code='GC801',
    name='launch-without-stream',
    message='kernel launch `{call}` has no explicit current-stream argument',
    hint='pass `stream=cuda.CUstream(torch.cuda.current_stream().cuda_stream)`',
    what='Flags calls of CuTeDSL-compiled or `@cute.jit` kernels that pass no stream: no `stream=` argument and no positional one (a stream made by `cuda.CUstream(...)`, or named so).',
    why='Capture records the capturing stream only. A launch on stream 0 during `torch.cuda.graph(...)` runs once eagerly and leaves an *empty graph* behind, with only a warning: replay then does nothing.',
    example='compiled(a, b)',
    instead='compiled(a, b, stream=cuda.CUstream(torch.cuda.current_stream().cuda_stream))',
    runtime=True,
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
# CuTeDSL (graphcheck/runtime/kernel_jit.py): a compiled function whose signature takes no stream (its launches go
# to the default stream), or called with a stream other than the current one.
RUNTIME: tuple[str, ...] = ("cutlass.cute.launch_without_stream", "cutlass.cute.launch_other_stream")


@on(ast.Call)
def check(ctx, node: ast.Call) -> None:
    # a call from inside a kernel-DSL function would be a device helper call, not a launch: the engine does not read
    # those bodies (static/context.py: compiled_body)
    # a compiled function takes its stream where its signature puts it: `stream=` or a positional stream
    # (`compiled(a, b, stream)`, the stream made by `cuda.CUstream(...)` or named so)
    if ctx.is_kernel(node.func) and not any(k.arg == "stream" for k in node.keywords) \
            and not any(ctx.is_stream(a) for a in node.args):
        ctx.report(RULE.code, node, call=dotted(node.func) or "kernel")
