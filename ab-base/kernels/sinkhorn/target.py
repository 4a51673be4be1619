"""The capture target of the mHC Sinkhorn, named by its KERNEL record: `graphcheck capture dsv4_kernels.targets:sinkhorn`."""
from __future__ import annotations

import torch

from graphcheck.target import Target

from .._capture import device as _dev, generator as _gen


def sinkhorn(rows: int = 8, hc: int = 4) -> Target:
    from . import sinkhorn as fn
    dev = _dev()

    def inputs(k):
        return (torch.randn(rows, hc, hc, generator=_gen(k)) * 3).to(dev)

    return Target(step=lambda z: fn(z, 20, 1e-6), make_inputs=inputs, state=dict, name="sinkhorn", device=dev)
