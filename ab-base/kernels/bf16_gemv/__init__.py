"""bf16_gemv: fp32 activations times a weight held as the checkpoint stores it (bf16), accumulated in fp32 — the LM
head, the router and the compressor projections at decode sizes, reading 2 bytes per weight where the fp32-held
copy read 4.

    bf16_linear(x [..., K] fp32, w [N, K] bf16) -> y [..., N] fp32

Triton on CUDA (`triton_kernel.py`: fp32 FMA over the widened weight, K split over programs for narrow matrices,
split sums added in a fixed order: deterministic), up to MAX_ROWS rows; the PyTorch reference (`reference.py`)
elsewhere and for more rows (a prefill: a GEMM is the better choice there). Both agree with the fp32-weight product
within fp32 rounding of the sum order (the kernel sums K in another order than cuBLAS/MKL).
"""
from __future__ import annotations

import torch

from .._record import Kernel, Op
from .reference import bf16_linear_ref  # noqa: F401

MAX_ROWS = 64     # decode buckets (32 at most today); the kernel re-streams the weight from L2 per 8 rows


def _check(x: torch.Tensor, w: torch.Tensor) -> None:
    if w.dim() != 2 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"bf16_linear: x {tuple(x.shape)} and w {tuple(w.shape)}: expected x [..., K] and w [N, K]")
    if x.dtype != torch.float32 or w.dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"bf16_linear: expected fp32 x and a bf16 (or fp32) weight, found {x.dtype} x and {w.dtype} w")


def bf16_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The kernel path for a bf16 weight with 1..MAX_ROWS rows on CUDA; the reference otherwise."""
    _check(x, w)
    K = x.shape[-1]
    rows = x.numel() // K if K else 0
    if (x.is_cuda and w.is_cuda and w.dtype == torch.bfloat16 and 1 <= rows <= MAX_ROWS
            and KERNEL.available()[0]):
        from .triton_kernel import bf16_linear_triton
        return bf16_linear_triton(x.reshape(rows, K), w).view(*x.shape[:-1], w.shape[0])
    return bf16_linear_ref(x, w)


KERNEL = Kernel(ops=(
    Op("bf16_linear", bf16_linear, bf16_linear_ref, targets=("bf16_linear",), parity=("test_bf16_linear_parity",)),
))
