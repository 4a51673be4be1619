"""nvfp4_gemv: weight-only NVFP4 GEMV for small decode batches (packed e2m1 + e4m3 block scales read once).

Triton kernel (``triton_kernel.py``) on CUDA when Triton is importable; the PyTorch reference otherwise."""
from __future__ import annotations

import torch

from .._select import use_kernel
from .reference import nvfp4_gemv_ref


def nvfp4_gemv(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, weight_scale_2: torch.Tensor) -> torch.Tensor:
    k = weight.shape[1] * 2
    if x.shape[-1] != k:
        raise ValueError(f"nvfp4_gemv: x has {x.shape[-1]} features, the packed weight holds {k}")
    if use_kernel("nvfp4_gemv", x) and x.dtype == torch.bfloat16 and x.dim() == 2 and x.shape[0] <= 8:
        from .triton_kernel import nvfp4_gemv_triton
        return nvfp4_gemv_triton(x, weight, weight_scale, weight_scale_2)
    return nvfp4_gemv_ref(x, weight, weight_scale, weight_scale_2)
