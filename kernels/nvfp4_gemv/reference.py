"""PyTorch reference of the NVFP4 weight-only GEMV/GEMM: y = x @ dequant(W)^T, fp32 accumulate, bf16 out."""
from __future__ import annotations

import torch

from dsv4_model.quant import dequant_nvfp4_weight


def nvfp4_gemv_ref(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, weight_scale_2: torch.Tensor) -> torch.Tensor:
    w = dequant_nvfp4_weight(weight, weight_scale, weight_scale_2, torch.float32)
    return (x.float() @ w.T).to(x.dtype)
