"""PyTorch reference of the partial interleaved RoPE (`dsv4_model.rope`): the exact formulas the model always
used, so the reference path is unchanged."""
from __future__ import annotations

import torch


def apply_rope_ref(x: torch.Tensor, cs: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """Rotate interleaved pairs (2i, 2i+1) of x[..., rd]; cs [..., rd/2, 2] broadcast against x's leading dims."""
    xf = x.float().unflatten(-1, (-1, 2))
    a, b = xf[..., 0], xf[..., 1]
    cos, sin = cs[..., 0], cs[..., 1]
    if inverse:
        sin = -sin
    out = torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)
    return out.to(x.dtype)


def rope_tail_ref(x: torch.Tensor, cs: torch.Tensor, rd: int, inverse: bool = False) -> torch.Tensor:
    """x with RoPE applied to its last rd dims (returns a new tensor)."""
    return torch.cat([x[..., :-rd], apply_rope_ref(x[..., -rd:], cs, inverse)], -1)
