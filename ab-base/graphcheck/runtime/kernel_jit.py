"""CuTeDSL at run time: what the audit and the capture layer see of a CuTeDSL kernel inside the step.

Three hazards are specific to a kernel DSL that compiles from Python:
- a JIT compile in the step: `cute.compile(fn, ...)`, or a direct call of a `@cute.jit` function, which traces its
  Python body on every call and compiles on a JIT-cache miss (the first call of a new shape, dtype or constant: a
  compiled-kernel cache keyed by something that changes per step compiles every step) -> GC802;
- a launch that is not on the current stream: a compiled function called with stream 0 / the default stream
  (GC803), with another stream, or whose signature takes no stream at all, so its launches go to the default stream
  (GC801). Under capture that work is not recorded: the graph replays nothing, or the capture fails;
- host reads while packing a kernel's arguments (a device tensor turned into a scalar argument): those are seen by
  the portable audit as the readback they are; this module only makes CuTeDSL's own frames internal, so the finding
  names the user's launch line rather than a line inside cutlass.

Nothing here imports cutlass: the hooks are installed only when the step's code has already imported it
(`cutlass.base_dsl` in `sys.modules`), so a project without CuTeDSL pays one dict lookup. The hooks patch the DSL's
classes for the duration of the context, on the entering thread only, and record through a `Recorder` under the
codes the rule catalogue assigns (`runtime_signatures()`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import threading
from typing import Any

from .. import rules as _rules
from .attribution import add_internal_dir, user_stack
from .recorder import Recorder

CODES = _rules.runtime_signatures()
# The names this module reports; each must be claimed by one rule's RUNTIME tuple (tests/graphcheck/test_runtime.py).
EMITS = frozenset({"cutlass.cute.compile", "cutlass.cute.jit", "cutlass.cute.launch_default_stream",
                   "cutlass.cute.launch_other_stream", "cutlass.cute.launch_without_stream"})


def loaded() -> bool:
    """Whether the process has imported CuTeDSL (the hooks have something to patch)."""
    return "cutlass.base_dsl.dsl" in sys.modules and "cutlass.base_dsl.compiler" in sys.modules


def _func_name(func: Any) -> str:
    f = getattr(func, "__func__", func)
    while hasattr(f, "__wrapped__"):
        f = f.__wrapped__
    return getattr(f, "__qualname__", getattr(f, "__name__", repr(f)))


def _stream_handle(v: Any) -> int | None:
    """The CUstream handle of a launch argument (a cuda-python CUstream or a torch.cuda.Stream), else None."""
    if type(v).__name__ == "CUstream":
        with contextlib.suppress(Exception):
            return int(v)
    cs = getattr(v, "cuda_stream", None)
    return cs if isinstance(cs, int) else None


def _takes_stream(compiled: Any) -> bool | None:
    """Whether the compiled function's signature has a CUstream parameter (None when it cannot be told)."""
    sig = getattr(getattr(compiled, "execution_args", None), "signature", None)
    if sig is None:
        return None
    return any("CUstream" in str(p.annotation) or "Stream" in str(p.annotation) for p in sig.parameters.values())


class KernelJitAudit:
    """Context manager: CuTeDSL compiles, traces and off-stream launches made by the step, recorded in `recorder`.

    `armed` may be switched off (warm-up: compiling there is what warm-up is for) and on again."""

    def __init__(self, recorder: Recorder | None = None):
        self.recorder = recorder if recorder is not None else Recorder()
        self.thread = threading.get_ident()
        self.armed = True
        self.depth = 0
        self.compiles = 0          # compiles while armed: the capture layer does not replay a graph made across one
        self._stack = contextlib.ExitStack()

    def _event(self, name: str, frame, breaks: bool, **fmt: str) -> None:
        self.recorder.record(CODES[name], fmt.pop("op"), user_stack(frame), breaks_capture=breaks, **fmt)

    def _live(self) -> bool:
        return self.armed and self.depth == 0 and threading.get_ident() == self.thread

    def _patch(self, owner: Any, attr: str, make) -> None:
        orig = owner.__dict__[attr]
        wrapper = make(orig)
        wrapper.__wrapped__ = orig  # type: ignore[attr-defined]
        setattr(owner, attr, wrapper)
        self._stack.callback(setattr, owner, attr, orig)

    def __enter__(self) -> "KernelJitAudit":
        self.thread = threading.get_ident()
        if not loaded():
            return self
        compiler = sys.modules["cutlass.base_dsl.compiler"]
        dsl = sys.modules["cutlass.base_dsl.dsl"]
        add_internal_dir(os.path.dirname(os.path.dirname(compiler.__file__)))     # the `cutlass` package
        audit = self

        def compile_hook(orig):
            def _compile(self_, func, *args, **kwargs):
                if audit._live():
                    audit.compiles += 1
                    name = _func_name(func)
                    audit._event("cutlass.cute.compile", sys._getframe(1), False, op=f"cute.compile({name})",
                                 call=f"cute.compile({name})")
                audit.depth += 1
                try:
                    out = orig(self_, func, *args, **kwargs)
                finally:
                    audit.depth -= 1
                with contextlib.suppress(Exception):
                    out._graphcheck_name = _func_name(func)
                return out
            return _compile

        miss: list[int] = []

        def cache_hook(orig):
            def compile_and_cache(self_, *args, **kwargs):
                miss.append(1)
                return orig(self_, *args, **kwargs)
            return compile_and_cache

        def func_hook(orig):
            def _func(self_, funcBody, *args, **kwargs):
                # a top-level host call (not a nested @cute.jit inside a trace, not cute.compile's own entry)
                top = audit._live() and not kwargs.get("compile_only") and dsl.ir.Context.current is None
                if not top:
                    return orig(self_, funcBody, *args, **kwargs)
                start = len(miss)
                audit.depth += 1
                try:
                    return orig(self_, funcBody, *args, **kwargs)
                finally:
                    audit.depth -= 1
                    name = _func_name(funcBody)
                    what = "JIT cache miss: compiled" if len(miss) > start else "traced on every call"
                    audit._event("cutlass.cute.jit", sys._getframe(1), False, op=f"@cute.jit {name}",
                                 call=f"{name}(...) ({what})")
            return _func

        self._patch(compiler.CompileCallable, "_compile", compile_hook)
        for cls in (dsl.BaseDSL, *_subclasses(dsl.BaseDSL)):
            if "compile_and_cache" in cls.__dict__:
                self._patch(cls, "compile_and_cache", cache_hook)
        self._patch(dsl.BaseDSL, "_func", func_hook)
        executor = sys.modules.get("cutlass.base_dsl.jit_executor")
        if executor is not None and "__call__" in executor.JitCompiledFunction.__dict__:
            self._patch(executor.JitCompiledFunction, "__call__", self._launch_hook)
        return self

    def _launch_hook(self, orig):
        audit = self

        def __call__(self_, *args, **kwargs):
            if audit._live():
                audit._check_stream(self_, args, kwargs, sys._getframe(1))
            audit.depth += 1
            try:
                return orig(self_, *args, **kwargs)
            finally:
                audit.depth -= 1
        return __call__

    def _check_stream(self, compiled, args, kwargs, frame) -> None:
        """A launch's stream against torch's current one (CUDA only: without a device there is no current stream)."""
        import torch
        if not torch.cuda.is_available():
            return
        name = getattr(compiled, "_graphcheck_name", None) or getattr(compiled, "function_name", "compiled kernel")
        handles = [h for h in map(_stream_handle, (*args, *kwargs.values())) if h is not None]
        current = torch.cuda.current_stream().cuda_stream
        if not handles:
            if _takes_stream(compiled) is False:
                self._event("cutlass.cute.launch_without_stream", frame, True, op=f"{name} launch",
                            call=f"{name}(...)")
            return
        for h in handles:
            if h == current:
                continue
            if h == 0 or h == torch.cuda.default_stream().cuda_stream:
                self._event("cutlass.cute.launch_default_stream", frame, True, op=f"{name} launch on stream 0",
                            call=f"{name}(stream=0)")
            else:
                self._event("cutlass.cute.launch_other_stream", frame, True,
                            op=f"{name} launch on stream {h:#x}, current {current:#x}", call=f"{name}(stream={h:#x})")

    def __exit__(self, *exc) -> None:
        self._stack.close()


def _subclasses(cls: type) -> list[type]:
    out, todo = [], list(cls.__subclasses__())
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(c.__subclasses__())
    return out


def armed_after(target, jit: KernelJitAudit, warmup: int):
    """The target with its step arming `jit` after `warmup` calls: the capture layer's warm-up may compile (that is
    what it is for); a compile in the captured step, or in any step after, is the hazard."""
    calls = [0]
    step = target.step

    def armed_step(inputs):
        calls[0] += 1
        jit.armed = calls[0] > warmup
        return step(inputs)

    armed_step.__wrapped__ = step    # Target.location() unwraps to the user's step
    return dataclasses.replace(target, step=armed_step)
