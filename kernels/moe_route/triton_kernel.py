"""The router's chain after its fp32 product in one Triton launch, where the reference runs about 11 small
kernels (softplus, sqrt, the bias add, top-k, gather, sum, divide, scale; then moe_step's sort and gather).

Layout: logits [N, E] fp32 (last-dim stride 1, any row stride); program r holds row r's E scores in registers.
Per row, the reference's steps at its rounding points (all fp32):
- scores: sqrtsoftplus = sqrt_rn(x > 20 ? x : log1p(exp(x))) (torch's softplus with beta 1, threshold 20, calling
  `log1pf` / `expf`: libdevice `__nv_log1pf` / `__nv_expf`; its sqrt is IEEE); sigmoid = 1 / (1 + exp(-x)) with
  the IEEE division (`tl.div_rn`; Triton's `/` is an approximate division);
- the picks: K passes of "largest score + bias not yet taken, the lowest index among equals" (torch's top-k takes
  the elements above the k-th value, then the k-th value's elements in index order; it returns them by descending
  value); the hash layers read tid2eid[ids[r]] instead, in the table's order;
- the renormalising sum over the picks in a fixed tree (BW = the largest power of two <= K lanes, lane t adds
  elements t and t + BW, then lanes at offsets 1, 2, 4, ...: for K = 6, ((w0 + w4) + (w1 + w5)) + (w2 + w3)), read
  from ATen's Reduce.cuh as the order torch's CUDA sum takes; run 55 (H100, torch 2.11) showed torch's sum of such
  rows takes another order for K >= 5, so the weights are within 1-2 fp32 ulps of the chain's, not equal (the
  picks are); then the IEEE division and the product with fp32(route_scale);
- the picks sorted by expert index (a rank by comparison; equal experts, possible only in a hash table, keep
  their table order), the weights with them.
The picks are the reference's on CUDA, ties in score + bias aside (among picks of equal value the reference's sort
of its top-k results may take another order than index order); the weights are within a few fp32 ulps (the sum's
order, above). The graph-safe decode and the reference decode both call this slot, so they still agree bit for bit. libdevice runs without flush-to-zero, as nvcc compiled torch's: a subnormal exp keeps its score.
NaN logits are not reproduced (the reference's top-k ranks NaN highest). Launched on torch's current
stream (capturable).

On CPU tensors (only under TRITON_INTERPRET=1) libdevice does not exist: `EXACT=False` uses tl.exp / tl.log there
(only the logic is checked, not the score bits).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import libdevice

from .._pdl import pdl, pdl_enter
from .._rows import rows

FUNCS = {"sqrtsoftplus": 0, "sigmoid": 1}


@triton.jit
def _torch_row_sum(w, BW: tl.constexpr):
    """w [2 * BW] fp32 (zeros past K) -> its sum in the order of torch's CUDA inner-dim sum of K values
    (BW = last_pow2(K) <= 32): lanes t + (t + BW), then pairs of neighbours, then pairs of pairs, ..."""
    a = tl.sum(tl.reshape(w, (2, BW)), axis=0)                    # lane t: w[t] + w[t + BW]
    if BW >= 2:
        a = tl.sum(tl.reshape(a, (BW // 2, 2)), axis=1)           # shuffle offset 1
    if BW >= 4:
        a = tl.sum(tl.reshape(a, (BW // 4, 2)), axis=1)           # offset 2
    if BW >= 8:
        a = tl.sum(tl.reshape(a, (BW // 8, 2)), axis=1)           # offset 4
    if BW >= 16:
        a = tl.sum(tl.reshape(a, (BW // 16, 2)), axis=1)          # offset 8
    if BW >= 32:
        a = tl.sum(tl.reshape(a, (BW // 32, 2)), axis=1)          # offset 16
    return tl.sum(a, axis=0)                                      # one element: itself


@triton.jit
def _route_kernel(l_ptr, b_ptr, t_ptr, ids_ptr, w_ptr, i_ptr, E, l_row, t_row, t_col, ids_step, scale, EP: tl.constexpr,
                  K: tl.constexpr, KP: tl.constexpr, BW: tl.constexpr, FUNC: tl.constexpr, BIAS: tl.constexpr,
                  HASH: tl.constexpr, EXACT: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    r = tl.program_id(0).to(tl.int64)
    e = tl.arange(0, EP)
    em = e < E
    x = tl.load(l_ptr + r * l_row + e, mask=em, other=0.0)
    if FUNC == 0:
        if EXACT:
            sp = libdevice.log1p(libdevice.exp(x))
        else:
            sp = tl.log(1.0 + tl.exp(x))
        s = tl.sqrt_rn(tl.where(x > 20.0, x, sp))
    else:
        if EXACT:
            ex = libdevice.exp(-x)
        else:
            ex = tl.exp(-x)
        s = tl.div_rn(tl.zeros_like(x) + 1.0, 1.0 + ex)
    j = tl.arange(0, KP)
    jm = j < K
    if HASH:
        row = tl.load(ids_ptr + r * ids_step).to(tl.int64)
        picks = tl.load(t_ptr + row * t_row + j * t_col, mask=jm, other=0).to(tl.int32)
        hit = (picks[:, None] == e[None, :]) & jm[:, None]                            # [KP, EP]
        w = tl.sum(tl.where(hit, s[None, :], 0.0), axis=1)                          # scores[picks], exact
    else:
        v = s
        if BIAS:
            v = s + tl.load(b_ptr + e, mask=em, other=0.0)
        v = tl.where(em, v, float("-inf"))
        taken = e >= E
        picks = tl.zeros((KP,), dtype=tl.int32)
        w = tl.zeros((KP,), dtype=tl.float32)
        for t in tl.static_range(K):
            m = tl.max(tl.where(taken, float("-inf"), v), axis=0)
            p = tl.min(tl.where((v == m) & ~taken, e, EP), axis=0)                    # the lowest index of the max
            picks = tl.where(j == t, p, picks)
            w = tl.where(j == t, tl.sum(tl.where(e == p, s, 0.0), axis=0), w)        # scores[p], exact
            taken = taken | (e == p)
    w = tl.where(jm, w, 0.0)
    w = tl.div_rn(w, tl.zeros_like(w) + _torch_row_sum(w, BW))
    w = w * scale
    # expert order: the rank of pick t among the row's picks (padding sorts last; equal experts keep slot order)
    pk = tl.where(jm, picks, EP + j)
    before = (pk[None, :] < pk[:, None]) | ((pk[None, :] == pk[:, None]) & (j[None, :] < j[:, None]))
    rank = tl.sum(before.to(tl.int32), axis=1)
    tl.store(w_ptr + r * K + rank, w, mask=jm)
    tl.store(i_ptr + r * K + rank, picks.to(tl.int64), mask=jm)


def moe_route_triton(logits: torch.Tensor, k: int, route_scale: float, score_func: str,
                     bias: torch.Tensor | None = None, tid2eid: torch.Tensor | None = None,
                     ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    N, E = logits.shape
    logits = rows(logits)
    if bias is not None and bias.stride(0) != 1:
        bias = bias.contiguous()
    w = torch.empty(N, k, dtype=torch.float32, device=logits.device)
    idx = torch.empty(N, k, dtype=torch.int64, device=logits.device)
    if N:
        hashed = tid2eid is not None
        bw = 1 << (k.bit_length() - 1)                             # Reduce.cuh's last_pow2(k)
        ep = triton.next_power_of_2(E)
        # libdevice without flush-to-zero (Triton's default flushes; nvcc's, which built torch's softplus, does not):
        # exp of a logit in (-103, -87) is subnormal, and its softplus's sqrt a normal ~1e-20 score, not 0
        extra = {"enable_reflect_ftz": False} if logits.is_cuda else {}
        # unused pointers get a tensor of the right device (never read: their constexpr branch is compiled out)
        # the ids and the table by their strides: the per-position verify routes position j's tokens, a column
        # of its [B, k+1] drafts (reading them as contiguous hashed every row but the first with another's token)
        _route_kernel[(N,)](logits, bias if bias is not None else logits, tid2eid if hashed else idx,
                            ids if hashed else idx, w, idx, E, logits.stride(0), tid2eid.stride(0) if hashed else 0,
                            tid2eid.stride(1) if hashed else 0, ids.stride(0) if hashed else 0, float(route_scale),
                            EP=ep, K=k, KP=2 * bw, BW=bw, FUNC=FUNCS[score_func],
                            BIAS=bias is not None and not hashed, HASH=hashed, EXACT=logits.is_cuda,
                            num_warps=4 if ep >= 1024 else 1, **extra, **pdl(logits))
    return w, idx
