"""Capture targets of dsv4_kernels.swiglu_fp8, named by its KERNEL record:
`graphcheck capture dsv4_kernels.targets:swiglu_fp8`."""
from __future__ import annotations

import torch

from graphcheck.target import Target

from .._capture import device as _dev, generator as _gen


def swiglu_fp8(rows: int = 8, inter: int = 2048, block: int = 128) -> Target:
    """V4-Flash's shared expert (width 2048, FP8 blocks of 128): fresh gate and up rows each step."""
    from . import swiglu_fp8 as fn
    dev = _dev()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def inputs(i):
        g = _gen(i)
        return (torch.randn(rows, inter, generator=g) * 3).to(dev, dt), (torch.randn(rows, inter, generator=g) * 3).to(dev, dt)

    return Target(step=lambda a: fn(a[0], a[1], None, block), make_inputs=inputs, state=dict,
                  name=f"swiglu_fp8[{rows}x{inter}/{block}]", device=dev)
