"""Capture targets of dsv4_kernels.fused_swiglu, named by its KERNEL record: `graphcheck capture dsv4_kernels.targets:fused_swiglu`."""
from __future__ import annotations

import torch

from graphcheck.target import Target

from .._capture import device as _dev, generator as _gen


def fused_swiglu(rows: int = 8, inter: int = 1024, layout: str = "split") -> Target:
    from . import fused_swiglu as fn
    dev = _dev()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def inputs(k):
        return (torch.randn(rows, 2 * inter, generator=_gen(k)) * 8).to(dev, dt)

    return Target(step=lambda h: fn(h, 10.0, layout), make_inputs=inputs, state=dict, name=f"fused_swiglu[{layout}]", device=dev)
