"""attention: the decode attention core (scores, mask, softmax with the sink logit, weighted keys; V = K), in one or
two Triton launches on CUDA for one query token per sequence (``triton_kernel.py``; within fp32 rounding
of the reference, not bit-exact), the PyTorch reference (``reference.py``) elsewhere and for prefill (T > 1).

    decode_attention(q [B,T,H,D], K [B,T|1,N,D], mask [B|1,T,N] bool or None, sink [H], scale) -> o [B,T,H,D] fp32
    decode_attention_ring(q [B,1,H,D], window [B,W,D], order [B,W] int64, win_valid [B,W] bool,
                          comp [B,M,D] or None, comp_valid [B,M] bool or None, sink [H], scale) -> o [B,1,H,D]

The second is the graph-safe decode's: the keys where the decode keeps them (the window ring read oldest first, then
the compressed keys), o in the keys' dtype; its values are the first's on the keys gathered and concatenated, cast.
"""
from __future__ import annotations

import torch

from .._record import Kernel, Op
from .reference import attention_ref, attention_ring_ref


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


def decode_attention_ring(q: torch.Tensor, window: torch.Tensor, order: torch.Tensor, win_valid: torch.Tensor,
                          comp: torch.Tensor | None, comp_valid: torch.Tensor | None, sink: torch.Tensor,
                          scale: float) -> torch.Tensor:
    if q.dim() != 4 or q.shape[1] != 1 or window.dim() != 3 or window.shape[0] != q.shape[0] \
            or window.shape[-1] != q.shape[-1]:
        raise ValueError(f"decode_attention_ring: expected q [B,1,H,D] and window [B,W,D], found q {tuple(q.shape)} "
                         f"and window {tuple(window.shape)}")
    B, W = window.shape[:2]
    if tuple(order.shape) != (B, W) or order.dtype != torch.int64 or tuple(win_valid.shape) != (B, W) \
            or win_valid.dtype != torch.bool:
        raise ValueError(f"decode_attention_ring: expected order [{B},{W}] int64 and win_valid [{B},{W}] bool, found "
                         f"{order.dtype} {tuple(order.shape)} and {win_valid.dtype} {tuple(win_valid.shape)}")
    if (comp is None) != (comp_valid is None) or comp is not None and (
            comp.dim() != 3 or comp.shape[0] != B or comp.shape[-1] != window.shape[-1] or comp.dtype != window.dtype
            or comp_valid.dtype != torch.bool or tuple(comp_valid.shape) != tuple(comp.shape[:2])):
        raise ValueError(f"decode_attention_ring: expected comp [{B},M,{window.shape[-1]}] {window.dtype} with "
                         f"comp_valid [{B},M] bool, or neither; found "
                         f"{None if comp is None else (comp.dtype, tuple(comp.shape))} and "
                         f"{None if comp_valid is None else (comp_valid.dtype, tuple(comp_valid.shape))}")
    if tuple(sink.shape) != (q.shape[2],):
        raise ValueError(f"decode_attention_ring: expected sink [{q.shape[2]}] (one logit per head), found "
                         f"{tuple(sink.shape)}")
    if q.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import attention_ring_triton
        return attention_ring_triton(q, window, order, win_valid, comp, comp_valid, sink, scale)
    return attention_ring_ref(q, window, order, win_valid, comp, comp_valid, sink, scale)


KERNEL = Kernel(ops=(
    Op("decode_attention", decode_attention, attention_ref, targets=("decode_attention",),
       parity=("test_decode_attention_parity",), decode=("attend", "attention core")),
    Op("decode_attention_ring", decode_attention_ring, attention_ring_ref, targets=("decode_attention_ring",),
       parity=("test_decode_attention_ring_is_the_list_form",), decode=("attend_ring", "attention core on the ring")),
))
