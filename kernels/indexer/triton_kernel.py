"""The lightning indexer's scores in Triton for one query token per sequence: every head's dot with a block of
compressed keys, the ReLU and the weighted sum over heads in one launch, where the reference runs six (two fp32
casts, one of the whole key list, a batched GEMM, the ReLU, the weighting, the sum over heads, each over
[B, Hi, N] fp32).

One program per (row, block of keys): all heads at once (Flash: 64 x 128, a tensor-core M of 64), so each key is
read once. Official numerics (bf16 q and keys, the model dtype): the dots rounded to bf16, the ReLU, the product
with the bf16 head weight rounded, the sum over heads in fp32 rounded once (the reference's chain, as the official
`Indexer.forward` computes it in bf16); the sum over heads runs in another order than the CPU's, and the rounding
after it makes that order rarely visible. fp32 inputs (the debugging dtype): fp32, as the reference's einsum. Where q and the keys are bf16 (the model dtype; both are
FP4-simulated values) they are exact in TF32 and one TF32 product is exact; fp32 inputs take TF32x3 (three TF32
products of split operands, near fp32 rounding; IEEE FMAs spill at 64 heads x 64 keys). The sum
over heads runs in another order than the reference's: results agree to fp32 rounding, not bit for bit.
Deterministic (no atomics); launched on torch's current stream (capturable).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._pdl import pdl, pdl_enter
from .._bf16 import round_bf16 as _bf16
from .._rows import rows

BN = 64            # keys per program (bf16); fp32's TF32x3 splits hold twice the operands: half as many, or they spill


@triton.jit
def _index_scores_kernel(q_ptr, k_ptr, w_ptr, o_ptr, N, w_scale, q_row, q_head, k_row, k_key, w_row, o_row,
                         H: tl.constexpr, HP: tl.constexpr, D: tl.constexpr, DP: tl.constexpr, BN: tl.constexpr,
                         PRECISION: tl.constexpr, ROUND: tl.constexpr, NATIVE: tl.constexpr, SCALE: tl.constexpr,
                         PDL: tl.constexpr):
    pdl_enter(PDL)
    b = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1) * BN + tl.arange(0, BN)
    h = tl.arange(0, HP)
    d = tl.arange(0, DP)
    hm, dm, jm = h < H, d < D, j < N
    q = tl.load(q_ptr + b * q_row + h[:, None] * q_head + d[None, :], mask=hm[:, None] & dm[None, :],
                other=0.0).to(tl.float32)                                               # [HP, DP]
    k = tl.load(k_ptr + b * k_row + j[:, None].to(tl.int64) * k_key + d[None, :], mask=jm[:, None] & dm[None, :],
                other=0.0).to(tl.float32)                                               # [BN, DP]
    w = tl.load(w_ptr + b * w_row + h, mask=hm, other=0.0).to(tl.float32)              # padded heads weigh 0
    if SCALE:       # the head weights' scale: an fp32 product, rounded to the weights' dtype (q's) below
        w = w * w_scale
    if ROUND:       # the chain's head weights in bf16
        w = _bf16(w, NATIVE)
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION)
    if ROUND:
        s = _bf16(s, NATIVE)
    s = tl.maximum(s, 0.0, propagate_nan=tl.PropagateNan.ALL)                          # [HP, BN]: ReLU(NaN) = NaN
    s = tl.where(hm[:, None], s, 0.0)                                                   # padded heads: 0 * inf keys
    sw = s * w[:, None]
    if ROUND:
        sw = _bf16(sw, NATIVE)
    out = tl.sum(sw, 0)
    if ROUND:
        out = _bf16(out, NATIVE)
    tl.store(o_ptr + b * o_row + j, out, mask=jm)


def index_scores_triton(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """q [B,1,Hi,Di], k [B,N,Di], w [B,1,Hi] -> [B,1,N] fp32 (shapes checked by the caller); bf16 q: the bf16 chain.
    `scale`: the head weights are (w.float() * scale) in w's dtype, made here rather than in three launches before."""
    B, _, H, D = q.shape
    N = k.shape[1]
    q3, w2 = q[:, 0], w[:, 0]
    if q3.stride(-1) != 1:
        q3 = q3.contiguous()
    if k.stride(-1) != 1:
        k = k.contiguous()
    if w2.stride(-1) != 1:
        w2 = w2.contiguous()
    if w2.dtype != q.dtype or q.dtype not in (torch.bfloat16, torch.float32):
        # the kernel rounds the weights to q's dtype, bf16 or fp32; any other pairing gets its roundings here
        if scale is not None:
            w2, scale = (w2.float() * scale).to(w2.dtype), None
        w2 = w2.to(q.dtype).float()
    out = torch.empty(B, 1, N, dtype=torch.float32, device=q.device)
    if B == 0 or N == 0:
        return out
    if H == 0 or D == 0:
        return out.zero_()
    exact = q.dtype in (torch.bfloat16, torch.float16) and k.dtype in (torch.bfloat16, torch.float16)
    HP, DP = max(16, triton.next_power_of_2(H)), max(16, triton.next_power_of_2(D))
    bn = BN if exact else BN // 2
    _index_scores_kernel[(B, triton.cdiv(N, bn))](
        q3, k, w2, out, N, 1.0 if scale is None else scale, q3.stride(0), q3.stride(1), k.stride(0), k.stride(1),
        w2.stride(0), out.stride(0), H=H, HP=HP, D=D, DP=DP, BN=bn, PRECISION="tf32" if exact else "tf32x3",
        ROUND=q.dtype == torch.bfloat16, NATIVE=q.is_cuda, SCALE=scale is not None, num_warps=4, **pdl(q3))
    return out


# The stable top-k of the indexer by rank: each score's place in the descending stable order is the number of scores
# above it plus the number of equal ones before it, so a program per (row, block of scores) counts, over the whole
# row, and writes the score's index at its place if that is below k. O(N^2) comparisons per row where a sort is
# O(N log N) in several passes: up to N = 1024 blocks (4096 tokens) one launch of 4-7 µs against a 21 µs radix sort
# (H200); past TOPK_MAX_N scores per row or TOPK_MAX_ROWS rows the entry point sorts.
TOPK_MAX_N = 1024  # H200, 8 rows (run 64): 7.0 µs against the sort's 21 at 1024; 71 against 24 at 4096 (O(N^2))
TOPK_MAX_ROWS = 64  # decode rows; prefill's B x T rows cost T x N^2: the sort
BI, BJ = 16, 256   # scores placed per program, compared per step (H200 sweep, run 64: 64/128 took 13.2 us at B=1, 16/256 4.1)


@triton.jit
def _order_key(s):
    """fp32 -> int32 in the order the sort uses: -0.0 equal to +0.0 (a tie, as the comparisons of torch's CPU sort
    see it), NaN above everything (torch sorts NaN as the largest)."""
    s = tl.where(s == 0.0, 0.0, s)
    bits = s.to(tl.int32, bitcast=True)
    key = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    return tl.where(s != s, 0x7FFFFFFF, key)


@triton.jit
def _rank_topk_kernel(s_ptr, o_ptr, N, K, s_row, o_row, BI: tl.constexpr, BJ: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    r = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1) * BI + tl.arange(0, BI)
    im = i < N
    ki = _order_key(tl.load(s_ptr + r * s_row + i, mask=im, other=0.0))
    rank = tl.zeros([BI], tl.int32)
    for j0 in tl.range(0, N, BJ):
        j = j0 + tl.arange(0, BJ)
        kj = _order_key(tl.load(s_ptr + r * s_row + j, mask=j < N, other=0.0))
        before = (kj[None, :] > ki[:, None]) | ((kj[None, :] == ki[:, None]) & (j[None, :] < i[:, None]))
        rank += tl.sum((before & (j < N)[None, :]).to(tl.int32), 1)
    tl.store(o_ptr + r * o_row + rank, i.to(tl.int64), mask=im & (rank < K))


def topk_blocks_triton(scores: torch.Tensor, k: int) -> torch.Tensor:
    """scores [.., N] fp32, 0 <= k <= N <= TOPK_MAX_N -> indices [.., k] int64 (checked by the caller)."""
    N = scores.shape[-1]
    s2 = rows(scores)
    out = torch.empty(*scores.shape[:-1], k, dtype=torch.int64, device=scores.device)
    R = s2.shape[0]
    if R and k:
        _rank_topk_kernel[(R, triton.cdiv(N, BI))](s2, out, N, k, s2.stride(0), k, BI=BI, BJ=BJ, num_warps=4, **pdl(s2))
    return out
