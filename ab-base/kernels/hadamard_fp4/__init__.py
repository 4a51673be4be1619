"""hadamard_fp4: the lightning indexer's rotation of its q and k (the Hadamard product in fp32, the 1/sqrt(D), the
cast back) with their FP4 simulation, one Triton launch on CUDA (``triton_kernel.py``: butterflies, so the fp32
sums may part from the reference's GEMM by a rounding; see there), the PyTorch reference (``reference.py``: the
calls `Indexer.rotate` made) elsewhere.

    hadamard_fp4(x [.., D], hadamard [D, D] fp32, block=32) -> [.., D] x.dtype

`hadamard` is the +-1 Sylvester matrix the reference multiplies by (`dsv4_model.indexer.hadamard_matrix`); the
kernel computes the same product by butterflies and reads only its size. D is a power of two that `block`
divides. Shapes are checked with host integers only (capturable).
"""
from __future__ import annotations

import torch

from .._record import Kernel, Op
from .reference import hadamard_fp4_ref, hadamard_ref  # noqa: F401


def _check(x: torch.Tensor, hadamard: torch.Tensor, block: int) -> None:
    D = x.shape[-1] if x.dim() else 0
    if D < 2 or D & (D - 1) or tuple(hadamard.shape) != (D, D):
        raise ValueError(f"hadamard_fp4: x {tuple(x.shape)} and hadamard {tuple(hadamard.shape)}: expected a last dim "
                         "D that is a power of two >= 2 and a [D, D] matrix")
    if block < 1 or D % block:
        raise ValueError(f"hadamard_fp4: block {block} must divide the last dim of x {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"hadamard_fp4: x must be a float tensor, found {x.dtype}")


def hadamard_fp4(x: torch.Tensor, hadamard: torch.Tensor, block: int = 32) -> torch.Tensor:
    _check(x, hadamard, block)
    if x.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import hadamard_fp4_triton
        return hadamard_fp4_triton(x, block)
    return hadamard_fp4_ref(x, hadamard, block)


KERNEL = Kernel(ops=(
    Op("hadamard_fp4", hadamard_fp4, hadamard_fp4_ref, targets=("hadamard_fp4_q", "hadamard_fp4_entry"),
       parity=("test_hadamard_fp4_parity",), decode=("hadamard_fp4", "indexer rotation + FP4")),
))
