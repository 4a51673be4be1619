"""Capture targets of dsv4_kernels.attention, named by its KERNEL record: `graphcheck capture dsv4_kernels.targets:decode_attention`."""
from __future__ import annotations

import torch

from graphcheck.target import Target

from .._capture import device as _dev, generator as _gen


def decode_attention(rows: int = 8, heads: int = 64, d: int = 512, keys: int = 640) -> Target:
    """Fresh queries, keys (a window plus picked entries: Flash's CSA), masks and sinks each step."""
    from . import decode_attention as fn
    dev = _dev()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def inputs(i):
        g = _gen(i)
        q, K = torch.randn(rows, 1, heads, d, generator=g), torch.randn(rows, 1, keys, d, generator=g)
        mask = torch.rand(rows, 1, keys, generator=g) > 0.3
        return q.to(dev, dt), K.to(dev, dt), mask.to(dev), torch.randn(heads, generator=g).to(dev)

    return Target(step=lambda a: fn(*a, d ** -0.5), make_inputs=inputs, state=dict,
                  name=f"decode_attention[{rows}x{heads}x{d}, {keys} keys]", device=dev)
