"""Partial interleaved RoPE on the trailing `rope_head_dim` dims. Two tables: main (no YaRN) for SWA-only
layers; compress (theta 160000 + YaRN, no mscale) for everything in CSA/HCA layers."""
from __future__ import annotations

import math

import torch

from .config import ModelArgs


def rope_freqs(rd: int, theta: float, yarn: tuple[float, int, float, float] | None) -> torch.Tensor:
    freqs = 1.0 / (theta ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd))       # [rd/2]
    if yarn is not None and yarn[1] > 0:           # original_seq_len 0 = no YaRN, as the reference
        factor, orig, beta_fast, beta_slow = yarn
        low = math.floor(rd * math.log(orig / (beta_fast * 2 * math.pi)) / (2 * math.log(theta)))
        high = math.ceil(rd * math.log(orig / (beta_slow * 2 * math.pi)) / (2 * math.log(theta)))
        low, high = max(low, 0), min(high, rd - 1)
        ramp = ((torch.arange(rd // 2, dtype=torch.float64) - low) / max(high - low, 1e-3)).clamp(0, 1)
        freqs = freqs / factor * ramp + freqs * (1 - ramp)
    return freqs


def rope_table(args: ModelArgs, compressed: bool, length: int) -> torch.Tensor:
    """cos/sin table [length, rd/2, 2] (float32) for positions 0..length-1."""
    if compressed:
        f = rope_freqs(args.rope_head_dim, args.compress_rope_theta,
                       (args.rope_factor, args.original_seq_len, args.beta_fast, args.beta_slow))
    else:
        f = rope_freqs(args.rope_head_dim, args.rope_theta, None)
    ang = torch.arange(length, dtype=torch.float64)[:, None] * f[None]
    return torch.stack([ang.cos(), ang.sin()], -1).float()


def apply_rope(x: torch.Tensor, cs: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """Rotate interleaved pairs (2i, 2i+1) of x[..., rd]; cs [..., rd/2, 2] broadcast against x's leading dims."""
    xf = x.float().unflatten(-1, (-1, 2))
    a, b = xf[..., 0], xf[..., 1]
    cos, sin = cs[..., 0], cs[..., 1]
    if inverse:
        sin = -sin
    out = torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)
    return out.to(x.dtype)


def rope_tail(x: torch.Tensor, cs: torch.Tensor, rd: int, inverse: bool = False) -> torch.Tensor:
    """x with RoPE applied to its last rd dims (returns a new tensor)."""
    return torch.cat([x[..., :-rd], apply_rope(x[..., -rd:], cs, inverse)], -1)
