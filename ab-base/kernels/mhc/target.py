"""Capture targets of dsv4_kernels.mhc, named by its KERNEL record: `graphcheck capture dsv4_kernels.targets:mhc_pre`."""
from __future__ import annotations

import torch

from graphcheck.target import Target

from .._capture import device as _dev, generator as _gen


def _mhc_inputs(rows: int, hc: int, d: int, width: int):
    dev = _dev()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def inputs(i):
        g = _gen(i)
        return ((torch.randn(rows, 1, hc, d, generator=g) * 2).to(dev, dt),
                (torch.randn(rows, 1, width, generator=g) * 30).to(dev))
    return dev, inputs


def mhc_pre(rows: int = 8, hc: int = 4, d: int = 4096) -> Target:
    """X and the matmul's mix fresh each step; scale and base fixed (weights)."""
    from . import mhc_pre as fn
    width = (2 + hc) * hc
    dev, inputs = _mhc_inputs(rows, hc, d, width)
    scale, base = (torch.rand(3, generator=_gen(-1)) + 0.5).to(dev), torch.randn(width, generator=_gen(-2)).to(dev)
    return Target(step=lambda a: fn(a[0], a[1], scale, base, 1e-6, 1e-6), make_inputs=inputs, state=dict,
                  name=f"mhc_pre[{rows}x{hc}x{d}]", device=dev)


def mhc_head(rows: int = 8, hc: int = 4, d: int = 4096) -> Target:
    from . import mhc_head as fn
    dev, inputs = _mhc_inputs(rows, hc, d, hc)
    scale, base = (torch.rand(1, generator=_gen(-1)) + 0.5).to(dev), torch.randn(hc, generator=_gen(-2)).to(dev)
    return Target(step=lambda a: fn(a[0], a[1], scale, base, 1e-6, 1e-6), make_inputs=inputs, state=dict,
                  name=f"mhc_head[{rows}x{hc}x{d}]", device=dev)


def mhc_post(rows: int = 8, hc: int = 4, d: int = 4096) -> Target:
    """y, X, post and comb fresh each step."""
    from . import mhc_post as fn
    dev = _dev()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def inputs(i):
        g = _gen(i)
        return (torch.randn(rows, 1, d, generator=g).to(dev, dt), torch.randn(rows, 1, hc, d, generator=g).to(dev, dt),
                (torch.rand(rows, 1, hc, generator=g) * 2).to(dev), torch.rand(rows, 1, hc, hc, generator=g).to(dev))

    return Target(step=lambda a: fn(*a), make_inputs=inputs, state=dict, name=f"mhc_post[{rows}x{hc}x{d}]", device=dev)


def mhc_pre_norm(rows: int = 8, hc: int = 4, d: int = 4096) -> Target:
    """The fused pre + Sinkhorn + RMSNorm prototype: X and the mix fresh each step; scale, base, norm weight fixed."""
    from . import mhc_pre_norm as fn
    width = (2 + hc) * hc
    dev, inputs = _mhc_inputs(rows, hc, d, width)
    scale, base = (torch.rand(3, generator=_gen(-1)) + 0.5).to(dev), torch.randn(width, generator=_gen(-2)).to(dev)
    w = (torch.rand(d, generator=_gen(-3)) + 0.5).to(dev)
    return Target(step=lambda a: fn(a[0], a[1], scale, base, 1e-6, 1e-6, 20, w, 1e-6), make_inputs=inputs,
                  state=dict, name=f"mhc_pre_norm[{rows}x{hc}x{d}]", device=dev)
