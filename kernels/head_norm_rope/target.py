"""Capture targets of dsv4_kernels.head_norm_rope, named by its KERNEL record:
`graphcheck capture dsv4_kernels.targets:head_norm_rope`."""
from __future__ import annotations

import torch

from graphcheck.target import Target

from .._capture import device as _dev, generator as _gen


def head_norm_rope(rows: int = 8, heads: int = 64, d: int = 512, rd: int = 64) -> Target:
    """The decode's q: x [rows, 1, heads, d] with a fresh per-row table [rows, 1, 1, rd/2, 2] each step."""
    from . import head_norm_rope as fn
    dev = _dev()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def inputs(i):
        g = _gen(i)
        ang = torch.rand(rows, 1, 1, rd // 2, generator=g) * 100
        return (torch.randn(rows, 1, heads, d, generator=g) * 2).to(dev, dt), torch.stack([ang.cos(), ang.sin()], -1).to(dev)

    return Target(step=lambda a: fn(a[0], a[1], 1e-6, rd), make_inputs=inputs, state=dict,
                  name=f"head_norm_rope[{rows}x{heads}x{d}/{rd}]", device=dev)
