"""PyTorch reference of RMSNorm (`dsv4_model.linear.RMSNorm` and the unweighted per-head norm `unweighted_rms`):
the exact formula the model always used, so the reference path is unchanged."""
from __future__ import annotations

import torch


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """x [.., N] -> (weight * (xf * rsqrt(mean(xf^2) + eps))).to(x.dtype); weight [N] fp32 or None (unweighted)."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y if weight is None else weight * y).to(x.dtype)
