"""Capture targets of dsv4_kernels.rms_norm, named by its KERNEL record: `graphcheck capture dsv4_kernels.targets:rms_norm`."""
from __future__ import annotations

import torch

from graphcheck.target import Target

from .._capture import device as _dev, generator as _gen, rows_target as _rows_target


def rms_norm(rows: int = 8, n: int = 4096) -> Target:
    from . import rms_norm as fn
    weight = (torch.rand(n, generator=_gen(-1)) + 0.5).to(_dev())
    return _rows_target(f"rms_norm[{rows}x{n}]", lambda x: fn(x, weight, 1e-6), rows, n, 2.0)
