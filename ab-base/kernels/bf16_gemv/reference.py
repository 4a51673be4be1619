"""PyTorch reference of the bf16-weight product: what CPU runs, and the parity oracle of the Triton kernel.

The release checkpoint stores the LM head, the router and the compressor projections in bf16; the reference model
computes them in fp32. A bf16 value is exact in fp32, so the product of fp32 activations with the stored bf16
weight widened to fp32 *is* the fp32-weight product: the weight is widened here, for this call only (a transient
copy, never held across steps), and the fp32 GEMM gives bit for bit what an fp32-held weight gave.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def bf16_linear_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """y [..., N] fp32 = x [..., K] fp32 @ w [N, K]^T, w bf16 (or fp32: then exactly `F.linear(x, w)`)."""
    return F.linear(x, w.to(x.dtype))
