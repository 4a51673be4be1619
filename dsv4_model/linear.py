"""RMSNorm and the policy-aware Linear (format tag + activation simulation), shared by every layer."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .quant import fp8_fake_quant, nvfp4_act_fake_quant


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim), requires_grad=False)  # fp32, as the reference keeps it

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps))).to(x.dtype)


def unweighted_rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


class Linear(nn.Module):
    """y = x W^T with the precision policy's format: bf16 (plain), fp8 (act sim) or fp4 (NVFP4 W4A4 sim).

    The weight is held dequantised in the compute dtype (one-time cost at load). `fmt` says which format the
    policy picked; `act_sim` switches the activation simulation off for A/B runs.
    """

    def __init__(self, in_features: int, out_features: int, fmt: str = "bf16", dtype=torch.float32):
        super().__init__()
        self.in_features, self.out_features, self.fmt = in_features, out_features, fmt
        self.act_sim = True
        self.weight = nn.Parameter(torch.zeros(out_features, in_features, dtype=dtype), requires_grad=False)
        self.register_buffer("input_scale", torch.ones((), dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.act_sim and self.fmt == "fp8":
            x = fp8_fake_quant(x, 128 if self.in_features % 128 == 0 else self.in_features)
        elif self.act_sim and self.fmt == "fp4":
            x = nvfp4_act_fake_quant(x, self.input_scale)
        return F.linear(x.to(self.weight.dtype), self.weight)

    def extra_repr(self) -> str:
        return f"{self.in_features}->{self.out_features}, fmt={self.fmt}"
