"""Capture targets of dsv4_kernels.act_quant, named by its KERNEL record: `graphcheck capture dsv4_kernels.targets:fp8_fake_quant`."""
from __future__ import annotations

from graphcheck.target import Target

from .._capture import rows_target as _rows_target


def fp8_fake_quant(rows: int = 8, k: int = 4096, block: int = 128) -> Target:
    from . import fp8_fake_quant as fn
    return _rows_target(f"fp8_fake_quant[{rows}x{k}/{block}]", lambda x: fn(x, block), rows, k, 3.0)


def fp4_fake_quant(rows: int = 64, k: int = 128) -> Target:
    from . import fp4_fake_quant as fn
    return _rows_target(f"fp4_fake_quant[{rows}x{k}]", lambda x: fn(x, 32), rows, k, 3.0)
