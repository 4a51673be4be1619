"""attention: the decode attention core (scores, mask, softmax with the sink logit, weighted keys; V = K), in two
Triton launches on CUDA for one query token per sequence (``triton_kernel.py``; within fp32 rounding of the
reference, not bit-exact), the PyTorch reference (``reference.py``) elsewhere and for prefill (T > 1).

    decode_attention(q [B,T,H,D], K [B,T|1,N,D], mask [B|1,T,N] bool or None, sink [H], scale) -> o [B,T,H,D] fp32
"""
from __future__ import annotations

import torch

from .._record import Kernel, Op
from .reference import attention_ref


def decode_attention(q: torch.Tensor, K: torch.Tensor, mask: torch.Tensor | None, sink: torch.Tensor,
                     scale: float) -> torch.Tensor:
    if q.dim() != 4 or K.dim() != 4 or K.shape[0] != q.shape[0] or K.shape[-1] != q.shape[-1] \
            or K.shape[1] not in (1, q.shape[1]):
        raise ValueError(f"decode_attention: expected q [B,T,H,D] and K [B,T|1,N,D], found q {tuple(q.shape)} "
                         f"and K {tuple(K.shape)}")
    B, T, H, _ = q.shape
    if tuple(sink.shape) != (H,):
        raise ValueError(f"decode_attention: expected sink [{H}] (one logit per head), found {tuple(sink.shape)}")
    if mask is not None and (mask.dtype != torch.bool or mask.dim() != 3 or mask.shape[0] not in (1, B)
                             or tuple(mask.shape[1:]) != (T, K.shape[2])):
        raise ValueError(f"decode_attention: expected a bool mask [{B}|1,{T},{K.shape[2]}], found "
                         f"{mask.dtype} {tuple(mask.shape)}")
    if T == 1 and q.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import attention_triton
        return attention_triton(q, K, mask, sink, scale)
    return attention_ref(q, K, mask, sink, scale)


KERNEL = Kernel(ops=(
    Op("decode_attention", decode_attention, attention_ref, targets=("decode_attention",),
       parity=("test_decode_attention_parity",), decode=("attend", "attention core")),
))
