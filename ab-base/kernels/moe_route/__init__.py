"""moe_route: the router after its fp32 product (score function, selection-only bias or hash table, top-k,
renormalisation, route scale, the picks in expert order), one Triton launch on CUDA (``triton_kernel.py``: bit for
bit the reference there, ties in score + bias aside), the PyTorch reference (``reference.py``: the torch calls of
`Gate.forward` and `decode.moe_step` it replaces) elsewhere.

    moe_route(logits [N, E] fp32, k, route_scale, score_func, bias [E] fp32 | None, tid2eid [V, k] | None,
              ids [N] | None) -> (weights [N, k] fp32, idx [N, k] int64), the picks sorted by expert index

"softmax" scores (no renormalisation; not the release's) run the reference on every device: the kernel covers
"sqrtsoftplus" (V4) and "sigmoid". Shapes are checked with host integers only (capturable).
"""
from __future__ import annotations

import torch

from .._record import Kernel, Op
from .reference import SCORE_FUNCS, moe_route_ref  # noqa: F401

MAX_K = 63          # the kernel's sum order is torch's for a row of fewer than 64 picks (one warp's lanes)


def _check(logits: torch.Tensor, k: int, score_func: str, bias, tid2eid, ids) -> None:
    if logits.dim() != 2 or logits.dtype != torch.float32:
        raise ValueError(f"moe_route: logits must be [N, E] fp32, found {tuple(logits.shape)} {logits.dtype}")
    N, E = logits.shape
    if not 1 <= k <= min(E, MAX_K):
        raise ValueError(f"moe_route: k = {k} picks of {E} experts: expected 1 <= k <= min(E, {MAX_K})")
    if score_func not in SCORE_FUNCS:
        raise ValueError(f"moe_route: score_func {score_func!r}, expected one of {', '.join(SCORE_FUNCS)}")
    if (tid2eid is None) != (ids is None):
        raise ValueError("moe_route: tid2eid and ids go together (a hash layer's table and the rows' token ids)")
    if tid2eid is not None and (tid2eid.dim() != 2 or tid2eid.shape[1] != k or tuple(ids.shape) != (N,)):
        raise ValueError(f"moe_route: tid2eid {tuple(tid2eid.shape)}, ids {tuple(ids.shape)}: expected [V, {k}] "
                         f"and [{N}]")
    if bias is not None and tuple(bias.shape) != (E,):
        raise ValueError(f"moe_route: bias has shape {tuple(bias.shape)}, expected ({E},)")


def moe_route(logits: torch.Tensor, k: int, route_scale: float, score_func: str, bias: torch.Tensor | None = None,
              tid2eid: torch.Tensor | None = None,
              ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    _check(logits, k, score_func, bias, tid2eid, ids)
    if logits.is_cuda and score_func != "softmax" and KERNEL.available()[0]:
        from .triton_kernel import moe_route_triton
        return moe_route_triton(logits, k, route_scale, score_func, bias, tid2eid, ids)
    return moe_route_ref(logits, k, route_scale, score_func, bias, tid2eid, ids)


KERNEL = Kernel(ops=(
    Op("moe_route", moe_route, moe_route_ref, targets=("moe_route", "moe_route_hash"),
       parity=("test_moe_route_parity",), decode=("route", "MoE routing")),
))
