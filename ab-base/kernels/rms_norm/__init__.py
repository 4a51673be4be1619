"""rms_norm: RMSNorm over the last dim, weighted or not, in one Triton launch on CUDA (``triton_kernel.py``; within
fp32 rounding of the reference, not bit-exact), the PyTorch reference (``reference.py``) elsewhere.

    rms_norm(x [.., N], weight [N] fp32 or None, eps) -> [.., N] x.dtype
"""
from __future__ import annotations

import torch

from .._record import Kernel, Op
from .reference import rms_norm_ref  # noqa: F401


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    if weight is not None and tuple(weight.shape) != (x.shape[-1],):
        raise ValueError(f"rms_norm: weight has shape {tuple(weight.shape)}, expected ({x.shape[-1]},) for x {tuple(x.shape)}")
    if x.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import rms_norm_triton
        return rms_norm_triton(x, weight, eps)
    return rms_norm_ref(x, weight, eps)


KERNEL = Kernel(ops=(
    Op("rms_norm", rms_norm, rms_norm_ref, targets=("rms_norm",), parity=("test_rms_norm_parity",),
       decode=("rms", "RMSNorm")),
))
