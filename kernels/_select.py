"""Decide once per kernel whether the fast path can run; tests force either path with GRAPHCHECK_KERNELS."""
from __future__ import annotations

import functools
import os
import shutil

import torch


@functools.lru_cache(maxsize=None)
def available(name: str) -> tuple[bool, str]:
    """(usable, reason). Cached: availability is decided once per process."""
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    if name in ("compressor_reduce", "nvfp4_kvcache") and not (shutil.which("nvcc") or os.environ.get("CUDA_HOME")):
        return False, "nvcc not found (needed to JIT-build the CUDA extension)"
    if name == "nvfp4_gemv":
        try:
            import triton  # noqa: F401
        except Exception as e:  # noqa: BLE001
            return False, f"triton not importable ({e.__class__.__name__})"
    if name == "fused_swiglu":
        try:
            import cutlass  # noqa: F401
            import cutlass.cute  # noqa: F401
        except Exception as e:  # noqa: BLE001 - any import failure means no CuTeDSL
            return False, f"nvidia-cutlass-dsl not importable ({e.__class__.__name__})"
    return True, "ok"


def use_kernel(name: str, t: torch.Tensor) -> bool:
    mode = os.environ.get("GRAPHCHECK_KERNELS", "auto")
    if mode == "reference" or not t.is_cuda:
        return False
    ok, reason = available(name)
    if mode == "kernel" and not ok:
        raise RuntimeError(f"GRAPHCHECK_KERNELS=kernel but {name} is unavailable: {reason}")
    return ok
