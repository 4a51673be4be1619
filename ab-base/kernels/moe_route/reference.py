"""PyTorch reference of the router after its fp32 product: the score function, the selection-only bias (or the
hash layers' fixed table), the top-k, the weights' renormalisation and route scale, and the picks put in expert
order: the torch calls `Gate.forward` and `decode.moe_step` made, in that order, so the reference path is unchanged.

    moe_route_ref(logits [N, E] fp32, k, route_scale, score_func, bias [E] fp32 | None,
                  tid2eid [V, k] int | None, ids [N] | None) -> (weights [N, k] fp32, idx [N, k] int64)

The picks leave sorted by expert index (each row's weights with them): the order the decode's fixed-shape expert
sum takes (`moe_step` sums the picks in slot order, which is then the reference dispatch's expert order). The
renormalising sum runs over the top-k order (descending score + bias; the hash table's order), as the official
`weights /= weights.sum(-1, keepdim=True)` does before anything reorders them.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

SCORE_FUNCS = ("sqrtsoftplus", "softmax", "sigmoid")


def scores_ref(logits: torch.Tensor, score_func: str) -> torch.Tensor:
    if score_func == "softmax":
        return logits.softmax(-1)
    if score_func == "sigmoid":
        return logits.sigmoid()
    return F.softplus(logits).sqrt()


def moe_route_ref(logits: torch.Tensor, k: int, route_scale: float, score_func: str,
                  bias: torch.Tensor | None = None, tid2eid: torch.Tensor | None = None,
                  ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    scores = scores_ref(logits, score_func)
    idx = tid2eid[ids] if tid2eid is not None else (scores if bias is None else scores + bias).topk(k, dim=-1).indices
    w = scores.gather(-1, idx)
    if score_func != "softmax":          # the official code renormalises all but softmax scores
        w = w / w.sum(-1, keepdim=True)
    w = w * route_scale
    idx, order = idx.sort(-1)
    return w.gather(-1, order), idx
