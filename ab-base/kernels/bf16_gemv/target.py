"""Capture targets of dsv4_kernels.bf16_gemv, named by its KERNEL record: `graphcheck capture dsv4_kernels.targets:bf16_linear`."""
from __future__ import annotations

import torch

from graphcheck.target import Target

from .._capture import device as _dev, generator as _gen


def bf16_linear(batch: int = 8, n: int = 1024, k: int = 4096) -> Target:
    """fp32 rows against a bf16 weight (the CSA compressor's shape: its K is split, the partial sums added after)."""
    from . import bf16_linear as fn
    dev = _dev()
    w = (torch.randn(n, k, generator=_gen(-1)) / k ** 0.5).to(dev, torch.bfloat16)

    def inputs(i):
        return torch.randn(batch, k, generator=_gen(i)).to(dev)

    return Target(step=lambda x: fn(x, w), make_inputs=inputs, state=dict, name=f"bf16_linear[b={batch}, {n}x{k}]",
                  device=dev)
