"""Capture targets of dsv4_kernels.compressor_pool, named by its KERNEL record:
`graphcheck capture dsv4_kernels.targets:compressor_pool_csa`."""
from __future__ import annotations

import torch

from graphcheck.target import Target

from .._capture import device as _dev, generator as _gen


def _pool_target(rows: int, m: int, d: int, overlap: bool, name: str) -> Target:
    from . import compressor_pool as fn
    dev = _dev()
    S, W = (2 * m, 2 * d) if overlap else (m, d)
    ape = torch.randn(m, W, generator=_gen(-1)).to(dev)

    def inputs(i):
        g = _gen(i)
        return torch.randn(rows, S, W, generator=g).to(dev), torch.randn(rows, S, W, generator=g).to(dev)

    return Target(step=lambda a: fn(a[0], a[1], ape, m, overlap), make_inputs=inputs, state=dict,
                  name=f"{name}[{rows}x{S}x{W}]", device=dev)


def compressor_pool_csa(rows: int = 8, m: int = 4, d: int = 512) -> Target:
    """The CSA rings (2m slots of 2d), fresh each step; the position bias fixed (a weight)."""
    return _pool_target(rows, m, d, True, "compressor_pool_csa")


def compressor_pool_hca(rows: int = 8, m: int = 128, d: int = 512) -> Target:
    return _pool_target(rows, m, d, False, "compressor_pool_hca")
