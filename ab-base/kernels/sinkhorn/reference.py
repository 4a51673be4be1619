"""PyTorch reference of the mHC mixing matrix: softmax over each row of the [hc, hc] logits, then a fixed number
of Sinkhorn normalisations (columns first, then rows and columns alternately), as the official reference does.
A fixed iteration count, never a host convergence check: the step stays capturable."""
from __future__ import annotations

import torch


def sinkhorn_ref(logits: torch.Tensor, iters: int, eps: float) -> torch.Tensor:
    """logits [..., hc, hc] fp32 -> the doubly (approximately) stochastic comb [..., hc, hc] fp32."""
    comb = torch.softmax(logits, dim=-1) + eps
    comb = comb / (comb.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + eps)
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
    return comb
