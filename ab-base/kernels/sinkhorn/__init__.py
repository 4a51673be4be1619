"""sinkhorn: the mHC mixing matrix (row softmax, then a fixed number of Sinkhorn normalisations) in one Triton
launch on CUDA (``triton_kernel.py``), the PyTorch reference (``reference.py``) elsewhere.

    sinkhorn(logits [..., hc, hc] fp32, iters, eps) -> comb [..., hc, hc] fp32
"""
from __future__ import annotations

import torch

from .._record import Kernel, Op
from .reference import sinkhorn_ref  # noqa: F401


def sinkhorn(logits: torch.Tensor, iters: int, eps: float) -> torch.Tensor:
    if logits.dim() < 2 or logits.shape[-1] != logits.shape[-2]:
        raise ValueError(f"sinkhorn: logits must be [..., hc, hc], found {tuple(logits.shape)}")
    if iters < 1:
        raise ValueError(f"sinkhorn: iters must be >= 1, found {iters}")
    if logits.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import sinkhorn_triton
        return sinkhorn_triton(logits, iters, eps)
    return sinkhorn_ref(logits, iters, eps)


KERNEL = Kernel(ops=(Op("sinkhorn", sinkhorn, sinkhorn_ref, targets=("sinkhorn",), parity=("test_sinkhorn_parity",)),))
