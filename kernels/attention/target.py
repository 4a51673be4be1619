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


def decode_attention_ring(rows: int = 8, heads: int = 64, d: int = 512, window: int = 128, picks: int = 512) -> Target:
    """Fresh queries, window rings with their read order (a rotation per row, as the decode's ring), compressed keys
    (Flash's CSA picks), masks and sinks each step."""
    from . import decode_attention_ring as fn
    dev = _dev()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def inputs(i):
        g = _gen(i)
        q, ring = torch.randn(rows, 1, heads, d, generator=g), torch.randn(rows, window, d, generator=g)
        start = torch.randint(0, window, (rows, 1), generator=g)
        order = (start + torch.arange(window)) % window
        comp = torch.randn(rows, picks, d, generator=g)
        wv, cv = torch.rand(rows, window, generator=g) > 0.2, torch.rand(rows, picks, generator=g) > 0.3
        return (q.to(dev, dt), ring.to(dev, dt), order.to(dev), wv.to(dev), comp.to(dev, dt), cv.to(dev),
                torch.randn(heads, generator=g).to(dev))

    return Target(step=lambda a: fn(*a, d ** -0.5), make_inputs=inputs, state=dict,
                  name=f"decode_attention_ring[{rows}x{heads}x{d}, {window}+{picks} keys]", device=dev)
