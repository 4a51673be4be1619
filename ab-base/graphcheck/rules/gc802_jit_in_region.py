"""GC802 jit-in-region — Flags `cute.compile`, `torch.utils.cpp_extension.load/load_inline`, `torch.compile` and `triton.compile` in the captured region."""
from __future__ import annotations

import ast

from ._base import Rule, on
from ._base import dotted

RULE = Rule(
    code='GC802',
    name='jit-in-region',
    message='`{call}` compiles inside the captured region',
    hint='compile at load time and cache by shape class before capture',
    what='Flags `cute.compile`, `torch.utils.cpp_extension.load/load_inline`, `torch.compile` and `triton.compile` in the captured region.',
    why='Compilation runs on the host for seconds, allocates and may launch warm-up work on other streams; under capture that is illegal, and per step it dominates latency.',
    example='fn = cute.compile(kernel, a, b)\nfn(a, b)',
    instead='# at load: self._fn = cute.compile(kernel, a, b)\nself._fn(a, b, stream=cur)',
    runtime=True,
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
# CuTeDSL (graphcheck/runtime/kernel_jit.py): an explicit compile, and a direct `@cute.jit` call (traced each call,
# compiled on a JIT-cache miss).
RUNTIME: tuple[str, ...] = ("cutlass.cute.compile", "cutlass.cute.jit")


_JIT = {"cutlass.cute.compile", "torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline",
        "torch.compile", "triton.compile"}


@on(ast.Call, names=("compile", "load", "load_inline"))
def check(ctx, node: ast.Call) -> None:
    q = ctx.qual(node.func)
    name = dotted(node.func)
    if q in _JIT or name.endswith(("cute.compile", "cpp_extension.load", "cpp_extension.load_inline")):
        ctx.report(RULE.code, node, call=name or q)
