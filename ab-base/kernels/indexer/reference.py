"""PyTorch reference of the lightning indexer's scores (`dsv4_model.indexer.Indexer.scores` after its weight
projection), with the official release's numerics: DeepSeek's `inference/model.py` `Indexer.forward` (lines 418-421
at the commit the oracle cites) holds the whole score chain in the model dtype (bf16): the per-head dots
q_h . k_n (fp32 accumulation, rounded to bf16), the ReLU, the product with the bf16 head weight (rounded), and the
sum over heads (fp32 accumulation, rounded once). In fp32 (the debugging dtype) the roundings are no-ops."""
from __future__ import annotations

import torch


def index_scores_ref(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """q [B,T,Hi,Di], k [B,N,Di] (the compressed index keys), w [B,T,Hi] (per-head weights, scale included, in the
    model dtype) -> I [B,T,N] fp32 holding the model-dtype values of sum_h w_h * ReLU(q_h . k_n)."""
    dt = q.dtype
    s = torch.einsum("bthd,bnd->bthn", q.float(), k.float()).to(dt).relu()
    return (s * w.to(dt).unsqueeze(-1)).float().sum(-2).to(dt).float()


def topk_blocks_ref(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k best blocks per row of scores [.., N], ties to the lower index. The ReLU makes exact ties
    common (section 10.10), and bf16 scores more so; the official code takes CUDA `topk`, whose order among equal
    scores is unspecified, so every path here (reference, graph-safe, kernel, oracle) picks through this one stable
    order."""
    return scores.sort(dim=-1, descending=True, stable=True).indices[..., :k]


def gather_picks_ref(ent: torch.Tensor, sel: torch.Tensor) -> torch.Tensor:
    """The CSA attention's picked compressed entries: ent [B, N, D], sel [B, k] int64 (the top-k, fixed k) ->
    [B, k, D], out[b, j] = ent[b, sel[b, j]] (the decode's `torch.gather`)."""
    return torch.gather(ent, 1, sel.unsqueeze(-1).expand(-1, -1, ent.shape[-1]))
