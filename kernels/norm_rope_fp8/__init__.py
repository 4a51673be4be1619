"""norm_rope_fp8: the kv path's RMSNorm + partial RoPE + FP8 fake quant of the unrotated dims (`Attention.qkv`), a
compressed entry's cast + RMSNorm + RoPE (`Compressor.finish`), and the FP8 fake quant of the unrotated dims alone
(`Attention.nope_fp8`), each one Triton launch on CUDA (``triton_kernel.py``: the chained kernels' steps at their
rounding points), the PyTorch references (``reference.py``: the calls the modules made) elsewhere.

    norm_rope_fp8(x [.., D], weight [D] fp32, eps, cs [.., rd/2, 2] fp32, rd, dtype=None, block=0) -> [.., D] dtype
        (dtype None: x.dtype; block 0: no FP8 sim)
    fp8_nope(x [.., D], rd, block) -> [.., D] x.dtype
    norm_fp8(x [.., D], weight [D] fp32, eps, block) -> [.., D] x.dtype: RMSNorm, then the FP8 sim of every dim

cs's leading dims broadcast against x's as `dsv4_kernels.rope_tail`'s; block must divide D - rd. Shapes are checked
with host integers only (capturable).
"""
from __future__ import annotations

import torch

from .._record import Kernel, Op
from ..rope import _check as _check_rope
from .reference import fp8_nope_ref, norm_fp8_ref, norm_rope_fp8_ref  # noqa: F401


def _check_block(name: str, x: torch.Tensor, rd: int, block: int) -> None:
    nope = x.shape[-1] - rd
    if block < 0 or block and nope % block:
        raise ValueError(f"{name}: block {block} must divide the {nope} unrotated dims of x {tuple(x.shape)} "
                         f"(rd {rd}), or be 0 for no FP8 sim")


def _check_weight(name: str, x: torch.Tensor, weight: torch.Tensor) -> None:
    if tuple(weight.shape) != (x.shape[-1],):
        raise ValueError(f"{name}: weight has shape {tuple(weight.shape)}, expected ({x.shape[-1]},) for x "
                         f"{tuple(x.shape)}")


def norm_rope_fp8(x: torch.Tensor, weight: torch.Tensor, eps: float, cs: torch.Tensor, rd: int,
                  dtype: torch.dtype | None = None, block: int = 0) -> torch.Tensor:
    _check_rope(x, cs, rd)
    _check_block("norm_rope_fp8", x, rd, block)
    _check_weight("norm_rope_fp8", x, weight)
    if x.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import norm_rope_fp8_triton
        return norm_rope_fp8_triton(x, weight, eps, cs, rd, dtype, block)
    return norm_rope_fp8_ref(x, weight, eps, cs, rd, dtype, block)


def fp8_nope(x: torch.Tensor, rd: int, block: int) -> torch.Tensor:
    if x.dim() < 1 or not 0 < rd < x.shape[-1] or block < 1:
        raise ValueError(f"fp8_nope: rd {rd} must leave unrotated dims of x {tuple(x.shape)} and block {block} be >= 1")
    _check_block("fp8_nope", x, rd, block)
    if x.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import fp8_nope_triton
        return fp8_nope_triton(x, rd, block)
    return fp8_nope_ref(x, rd, block)


def norm_fp8(x: torch.Tensor, weight: torch.Tensor, eps: float, block: int) -> torch.Tensor:
    if x.dim() < 1 or block < 1 or x.shape[-1] % block:
        raise ValueError(f"norm_fp8: block {block} must be >= 1 and divide the last dim of x {tuple(x.shape)}")
    _check_weight("norm_fp8", x, weight)
    if x.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import norm_fp8_triton
        return norm_fp8_triton(x, weight, eps, block)
    return norm_fp8_ref(x, weight, eps, block)


KERNEL = Kernel(ops=(
    Op("norm_rope_fp8", norm_rope_fp8, norm_rope_fp8_ref, targets=("norm_rope_fp8_kv", "norm_rope_fp8_entry"),
       parity=("test_norm_rope_fp8_parity",), decode=("norm_rope_fp8", "RMSNorm + RoPE (+ FP8)")),
    Op("fp8_nope", fp8_nope, fp8_nope_ref, targets=("fp8_nope",), parity=("test_fp8_nope_parity",),
       decode=("fp8_nope", "FP8 nope")),
    Op("norm_fp8", norm_fp8, norm_fp8_ref, targets=("norm_fp8",), parity=("test_norm_fp8_parity",),
       decode=("norm_fp8", "RMSNorm + FP8")),
), capability=(8, 9))
