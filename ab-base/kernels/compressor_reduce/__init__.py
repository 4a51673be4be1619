"""compressor_reduce: CSA (8 slots, two series) and HCA (128 slots) softmax-weighted reduction.

The Triton kernel (``triton_kernel.py``) for CUDA tensors, the PyTorch reference (``reference.py``) otherwise;
``dsv4_kernels.select("compressor_reduce", device, force_reference)`` fixes the choice once at load.
"""
from __future__ import annotations

import torch

from .._record import Kernel, Op
from .reference import compressor_reduce_ref


def check_compressor_args(kv: torch.Tensor, gate: torch.Tensor, bias: torch.Tensor) -> None:
    if kv.shape != gate.shape or kv.dim() != 3:
        raise ValueError(f"compressor_reduce: kv {tuple(kv.shape)} and gate {tuple(gate.shape)} must both be [N, S, D]")
    if tuple(bias.shape) != tuple(kv.shape[1:]):
        raise ValueError(f"compressor_reduce: bias has shape {tuple(bias.shape)}, expected {tuple(kv.shape[1:])}")


def compressor_reduce_kernel(kv: torch.Tensor, gate: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    check_compressor_args(kv, gate, bias)
    from .triton_kernel import compressor_reduce_triton
    return compressor_reduce_triton(kv, gate, bias)


def compressor_reduce(kv: torch.Tensor, gate: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    check_compressor_args(kv, gate, bias)
    if kv.is_cuda and KERNEL.available()[0]:
        return compressor_reduce_kernel(kv, gate, bias)
    return compressor_reduce_ref(kv, gate, bias)


KERNEL = Kernel(ops=(
    Op("compressor_reduce", compressor_reduce_kernel, compressor_reduce_ref, entry=compressor_reduce,
       # no decode slot: the decode pools with dsv4_kernels.compressor_pool (this program on the rings' own layout)
       targets=("compressor_reduce_csa", "compressor_reduce_hca"), parity=("test_compressor_reduce_parity",)),
))
