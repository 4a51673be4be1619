"""graphcheck — CUDA-graph conformance and sync auditing for PyTorch inference code.

Four layers merge into one inventory: static AST rules over the captured region, a portable runtime audit
(TorchFunctionMode + TorchDispatchMode), the CUDA sync-debug audit, and capture-under-test (CUDA, or a CPU
emulation). See README.md.
"""
from __future__ import annotations

from typing import Callable, TypeVar

__version__ = "0.1.0"

F = TypeVar("F", bound=Callable)


def capturable(fn: F) -> F:
    """Mark a function as a capture entry point for the static scan. A no-op at run time."""
    return fn


def __getattr__(name: str):
    # Runtime pieces import torch; keep `import graphcheck` (and the static scan) free of that cost.
    if name == "Target":
        from .target import Target
        return Target
    if name in ("no_sync", "allow_sync", "SyncError"):
        from .runtime import guards
        return getattr(guards, name)
    raise AttributeError(f"module 'graphcheck' has no attribute {name!r}")


__all__ = ["capturable", "Target", "no_sync", "allow_sync", "SyncError", "__version__"]
