"""Capture targets of dsv4_kernels.hadamard_fp4, named by its KERNEL record:
`graphcheck capture dsv4_kernels.targets:hadamard_fp4_q`."""
from __future__ import annotations

import torch

from graphcheck.target import Target

from .._capture import device as _dev, generator as _gen


def _target(name: str, shape: tuple, d: int) -> Target:
    from . import hadamard_fp4 as fn
    dev = _dev()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    h = torch.ones(1, 1)
    while h.shape[0] < d:                                                  # the +-1 Sylvester matrix
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    h = h.to(dev)

    def inputs(i):
        return (torch.randn(*shape, generator=_gen(i)) * 2).to(dev, dt)

    return Target(step=lambda x: fn(x, h, 32), make_inputs=inputs, state=dict, name=f"{name}{list(shape)}", device=dev)


def hadamard_fp4_q(rows: int = 8, heads: int = 64, d: int = 128) -> Target:
    """The indexer's q of a V4-Flash CSA layer: [rows, 1, heads, d], fresh each step."""
    return _target("hadamard_fp4_q", (rows, 1, heads, d), d)


def hadamard_fp4_entry(rows: int = 8, d: int = 128) -> Target:
    """The indexer compressor's entry: [rows, d], fresh each step."""
    return _target("hadamard_fp4_entry", (rows, d), d)
