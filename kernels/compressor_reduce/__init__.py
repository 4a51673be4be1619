"""compressor_reduce: CSA (8 slots, two series) and HCA (128 slots) softmax-weighted reduction.

Dispatch: the CUDA kernel (``kernel.cu``, JIT-built for sm_90 on first use) when the inputs are on a GPU and
nvcc is present; the PyTorch reference otherwise. ``GRAPHCHECK_KERNELS=reference`` forces the reference.
"""
from __future__ import annotations

import torch

from .._select import use_kernel
from .reference import compressor_reduce_ref


def _check(kv: torch.Tensor, gate: torch.Tensor, bias: torch.Tensor) -> None:
    if kv.shape != gate.shape or kv.dim() != 3:
        raise ValueError(f"compressor_reduce: kv {tuple(kv.shape)} and gate {tuple(gate.shape)} must both be [N, S, D]")
    if tuple(bias.shape) != tuple(kv.shape[1:]):
        raise ValueError(f"compressor_reduce: bias has shape {tuple(bias.shape)}, expected {tuple(kv.shape[1:])}")


def compressor_reduce(kv: torch.Tensor, gate: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    _check(kv, gate, bias)
    if use_kernel("compressor_reduce", kv):
        from .build import cuda_compressor_reduce
        return cuda_compressor_reduce(kv, gate, bias)
    return compressor_reduce_ref(kv, gate, bias)
