"""Capture targets of dsv4_kernels.head_norm_rope, named by its KERNEL record:
`graphcheck capture dsv4_kernels.targets:head_norm_rope`."""
from __future__ import annotations

from graphcheck.target import Target

from .._capture import device as _dev
from ..rope.target import _q_inputs


def head_norm_rope(rows: int = 8, heads: int = 64, d: int = 512, rd: int = 64) -> Target:
    """The decode's q: x [rows, 1, heads, d] with a fresh per-row table [rows, 1, 1, rd/2, 2] each step."""
    from . import head_norm_rope as fn
    dev = _dev()
    inputs = _q_inputs(rows, heads, d, rd, dev)
    return Target(step=lambda a: fn(a[0], a[1], 1e-6, rd), make_inputs=inputs, state=dict,
                  name=f"head_norm_rope[{rows}x{heads}x{d}/{rd}]", device=dev)
