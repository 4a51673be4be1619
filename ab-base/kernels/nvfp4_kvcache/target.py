"""Capture targets of dsv4_kernels.nvfp4_kvcache, named by its KERNEL record: `graphcheck capture dsv4_kernels.targets:nvfp4_kvcache`."""
from __future__ import annotations

import torch

from graphcheck.target import Target

from .._capture import device as _dev, generator as _gen


def nvfp4_kvcache(M: int = 256, N: int = 512) -> Target:
    from . import dequantize_nvfp4_kvcache
    dev = _dev()

    def inputs(k):
        g = _gen(k)
        fp4 = torch.randint(0, 256, (M, N // 2), generator=g, dtype=torch.uint8)
        sf = (torch.rand(M, N // 16, generator=g) * 4).to(torch.float8_e4m3fn)
        gs = torch.rand(M, generator=g) + 0.5
        return fp4.to(dev), sf.to(dev), gs.to(dev)

    return Target(step=lambda a: dequantize_nvfp4_kvcache(*a, M, N), make_inputs=inputs, state=dict,
                  name="nvfp4_kvcache", device=dev)
