"""The capture target of the mHC Sinkhorn: `graphcheck capture dsv4_kernels.targets:sinkhorn`."""
from __future__ import annotations

import torch

from graphcheck.target import Target


def sinkhorn(rows: int = 8, hc: int = 4) -> Target:
    from . import sinkhorn as fn
    dev = "cuda" if torch.cuda.is_available() else "cpu"

    def inputs(k):
        return (torch.randn(rows, hc, hc, generator=torch.Generator().manual_seed(7000 + k)) * 3).to(dev)

    return Target(step=lambda z: fn(z, 20, 1e-6), make_inputs=inputs, state=dict, name="sinkhorn", device=dev)
