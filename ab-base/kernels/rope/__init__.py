"""rope: the partial interleaved RoPE of the decode (`dsv4_model.rope.rope_tail`) in one Triton launch on CUDA
(``triton_kernel.py``; within fp32 rounding of the reference, not bit-exact: Triton may contract a * cos - b * sin
into an FMA), the PyTorch reference (``reference.py``) elsewhere.

    rope_tail(x [.., D], cs [.., rd/2, 2] fp32, rd, inverse=False) -> [.., D] x.dtype

The first D - rd dims are copied, the last rd rotated as interleaved pairs (2i, 2i+1) by the cos/sin of cs
(by -angle when `inverse`). cs's leading dims broadcast against x's (they may be fewer, or 1 where x's are not);
the result has x's shape. Shapes are checked with host integers only (capturable).
"""
from __future__ import annotations

import torch

from .._record import Kernel, Op
from .reference import apply_rope_ref, rope_tail_ref  # noqa: F401


def _check(x: torch.Tensor, cs: torch.Tensor, rd: int) -> None:
    if x.dim() < 1 or rd < 2 or rd % 2 or rd > x.shape[-1]:
        raise ValueError(f"rope_tail: rd {rd} must be even, >= 2 and at most the last dim of x {tuple(x.shape)}")
    if cs.dim() < 2 or tuple(cs.shape[-2:]) != (rd // 2, 2):
        raise ValueError(f"rope_tail: cs has shape {tuple(cs.shape)}, expected [.., {rd // 2}, 2] for rd {rd}")
    lead, cs_lead = tuple(x.shape[:-1]), tuple(cs.shape[:-2])
    ok = len(cs_lead) <= len(lead) and all(c in (1, n) for c, n in zip(cs_lead[::-1], lead[::-1]))
    if not ok:
        raise ValueError(f"rope_tail: cs's leading dims {cs_lead} do not broadcast to x's {lead}")


def rope_tail(x: torch.Tensor, cs: torch.Tensor, rd: int, inverse: bool = False) -> torch.Tensor:
    _check(x, cs, rd)
    if x.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import rope_tail_triton
        return rope_tail_triton(x, cs, rd, inverse)
    return rope_tail_ref(x, cs, rd, inverse)


KERNEL = Kernel(ops=(
    Op("rope_tail", rope_tail, rope_tail_ref, targets=("rope_tail",), parity=("test_rope_tail_parity",),
       decode=("rope", "RoPE")),
))
