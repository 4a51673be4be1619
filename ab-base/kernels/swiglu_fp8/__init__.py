"""swiglu_fp8: the shared expert between its up-projections and its down-projection (the SwiGLU in fp32, the cast
to the activations' dtype, the down-projection's FP8 activation simulation), one Triton launch on CUDA
(``triton_kernel.py``, bit for bit the reference there), the PyTorch reference (``reference.py``: the calls it
replaces) elsewhere.

    swiglu_fp8(gate [.., I], up [.., I], limit | None, block) -> [.., I] gate.dtype

limit None: no clamp (the official shared expert); a positive limit clamps as the routed experts do. `block`
divides I. Shapes are checked with host integers only (capturable).
"""
from __future__ import annotations

import torch

from .._record import Kernel, Op
from .reference import swiglu_fp8_ref  # noqa: F401


def _check(gate: torch.Tensor, up: torch.Tensor, limit: float | None, block: int) -> None:
    if gate.shape != up.shape or gate.dtype != up.dtype or not gate.is_floating_point():
        raise ValueError(f"swiglu_fp8: gate {tuple(gate.shape)} {gate.dtype} and up {tuple(up.shape)} {up.dtype}: "
                         "expected float tensors of one shape and dtype")
    if gate.dim() < 1 or block < 1 or gate.shape[-1] % block:
        raise ValueError(f"swiglu_fp8: block {block} must divide the last dim of gate {tuple(gate.shape)}")
    if limit is not None and not limit > 0:
        raise ValueError(f"swiglu_fp8: limit must be None (no clamp) or positive, found {limit!r}")


def swiglu_fp8(gate: torch.Tensor, up: torch.Tensor, limit: float | None, block: int) -> torch.Tensor:
    _check(gate, up, limit, block)
    if gate.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import swiglu_fp8_triton
        return swiglu_fp8_triton(gate, up, limit, block)
    return swiglu_fp8_ref(gate, up, limit, block)


KERNEL = Kernel(capability=(8, 9), ops=(
    Op("swiglu_fp8", swiglu_fp8, swiglu_fp8_ref, targets=("swiglu_fp8",), parity=("test_swiglu_fp8_parity",),
       decode=("swiglu_fp8", "shared expert SwiGLU + FP8")),
))
