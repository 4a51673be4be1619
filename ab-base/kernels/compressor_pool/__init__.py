"""compressor_pool: the compressor's pooling read straight from its rings (CSA: the previous block's series a and
the current block's series b, and their position bias) in one Triton launch on CUDA (``triton_kernel.py``:
`compressor_reduce`'s program on the ring's own layout), the PyTorch reference (``reference.py``: the rows gathered
as the model did, then the reduction) elsewhere.

    compressor_pool(kv [N, S, W] fp32, gate [N, S, W] fp32, ape [m, W], m, overlap) -> [N, D] fp32
        overlap (CSA): S = 2m, W = 2D; else (HCA): S = m, W = D

Shapes are checked with host integers only (capturable).
"""
from __future__ import annotations

import torch

from .._record import Kernel, Op
from .reference import compressor_pool_ref, pool_rows_ref  # noqa: F401


def compressor_pool(kv: torch.Tensor, gate: torch.Tensor, ape: torch.Tensor, m: int, overlap: bool) -> torch.Tensor:
    S, W = (2 * m, ape.shape[-1]) if overlap else (m, ape.shape[-1])
    if kv.dim() != 3 or tuple(kv.shape[1:]) != (S, W) or gate.shape != kv.shape or tuple(ape.shape) != (m, W) or \
            overlap and W % 2:
        raise ValueError(f"compressor_pool: kv {tuple(kv.shape)}, gate {tuple(gate.shape)}, ape {tuple(ape.shape)}, m {m}, "
                         f"overlap {overlap}: expected kv and gate [N, {S}, {W}] and ape [{m}, {W}] "
                         f"({'2m slots of 2D' if overlap else 'm slots of D'})")
    if kv.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import compressor_pool_triton
        return compressor_pool_triton(kv, gate, ape, m, overlap)
    return compressor_pool_ref(kv, gate, ape, m, overlap)


KERNEL = Kernel(ops=(
    Op("compressor_pool", compressor_pool, compressor_pool_ref, targets=("compressor_pool_csa", "compressor_pool_hca"),
       parity=("test_compressor_pool_parity",), decode=("pool", "compressor pooling")),
))
