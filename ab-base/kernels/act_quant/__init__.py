"""act_quant: the activation fake-quants of the reference's QAT simulation, each one Triton launch on CUDA
(``triton_kernel.py``, bit-exact with the reference run on CUDA), the PyTorch reference (``reference.py``,
what ``dsv4_model.quant`` uses) elsewhere.

    fp8_fake_quant(x [.., K], block) -> [.., K] x.dtype   e4m3, one power-of-two (ue8m0) scale per block
    fp4_fake_quant(x [.., K], block=32) -> [.., K] x.dtype  e2m1, one power-of-two scale per block

`block` divides K (it may be K itself). Shapes are checked with host integers only (capturable).
"""
from __future__ import annotations

import torch

from .._record import Kernel, Op
from .reference import fp4_fake_quant_ref, fp8_fake_quant_ref  # noqa: F401


def _check(name: str, x: torch.Tensor, block: int) -> None:
    if x.dim() < 1 or block < 1 or x.shape[-1] % block:
        raise ValueError(f"{name}: block {block} must divide the last dim of x {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{name}: x must be a float tensor, found {x.dtype}")


def fp8_fake_quant(x: torch.Tensor, block: int) -> torch.Tensor:
    _check("fp8_fake_quant", x, block)
    if x.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import fp8_fake_quant_triton
        return fp8_fake_quant_triton(x, block)
    return fp8_fake_quant_ref(x, block)


def fp4_fake_quant(x: torch.Tensor, block: int = 32) -> torch.Tensor:
    _check("fp4_fake_quant", x, block)
    if x.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import fp4_fake_quant_triton
        return fp4_fake_quant_triton(x, block)
    return fp4_fake_quant_ref(x, block)


KERNEL = Kernel(capability=(8, 9), ops=(
    Op("fp8_fake_quant", fp8_fake_quant, fp8_fake_quant_ref, targets=("fp8_fake_quant",),
       parity=("test_fake_quant_parity_bit_exact",), decode=("fp8", "FP8 fake quant")),
    Op("fp4_fake_quant", fp4_fake_quant, fp4_fake_quant_ref, targets=("fp4_fake_quant",),
       # no decode slot of its own: the decode's one FP4 sim (the indexer's) runs inside `hadamard_fp4`
       parity=("test_fake_quant_parity_bit_exact",)),
))
