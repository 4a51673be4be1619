"""Capture targets of dsv4_kernels.rope, named by its KERNEL record: `graphcheck capture dsv4_kernels.targets:rope_tail`."""
from __future__ import annotations

import torch

from graphcheck.target import Target

from .._capture import device as _dev, generator as _gen


def _q_inputs(rows: int, heads: int, d: int, rd: int, dev: str):
    """make_inputs of the decode's q: step i's x [rows, 1, heads, d] (bf16 on CUDA) and a fresh per-row table
    [rows, 1, 1, rd/2, 2] (also the fused q norm + RoPE's targets)."""
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def inputs(i):
        g = _gen(i)
        ang = torch.rand(rows, 1, 1, rd // 2, generator=g) * 100
        return (torch.randn(rows, 1, heads, d, generator=g) * 2).to(dev, dt), torch.stack([ang.cos(), ang.sin()], -1).to(dev)
    return inputs


def rope_tail(rows: int = 8, heads: int = 64, d: int = 512, rd: int = 64, inverse: bool = False) -> Target:
    """The decode's q rotation: x [rows, 1, heads, d] with a fresh per-row table [rows, 1, 1, rd/2, 2] each step."""
    from . import rope_tail as fn
    dev = _dev()
    inputs = _q_inputs(rows, heads, d, rd, dev)
    return Target(step=lambda a: fn(a[0], a[1], rd, inverse), make_inputs=inputs, state=dict,
                  name=f"rope_tail[{rows}x{heads}x{d}/{rd}{', inverse' if inverse else ''}]", device=dev)
