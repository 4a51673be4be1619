"""indexer: the lightning indexer's scores, sum over heads of w_h * ReLU(q_h . k_n), in one Triton launch on CUDA for
one query token per sequence (``triton_kernel.py``; within fp32 rounding of the reference, not bit-exact), the
PyTorch reference (``reference.py``) elsewhere and for prefill (T > 1).

    index_scores(q [B,T,Hi,Di], k [B,N,Di], w [B,T,Hi] fp32) -> [B,T,N] fp32

and its top-k, the indices of the k best scores per row in the stable descending order (ties to the lower index),
in one Triton launch on CUDA for at most 64 rows of at most 1024 scores (decode), bit for bit the indices of the
reference (torch's stable sort) as the CPU computes them; the sort elsewhere. (torch's CUDA sort orders a NaN whose
sign bit is set last, pytorch#190781; the CPU sort and the kernel put every NaN first.)

    topk_blocks(scores [.., N] fp32, k) -> [.., k] int64

and the CSA gather of the k picked compressed entries, torch's gather by default, a CuTeDSL kernel
(``cutedsl_kernel.py``, compiled per bucket at load through `dsv4_kernels.compiled`) where it is chosen:

    gather_picks(ent [B, N, D], sel [B, k] int64) -> [B, k, D]
"""
from __future__ import annotations

import torch

from .._record import Kernel, Op
from .reference import gather_picks_ref, index_scores_ref, topk_blocks_ref


def index_scores(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    if q.dim() != 4 or k.dim() != 3 or k.shape[0] != q.shape[0] or k.shape[-1] != q.shape[-1]:
        raise ValueError(f"index_scores: expected q [B,T,Hi,Di] and k [B,N,Di], found q {tuple(q.shape)} and k "
                         f"{tuple(k.shape)}")
    if tuple(w.shape) != tuple(q.shape[:3]):
        raise ValueError(f"index_scores: expected w {list(q.shape[:3])} (a weight per row, token and head), found "
                         f"{tuple(w.shape)}")
    if q.shape[1] == 1 and q.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import index_scores_triton
        return index_scores_triton(q, k, w)
    return index_scores_ref(q, k, w)


def topk_blocks(scores: torch.Tensor, k: int) -> torch.Tensor:
    if scores.dim() < 1 or not 0 <= k <= scores.shape[-1]:
        raise ValueError(f"topk_blocks: expected 0 <= k <= N for scores [.., N], found k={k} and scores "
                         f"{tuple(scores.shape)}")
    if scores.dtype != torch.float32:
        raise ValueError(f"topk_blocks: expected fp32 scores (the indexer's), found {scores.dtype}")
    if scores.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import TOPK_MAX_N, TOPK_MAX_ROWS, topk_blocks_triton
        if scores.shape[-1] <= TOPK_MAX_N and scores.numel() <= TOPK_MAX_ROWS * scores.shape[-1]:
            return topk_blocks_triton(scores, k)
    return topk_blocks_ref(scores, k)


def gather_picks(ent: torch.Tensor, sel: torch.Tensor) -> torch.Tensor:
    """ent [B, N, D], sel [B, k] int64 -> [B, k, D]. The default kernel is torch's own gather (one launch, what the
    decode always ran); the CuTeDSL one (``cutedsl_kernel.py``) is built per bucket at load through
    `dsv4_kernels.compiled("gather_picks", ...)`."""
    if ent.dim() != 3 or sel.dim() != 2 or sel.shape[0] != ent.shape[0]:
        raise ValueError(f"gather_picks: expected ent [B, N, D] and sel [B, k], found ent {tuple(ent.shape)} and sel "
                         f"{tuple(sel.shape)}")
    return gather_picks_ref(ent, sel)


KERNEL = Kernel(ops=(
    Op("index_scores", index_scores, index_scores_ref, targets=("index_scores",), parity=("test_index_scores_parity",),
       decode=("score", "indexer scores")),
    Op("topk_blocks", topk_blocks, topk_blocks_ref, targets=("topk_blocks",), parity=("test_topk_blocks_parity",),
       decode=("select", "indexer top-k")),
    # without CuTeDSL the kernel is torch's gather itself (the reference behind a shape check); the CuTeDSL one, held
    # to it bit for bit (tests/kernels/test_cutedsl.py), is the default where it runs: 0.47-0.85x of torch.gather's
    # time at B = 1-32 on the H100 (BENCHMARKS.md, run 45)
    Op("gather_picks", gather_picks, gather_picks_ref, targets=("gather_picks_cutedsl",),
       parity=("test_gather_picks_cutedsl_is_bitwise_the_reference",), cutedsl=True, cutedsl_by_default=True),
))
