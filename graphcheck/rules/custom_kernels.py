"""GC8xx — custom kernels: launches off the current stream, JIT compilation inside the step."""
from __future__ import annotations

import ast

from ._base import Family, Rule
from ..static.inference import dotted

FAMILY = Family("Custom kernels", [
    Rule("GC801", "launch-without-stream", "kernel launch `{call}` has no explicit current-stream argument", "pass `stream=cuda.CUstream(torch.cuda.current_stream().cuda_stream)`",
         "Flags calls of CuTeDSL-compiled or `@cute.jit` kernels without a `stream=` argument, or with stream 0 / the default stream.",
         "Capture records the capturing stream only. A launch on stream 0 during `torch.cuda.graph(...)` runs once "
         "eagerly and leaves an *empty graph* behind, with only a warning: replay then does nothing.",
         "compiled(a, b)", "compiled(a, b, stream=cuda.CUstream(torch.cuda.current_stream().cuda_stream))", runtime=False),
    Rule("GC802", "jit-in-region", "`{call}` compiles inside the captured region", "compile at load time and cache by shape class before capture",
         "Flags `cute.compile`, `torch.utils.cpp_extension.load/load_inline`, `torch.compile` and `triton.compile` in the captured region.",
         "Compilation runs on the host for seconds, allocates and may launch warm-up work on other streams; under "
         "capture that is illegal, and per step it dominates latency.", "fn = cute.compile(kernel, a, b)\nfn(a, b)", "# at load: self._fn = cute.compile(kernel, a, b)\nself._fn(a, b, stream=cur)", runtime=False),
    Rule("GC803", "default-stream", "`{call}` targets the default stream inside the captured region", "use `torch.cuda.current_stream()`",
         "Flags `torch.cuda.default_stream()` and a literal `stream=0`/`stream=None` inside the captured region.",
         "Capture happens on a side stream; work sent to the default stream is not captured (or breaks capture with "
         "an illegal cross-stream dependency).", "with torch.cuda.stream(torch.cuda.default_stream()):\n    k(x)", "k(x, stream=torch.cuda.current_stream())", runtime=False),
])
on = FAMILY.on
_JIT = {"cute.compile", "cpp_extension.load", "cpp_extension.load_inline", "utils.cpp_extension.load",
        "utils.cpp_extension.load_inline", "torch.compile", "triton.compile", "load_inline"}


def _zero_stream(v: ast.AST) -> bool:
    if isinstance(v, ast.Constant) and (v.value == 0 or v.value is None):
        return True
    if isinstance(v, ast.Call) and dotted(v.func).endswith("CUstream") and v.args and isinstance(v.args[0], ast.Constant) \
            and v.args[0].value == 0:
        return True
    return isinstance(v, ast.Call) and dotted(v.func).endswith("default_stream")


@on(ast.Call)
def _calls(ctx, node: ast.Call) -> None:
    name = dotted(node.func)
    if name and any(name == j or name.endswith("." + j) for j in _JIT):
        ctx.report("GC802", node, call=name)
        return
    if name.endswith("default_stream") and name.split(".")[0] in ctx.scope.torch_names:
        ctx.report("GC803", node, call=name + "()")
        return
    stream = [k.value for k in node.keywords if k.arg == "stream"]
    if stream and _zero_stream(stream[0]):
        ctx.report("GC803", node, call="stream=0")
        return
    if ctx.is_kernel(node.func) and not stream:
        ctx.report("GC801", node, call=name or "kernel")
