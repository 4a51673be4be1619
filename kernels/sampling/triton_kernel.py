"""The sampler's kernels in Triton, each over (row, chunk of BLOCK tokens), launched on torch's current stream so
they record into CUDA graphs. On the H200 the PyTorch sampler took 0.40 ms of a 3.45 ms Flash step at 8 rows
(BENCHMARKS, 2026-12-04 run 20): ~0.08 ms the sort, the rest ~45 launches, 25 of them over the whole vocab.

`penalize_scale_triton`, one launch: the repetition penalty (each token tested against the row's ring in
registers) and the temperature scaling, bit for bit with the reference (IEEE divisions), plus each chunk's first
largest penalised logit, from which torch takes the greedy token (two [n, C] ops; the reference's two-level
argmax and ~15 launches of gather/scatter, copy and division).

`sample_pick_triton`, two launches after the sort: launch 1 sums each chunk's numerators exp(s - row max) inside
the top-k (the top-p scan's chunk totals), torch scans the totals ([n, C]), launch 2 recomputes the numerators,
scans within the chunk from its base, applies top-p, hashes each token's noise in uint32 registers (bit for bit
`reference.token_uniform`) and leaves each chunk's best Gumbel score and its token; the row's pick is the first
chunk holding the row's best. Same rules and tie order as the reference; exp, log, the division and the scan's
summation order round differently, so a token on a top-p boundary or a score tie may differ.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._pdl import pdl, pdl_enter

BLOCK = 1024


@triton.jit
def _mix32(x):
    # lowbias32 on uint32 lanes: the products wrap at 32 bits, as the reference's `& M32` does
    x = x ^ (x >> 16)
    x = x * tl.full([], 0x7FEB352D, tl.uint32)
    x = x ^ (x >> 15)
    x = x * tl.full([], 0x846CA68B, tl.uint32)
    return x ^ (x >> 16)


@triton.jit
def _first_max(x, offs, valid):
    """(value, index) of the first largest of x where valid, NaN counting as largest (torch.argmax's order)."""
    nan = valid & (x != x)
    any_nan = tl.max(nan.to(tl.int32), axis=0) > 0
    m = tl.max(tl.where(valid & ~nan, x, float("-inf")), axis=0)
    big = 2147483647
    at = tl.where(any_nan, tl.min(tl.where(nan, offs, big), axis=0),
                  tl.min(tl.where(valid & (x == m), offs, big), axis=0))
    return tl.where(any_nan, float("nan"), m), at


@triton.jit
def _penalize_scale_kernel(x_ptr, ring_ptr, pen_ptr, temp_ptr, scaled_ptr, cmax_ptr, cat_ptr, V, C,
                           R: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    r = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    offs = j * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r * V + offs, mask=offs < V, other=0.0)
    held = offs < 0
    for i in tl.static_range(R):                          # an empty slot (-1) matches no token
        held = held | (offs == tl.load(ring_ptr + r * R + i))
    p = tl.load(pen_ptr + r)
    y = tl.where(held, tl.where(x > 0, tl.div_rn(x, p), x * p), x)
    tl.store(scaled_ptr + r * V + offs, tl.div_rn(y, tl.maximum(tl.load(temp_ptr + r), 1e-6)), mask=offs < V)
    m, at = _first_max(y, offs, offs < V)
    tl.store(cmax_ptr + r * C + j, m)
    tl.store(cat_ptr + r * C + j, at.to(tl.int64))


def penalize_chunks(logits: torch.Tensor, ring: torch.Tensor, penalty: torch.Tensor, temperature: torch.Tensor,
                    block: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The launch: the scaled logits [n, V], each chunk's first largest penalised logit [n, C] and its index."""
    n, V = logits.shape
    C = triton.cdiv(V, block)
    x, ring = logits.contiguous(), ring.contiguous()
    scaled = torch.empty_like(x)
    cmax = torch.empty(n, C, dtype=torch.float32, device=x.device)
    cat = torch.empty(n, C, dtype=torch.int64, device=x.device)
    _penalize_scale_kernel[(n, C)](x, ring, penalty.float().contiguous(), temperature.float().contiguous(), scaled,
                                   cmax, cat, V, C, R=ring.shape[1], BLOCK=block, num_warps=4, **pdl(x))
    return scaled, cmax, cat


def penalize_scale_triton(logits: torch.Tensor, ring: torch.Tensor, penalty: torch.Tensor, temperature: torch.Tensor,
                          block: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """As `reference.penalize_scale_ref`: logits [n,V] fp32, ring [n,R] int64, penalty [n], temperature [n] ->
    (penalised / max(temperature, 1e-6) [n,V], the greedy token: first argmax of the penalised logits [n])."""
    scaled, cmax, cat = penalize_chunks(logits, ring, penalty, temperature, block)
    return scaled, cat.gather(-1, cmax.argmax(-1, keepdim=True))[:, 0]                # first chunk with the max


@triton.jit
def _numerators(srt_ptr, topk_ptr, r, offs, V):
    """Each token's exp(s - row max) inside the row's top-k, else 0; and the top-k mask."""
    k = tl.load(topk_ptr + r)
    keep = (offs < V) & (offs < tl.where(k > 0, k, V))
    x = tl.load(srt_ptr + r * V + offs, mask=offs < V, other=0.0)
    return tl.where(keep, tl.exp(x - tl.load(srt_ptr + r * V)), 0.0), keep


@triton.jit
def _chunk_sums_kernel(srt_ptr, topk_ptr, tot_ptr, V, C, BLOCK: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    r = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    e, _ = _numerators(srt_ptr, topk_ptr, r, j * BLOCK + tl.arange(0, BLOCK), V)
    tl.store(tot_ptr + r * C + j, tl.sum(e, axis=0))


@triton.jit
def _chunk_picks_kernel(srt_ptr, order_ptr, topk_ptr, topp_ptr, seed_ptr, counter_ptr, csum_ptr, best_ptr, tok_ptr,
                        V, C, BLOCK: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    r = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    offs = j * BLOCK + tl.arange(0, BLOCK)
    e, keep = _numerators(srt_ptr, topk_ptr, r, offs, V)
    # csum [n, C] holds the chunks' inclusive running totals: this chunk starts at the previous one's
    base = tl.load(csum_ptr + r * C + j - 1, mask=j > 0, other=0.0)
    c = tl.cumsum(e, axis=0) + base
    p = tl.load(topp_ptr + r)
    total = tl.load(csum_ptr + r * C + C - 1)
    keep = keep & (c - e < tl.where(p >= 1.0, float("inf"), p * total))              # top_p >= 1: all of top-k
    tok = tl.load(order_ptr + r * V + offs, mask=offs < V, other=0)
    # the step key (reference.step_key) here, not in torch: its two hashes over [n] were 22 tiny launches
    ctr = tl.load(counter_ptr + r).to(tl.uint32) + tl.full([], 0x9E3779B9, tl.uint32)
    key = _mix32(tl.load(seed_ptr + r).to(tl.uint32) ^ _mix32(ctr))
    h = _mix32(key ^ tok.to(tl.uint32))
    u = ((h >> 9).to(tl.float32) + 0.5) * 1.1920928955078125e-07                    # 2^-23: [2^-24, 1 - 2^-24]
    score = tl.where(keep, e / -tl.log(u), 0.0)
    best, at = _first_max(score, offs, offs < V)        # the chunk's first rank holding its best, as row_argmax
    tl.store(best_ptr + r * C + j, best)
    tl.store(tok_ptr + r * C + j, tl.sum(tl.where(offs == at, tok, 0), axis=0))


def chunk_picks(srt: torch.Tensor, order: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                seed_key: torch.Tensor, counter: torch.Tensor, block: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """The two launches: each chunk's best score [n, C] fp32 and its token [n, C] int64."""
    n, V = srt.shape
    C = triton.cdiv(V, block)
    srt, order = srt.contiguous(), order.contiguous()
    top_k, top_p = top_k.contiguous(), top_p.float().contiguous()
    seed_key, counter = seed_key.contiguous(), counter.contiguous()
    tot = torch.empty(n, C, dtype=torch.float32, device=srt.device)
    _chunk_sums_kernel[(n, C)](srt, top_k, tot, V, C, BLOCK=block, num_warps=4, **pdl(srt))
    csum = tot.cumsum(-1)
    best = torch.empty(n, C, dtype=torch.float32, device=srt.device)
    tok = torch.empty(n, C, dtype=torch.int64, device=srt.device)
    _chunk_picks_kernel[(n, C)](srt, order, top_k, top_p, seed_key, counter, csum, best, tok, V, C, BLOCK=block,
                                num_warps=4, **pdl(srt))
    return best, tok


def sample_pick_triton(srt: torch.Tensor, order: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                       seed_key: torch.Tensor, counter: torch.Tensor, block: int = BLOCK) -> torch.Tensor:
    """As `reference.sample_pick_ref`: srt [n,V] fp32 sorted descending, order [n,V] int64, top_k [n] int64, top_p
    [n] fp32, seed_key [n] int64, counter [n] int64 -> token ids [n] int64."""
    best, tok = chunk_picks(srt, order, top_k, top_p, seed_key, counter, block)
    return tok.gather(-1, best.argmax(-1, keepdim=True))[:, 0]                       # first chunk with the row's best
