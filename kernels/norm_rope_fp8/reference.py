"""PyTorch references of the kv path's chain after its projection (`Attention.qkv`) and of a compressed entry's
(`Compressor.finish`): the calls the modules made, in their order, so the reference path is unchanged.

    norm_rope_fp8_ref(x, weight, eps, cs, rd, dtype, block): x.to(dtype) (dtype None: as it is), RMSNorm
        (`rms_norm_ref`), the partial RoPE (`rope_tail_ref`), then with block > 0 the FP8 fake quant of the
        unrotated dims in blocks of `block` (`fp8_nope_ref`)
    fp8_nope_ref(x, rd, block): the FP8 fake quant (`fp8_fake_quant_ref`) of the first D - rd dims, the last rd
        as they are (`Attention.nope_fp8`)
    norm_fp8_ref(x, weight, eps, block): RMSNorm (`rms_norm_ref`), then the FP8 fake quant of every dim in blocks of
        `block` (`Attention.q_lora`'s qr as its projections read it: `q_norm`, then their activation simulation)
"""
from __future__ import annotations

import torch

from ..act_quant.reference import fp8_fake_quant_ref
from ..rms_norm.reference import rms_norm_ref
from ..rope.reference import rope_tail_ref


def fp8_nope_ref(x: torch.Tensor, rd: int, block: int) -> torch.Tensor:
    return torch.cat([fp8_fake_quant_ref(x[..., :-rd], block), x[..., -rd:]], -1)


def norm_rope_fp8_ref(x: torch.Tensor, weight: torch.Tensor, eps: float, cs: torch.Tensor, rd: int,
                      dtype: torch.dtype | None = None, block: int = 0) -> torch.Tensor:
    """x [.., D], weight [D] fp32, cs [.., rd/2, 2] fp32 broadcast to x's leading dims -> [.., D] dtype (x.dtype)."""
    y = rope_tail_ref(rms_norm_ref(x if dtype is None else x.to(dtype), weight, eps), cs, rd)
    return fp8_nope_ref(y, rd, block) if block else y


def norm_fp8_ref(x: torch.Tensor, weight: torch.Tensor, eps: float, block: int) -> torch.Tensor:
    """x [.., D], weight [D] fp32 -> [.., D] x.dtype."""
    return fp8_fake_quant_ref(rms_norm_ref(x, weight, eps), block)
