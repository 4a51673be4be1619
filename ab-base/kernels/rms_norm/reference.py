"""PyTorch reference of RMSNorm (`dsv4_model.linear.RMSNorm` and the unweighted per-head norm `unweighted_rms`):
the exact formula the model always used, so the reference path is unchanged."""
from __future__ import annotations

import torch


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """x [.., N] -> (weight * (xf * rsqrt(mean(xf^2) + eps))).to(x.dtype); weight [N] fp32 or None (unweighted)."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y if weight is None else weight * y).to(x.dtype)


def head_rms_ref(x: torch.Tensor, eps: float) -> torch.Tensor:
    """The per-head q norm as the official release computes it: `q *= rsqrt(q.square().mean(-1) + eps)` in q's own
    dtype (DeepSeek `inference/model.py` Attention.forward, line 498 at the commit the oracle cites), every op rounded
    to bf16 in turn (the square, the mean of fp32-accumulated squares, the sum with eps, the rsqrt, the product); in
    fp32 the same formula as `rms_norm_ref(x, None, eps)`."""
    dt = x.dtype
    sq = x.float().square().to(dt)
    ms = sq.float().mean(-1, keepdim=True).to(dt)
    r = torch.rsqrt((ms.float() + eps).to(dt).float()).to(dt)
    return (x.float() * r.float()).to(dt)
