"""Capture targets of dsv4_kernels.compressor_reduce, named by its KERNEL record: `graphcheck capture dsv4_kernels.targets:compressor_reduce_csa`."""
from __future__ import annotations

import torch

from graphcheck.target import Target

from .._capture import device as _dev, generator as _gen


def _compressor(slots: int, n: int = 64, d: int = 512) -> Target:
    from . import compressor_reduce
    dev = _dev()
    bias = torch.randn(slots, d, generator=_gen(-1)).to(dev)

    def inputs(k):
        g = _gen(k)
        return torch.randn(n, slots, d, generator=g).to(dev), torch.randn(n, slots, d, generator=g).to(dev)

    return Target(step=lambda kg: compressor_reduce(kg[0], kg[1], bias), make_inputs=inputs, state=dict,
                  name=f"compressor_reduce[{slots} slots]", device=dev)


def compressor_reduce_csa() -> Target:
    return _compressor(8)


def compressor_reduce_hca() -> Target:
    return _compressor(128, n=8)
