"""The CUDA sync audit: torch's own `set_sync_debug_mode`, with every warning counted and attributed.

torch warns once per call site through `warnings`, whose default filter shows a location only once; the audit
forces "always" and hooks `showwarning` so each sync is counted and walked back to the user frame. The previous
mode, filters and hook are restored on exit, also when the step raises. Warnings from other threads pass
through untouched.
"""
from __future__ import annotations

import sys
import threading
import warnings

import torch

from .attribution import stack_from_traceback, user_stack
from .recorder import Recorder

_SYNC_TEXT = "called a synchronizing CUDA operation"


class SyncWarningHook:
    """Count every sync warning of this thread at its user frame; other warnings pass through. Filters and the
    `showwarning` hook are restored on exit. Needs no GPU (the CPU tests drive it with torch's warning text)."""

    def __init__(self, recorder: Recorder, claimed=None):
        self.recorder = recorder
        self.claimed = claimed          # callable(path, line) -> bool: already explained by the portable layer
        self._thread = threading.get_ident()

    def __enter__(self) -> "SyncWarningHook":
        self._thread = threading.get_ident()
        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("always")
        prev_show = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if threading.get_ident() == self._thread and _SYNC_TEXT in str(message):
                self.record(user_stack(sys._getframe(1)), str(message).strip())
                return
            prev_show(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        return self

    def record(self, stack, text: str) -> None:
        if stack and self.claimed is not None and self.claimed(stack[0][0], stack[0][1]):
            return
        self.recorder.record("GC008", text.split("\n")[0][:160], stack, breaks_capture=True, detail=text.split("\n")[0][:160])

    def __exit__(self, *exc) -> None:
        self._catch.__exit__(None, None, None)


class CudaSyncAudit:
    def __init__(self, recorder: Recorder, strict: bool = False, claimed=None):
        self.recorder = recorder
        self.strict = strict
        self.hook = SyncWarningHook(recorder, claimed)
        self.enabled = torch.cuda.is_available()

    def __enter__(self) -> "CudaSyncAudit":
        if not self.enabled:
            return self
        self._prev_mode = torch.cuda.get_sync_debug_mode()
        self.hook.__enter__()
        torch.cuda.set_sync_debug_mode("error" if self.strict else "warn")
        return self

    def __exit__(self, etype, exc, tb) -> bool:
        if not self.enabled:
            return False
        torch.cuda.set_sync_debug_mode(self._prev_mode)
        self.hook.__exit__(None, None, None)
        if self.strict and exc is not None and isinstance(exc, RuntimeError) and _SYNC_TEXT in str(exc):
            self.hook.record(stack_from_traceback(tb), str(exc))
            return True          # strict mode stops at the first sync; the finding says where
        return False
