"""PyTorch reference of the lightning indexer's scores (`dsv4_model.indexer.Indexer._scores` after its weight
projection): the exact formula the model always used, so the reference path is unchanged."""
from __future__ import annotations

import torch


def index_scores_ref(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """q [B,T,Hi,Di], k [B,N,Di] (the compressed index keys), w [B,T,Hi] fp32 (per-head weights, scale included)
    -> I [B,T,N] fp32 = sum_h w_h * ReLU(q_h . k_n)."""
    s = torch.einsum("bthd,bnd->bthn", q.float(), k.float()).relu()
    return (s * w.unsqueeze(-1)).sum(-2)


def topk_blocks_ref(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k best blocks per row of scores [.., N], ties to the lower index. The ReLU makes exact ties
    common (section 10.10), so both decode paths pick through this one stable order rather than topk's unspecified
    one."""
    return scores.sort(dim=-1, descending=True, stable=True).indices[..., :k]


def gather_picks_ref(ent: torch.Tensor, sel: torch.Tensor) -> torch.Tensor:
    """The CSA attention's picked compressed entries: ent [B, N, D], sel [B, k] int64 (the top-k, fixed k) ->
    [B, k, D], out[b, j] = ent[b, sel[b, j]] (the decode's `torch.gather`)."""
    return torch.gather(ent, 1, sel.unsqueeze(-1).expand(-1, -1, ent.shape[-1]))
