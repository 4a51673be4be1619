"""PyTorch reference of the attention core (`dsv4_model.attention.Attention._attend` before the de-rotation): the exact
formula the model always used, so the reference path is unchanged."""
from __future__ import annotations

import torch


def attention_ref(q: torch.Tensor, K: torch.Tensor, mask: torch.Tensor | None, sink: torch.Tensor,
                  scale: float) -> torch.Tensor:
    """q [B,T,H,D], K [B,T|1,N,D] (V = K), mask [B|1,T,N] bool or None, sink [H] -> o [B,T,H,D] fp32.

    softmax over the N scores (q . K) * scale and the head's sink logit, which takes probability mass but adds no
    value; masked keys get none."""
    K = K.float()                                                                    # V = K: one cast for both
    s = torch.einsum("bthd,btnd->bthn", q.float(), K) * scale
    if mask is not None:
        s = s.masked_fill(~mask.unsqueeze(-2), float("-inf"))
    sink = sink.view(1, 1, -1, 1).expand(*s.shape[:-1], 1)
    p = torch.softmax(torch.cat([s, sink], -1), -1)[..., :-1]
    return torch.einsum("bthn,btnd->bthd", p, K)
