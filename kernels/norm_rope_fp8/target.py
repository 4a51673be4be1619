"""Capture targets of dsv4_kernels.norm_rope_fp8, named by its KERNEL record:
`graphcheck capture dsv4_kernels.targets:norm_rope_fp8_kv`."""
from __future__ import annotations

import torch

from graphcheck.target import Target

from .._capture import device as _dev, generator as _gen


def _table(g, *lead, rd):
    ang = torch.rand(*lead, rd // 2, generator=g) * 100
    return torch.stack([ang.cos(), ang.sin()], -1)


def norm_rope_fp8_kv(rows: int = 8, d: int = 512, rd: int = 64) -> Target:
    """The decode's kv: x [rows, 1, d] (the model dtype) with a fresh per-row table [rows, 1, rd/2, 2] each step, the
    FP8 sim of the unrotated dims in blocks of 64."""
    from . import norm_rope_fp8 as fn
    dev = _dev()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    w = (torch.rand(d, generator=_gen(-1)) + 0.5).to(dev)

    def inputs(i):
        g = _gen(i)
        return (torch.randn(rows, 1, d, generator=g) * 2).to(dev, dt), _table(g, rows, 1, rd=rd).to(dev)

    return Target(step=lambda a: fn(a[0], w, 1e-6, a[1], rd, None, 64), make_inputs=inputs, state=dict,
                  name=f"norm_rope_fp8[kv {rows}x{d}/{rd}]", device=dev)


def norm_rope_fp8_entry(rows: int = 8, d: int = 512, rd: int = 64) -> Target:
    """A compressed entry: the pooled fp32 c [rows, d], cast to the model dtype in the launch, table [rows, rd/2, 2]."""
    from . import norm_rope_fp8 as fn
    dev = _dev()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    w = (torch.rand(d, generator=_gen(-1)) + 0.5).to(dev)

    def inputs(i):
        g = _gen(i)
        return (torch.randn(rows, d, generator=g) * 2).to(dev), _table(g, rows, rd=rd).to(dev)

    return Target(step=lambda a: fn(a[0], w, 1e-6, a[1], rd, dt, 0), make_inputs=inputs, state=dict,
                  name=f"norm_rope_fp8[entry {rows}x{d}/{rd}]", device=dev)


def fp8_nope(rows: int = 8, d: int = 512, rd: int = 64) -> Target:
    from . import fp8_nope as fn
    dev = _dev()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def inputs(i):
        return (torch.randn(rows, 1, d, generator=_gen(i)) * 2).to(dev, dt)

    return Target(step=lambda x: fn(x, rd, 64), make_inputs=inputs, state=dict, name=f"fp8_nope[{rows}x{d}/{rd}]",
                  device=dev)


def norm_fp8(rows: int = 8, d: int = 1024, block: int = 128) -> Target:
    """The decode's qr: q_norm of x [rows, 1, d] (the model dtype) with its projections' FP8 sim in blocks of 128."""
    from . import norm_fp8 as fn
    dev = _dev()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    w = (torch.rand(d, generator=_gen(-1)) + 0.5).to(dev)

    def inputs(i):
        return (torch.randn(rows, 1, d, generator=_gen(i)) * 2).to(dev, dt)

    return Target(step=lambda x: fn(x, w, 1e-6, block), make_inputs=inputs, state=dict,
                  name=f"norm_fp8[{rows}x{d}/{block}]", device=dev)
