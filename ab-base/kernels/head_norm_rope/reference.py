"""PyTorch reference of the attention's q path after its up-projection: the per-head norm in the model dtype's own
arithmetic (`dsv4_kernels.rms_norm.reference.head_rms_ref`, the official release's), then the partial interleaved
RoPE (`dsv4_kernels.rope.reference.rope_tail_ref`): the two calls `Attention.qkv` made, in that order, so the
reference path is unchanged."""
from __future__ import annotations

import torch

from ..rms_norm.reference import head_rms_ref
from ..rope.reference import rope_tail_ref


def head_norm_rope_ref(x: torch.Tensor, cs: torch.Tensor, eps: float, rd: int) -> torch.Tensor:
    """x [.., D] (q's heads), cs [.., rd/2, 2] fp32 broadcast to x's leading dims -> rope_tail(head_rms(x)) x.dtype."""
    return rope_tail_ref(head_rms_ref(x, eps), cs, rd)
