"""The decode attention core in Triton (one query token per sequence): scores against every key, the mask, the
softmax with the head's sink logit, and the probability-weighted sum of the keys (V = K), in one or two launches where
the reference runs about a dozen (casts, two fp32 cuBLAS batched GEMMs, masked_fill, cat, softmax, slice).

The keys come as one list [B, N, D] with its mask (`attention_triton`), or where the decode keeps them
(`attention_ring_triton`): the window ring read in the official order (an index list per row), then the compressed
keys (HCA's entries, CSA's gathered picks), each with its own mask. The second form is the same list, so the same
values, without the gather and the concatenations of keys and masks that built it (three to four launches a layer).

Split over the keys (flash-decoding) for fp32 keys: the grid would otherwise be batch x head-blocks, 4 to 32 programs
on a 132-SM GPU, each streaming every key. Launch 1 gives each (row, block of 16 heads, split of keys) program its
keys and keeps an online softmax (running max, sum, weighted keys) in registers; launch 2 merges the splits with the
sink logit. Deterministic (no atomics): a replayed graph gives the same bits.

Official numerics (bf16 or fp16 keys, the model dtype): the keys in their given order in steps of 64 (the official
sparse_attn's blocks), the probabilities rounded to the keys' dtype before P . V (row sum from the unrounded ones),
the sink added to the sum after the last step, then the division: the reference's algorithm, so the same roundings;
the products on tensor cores (bf16 in, fp32 accumulation: exact products, another summation order than the CPU's).
The steps are sequential (each P is rounded against the running max so far), so the keys cannot be split as the
fp32 path splits them; the work can be spread instead over two launches (`PV_COLS` > 0, the default 64; 0, one
launch: see PV_COLS). Launch 1 (`_scores_kernel`) takes the scores of
every (row, 16 heads, 64-key step) in its own program, so every SM streams keys at once. Launch 2
(`_attend_pv_kernel`) runs the online softmax over those scores, step by step with the one-launch kernel's body
(`_update`), and P . V on PV_COLS columns of head_dim per program: at Flash's 64 heads of 512, 32 programs a row
where one launch had 4, each streaming every key (run 71 on the H100: 31 us for a CSA layer's 640 keys). Each
output column is the same chain of products and sums, but the bits are not the one launch's: on the H100 half to
70 % of the outputs move by up to 1.7e-6 (runs 75-76, `benchmarks/attention_bits.py`; both at the same error against
a float64 softmax; what moves them is not known yet). Neither the P . V slice width nor FP fusion explains it (the
official launches compile without it all the same: `_NO_FMA`). The two launches' row sum runs along the keys in order
(`_update`'s IN_ORDER), which made their ring their list's bits again (run 74: it was not, so the graph-safe decode
left the reference's). o is stored in fp32 (`attention_triton`) or in the keys' dtype (`attention_ring_triton`, as the
official kernel stores it: the caller's cast in the same launch).

fp32 keys (the debugging dtype): fp32 throughout, as the reference's fp32 einsums. The weighted sum of the keys runs on tensor cores as
TF32x3 (each fp32 operand split into a TF32 high part and a TF32 remainder; three products), whose error is near fp32
rounding. The scores: where q and the keys are bf16 (the model dtype) they are exact in TF32 and one TF32 product is
exact; fp32 ones take IEEE FMAs (TF32x3 there spills at head_dim 512). Summation order and the hardware exp differ
from the reference: results agree to fp32 rounding, not bit for bit. Launched on torch's current stream (capturable).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._pdl import pdl, pdl_enter
from .._bf16 import round_bf16

BH = 16            # heads per program: the smallest tl.dot M; Flash's 64 heads are 4 blocks
BN = 16            # keys per inner step
MIN_SPLIT = 16     # keys per split at least (H200, BENCHMARKS.md: 16 against 64 took B=1 from 18.3 to 13.0 µs, B=8 the same)
PROGRAMS = 264     # aim for about two programs per SM of an H200
MAX_SPLITS = 32    # the merge holds every split's [D] partial at once: more spill (64 x 512 fp32 did not)
WARPS_WIDE = 8     # warps of the split kernel at head_dim 512 (4 below): the [16, 512] query and accumulator in registers
STAGES = None      # software-pipelining depth of the split kernel's key loop; None: Triton's default


BN_OFFICIAL = 64   # official kernel.py `block = 64`: the online softmax's step, which the P rounding depends on
# official numerics in two launches with PV_COLS head_dim columns per program of the second, or 0: the one-launch
# kernel. Two launches at 64 columns are faster (the decode on the H100 at B=1, per layer: run 72 0.2612 ms with one,
# 0.2508 with two; run 74 0.2534 and 0.2453; run 77 0.2561 and 0.2467) and keep the graph-safe decode on the
# reference's bits since the in-order row sum (official_numerics PASS over 320 steps at Flash's layer dimensions:
# runs 76 and 78); run 78 also passed the tiny preset's 300-step replay, capture and greedy checks with them
# (`CHECK_FLASH=0 h200.sh check`) and run 83 the Flash-dimension replay (`h200.sh flash`); memcheck of their parity
# tests: no memory-access error (runs 79-80; run 79's 4 errors were allocation failures, out of memory)
PV_COLS = 64
# the official launches' compile options: no contraction of a product and a sum into one FMA, so neither launch shape
# rounds a score where the other does not (run 75: contraction alone moved 24,343 of the one launch's 262,144 outputs)
_NO_FMA = {"enable_fp_fusion": False}


@triton.jit
def _list_keys(k_ptr, mask_ptr, b, j, d, dm, N, k_row, k_key, mask_row, HAS_MASK: tl.constexpr):
    """Keys j [BN] of row b of a list K [B, N, D] -> (k [BN, DP], valid [BN]): in the list (0 <= j < N) and, with a
    mask, set in mask[b, j]. (j < 0: `_keys` asks for the compressed keys at j - W on a step's ring lanes too; those
    are not read.)"""
    valid = (j >= 0) & (j < N)
    k = tl.load(k_ptr + b * k_row + j[:, None] * k_key + d[None, :], mask=valid[:, None] & dm[None, :], other=0.0)
    if HAS_MASK:
        valid = valid & (tl.load(mask_ptr + b * mask_row + j, mask=valid, other=0) != 0)
    return k, valid


@triton.jit
def _ring_keys(k_ptr, mask_ptr, order_ptr, b, j, d, dm, W, k_row, k_key, mask_row, order_row, HAS_MASK: tl.constexpr):
    """Keys j [BN] of row b's window ring [B, W, D] read in the order order[b, :] (the official list's oldest first)
    -> (k, valid): j < W and, with a mask, set in mask[b, j]."""
    inw = j < W
    slot = tl.load(order_ptr + b * order_row + j, mask=inw, other=0)
    k = tl.load(k_ptr + b * k_row + slot[:, None] * k_key + d[None, :], mask=inw[:, None] & dm[None, :], other=0.0)
    valid = inw
    if HAS_MASK:
        valid = valid & (tl.load(mask_ptr + b * mask_row + j, mask=inw, other=0) != 0)
    return k, valid


@triton.jit
def _keys(k_ptr, mask_ptr, k2_ptr, order_ptr, mask2_ptr, b, j, d, dm, N, W, k_row, k_key, mask_row, k2_row, k2_key,
          order_row, mask2_row, HAS_MASK: tl.constexpr, RING: tl.constexpr):
    """Keys j [BN] of row b of the whole list -> (k [BN, DP], valid [BN]). One list: K[b, j]. RING: the window ring's
    W slots in order, then the compressed keys K2[b, j - W] (masked by mask2): the list the decode used to gather and
    concatenate, read in place; a step across both loads both and selects."""
    if RING:
        kw, vw = _ring_keys(k_ptr, mask_ptr, order_ptr, b, j, d, dm, W, k_row, k_key, mask_row, order_row, HAS_MASK)
        kc, vc = _list_keys(k2_ptr, mask2_ptr, b, j - W, d, dm, N - W, k2_row, k2_key, mask2_row, HAS_MASK)
        inw = j < W
        return tl.where(inw[:, None], kw, kc), tl.where(inw, vw, vc)
    return _list_keys(k_ptr, mask_ptr, b, j, d, dm, N, k_row, k_key, mask_row, HAS_MASK)


@triton.jit
def _scores(q, k, valid, scale, QK_PRECISION: tl.constexpr, ROUND_P: tl.constexpr, NATIVE: tl.constexpr):
    """q [BH, DP] . keys k [BN, DP] (valid [BN]) -> the scaled scores [BH, BN], -inf where not valid."""
    if ROUND_P and NATIVE:
        s = tl.dot(q, tl.trans(k)) * scale                                              # bf16 in, fp32 sums
    elif ROUND_P:   # the interpreter (CPU tensors) has no bf16 dot: the same exact products in fp32
        s = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision="ieee") * scale
    else:
        s = tl.dot(q, tl.trans(k), input_precision=QK_PRECISION) * scale              # [BH, BN]
    return tl.where(valid[None, :], s, float("-inf"))


@triton.jit
def _update(s, k, m_i, l_i, acc, ROUND_P: tl.constexpr, NATIVE: tl.constexpr, IN_ORDER: tl.constexpr = False):
    """One step of the online softmax: scores s [BH, BN] of keys k [BN, DK] -> (m_i, l_i, acc [BH, DK]). Every
    launch shape runs this one body (DK: all of head_dim, or a slice of it in `_attend_pv_kernel`), so each takes
    the same operations. IN_ORDER: the row sum along the keys in order (the two launches')."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)                                # nothing valid yet: exp(-inf) = 0
    alpha = tl.exp(m_i - m_use)
    p = tl.exp(s - m_use[:, None])
    if IN_ORDER:
        # the row sum in key order: `tl.sum` adds in a tree that follows p's register layout, which differed between
        # the two launches' ring and list loops (runs 74-75: the ring left the list's bits, so the graph-safe decode
        # left the reference's); an IEEE dot with ones is FMAs along the keys, one after the other (every column the
        # same sum: max picks it). The one launch keeps `tl.sum`: its ring is its list with it (the bits run 75
        # held against the reference over 320 steps)
        l_i = l_i * alpha + tl.max(tl.dot(p, tl.full([p.shape[1], 16], 1.0, tl.float32), input_precision="ieee"), 1)
    else:
        l_i = l_i * alpha + tl.sum(p, 1)
    if ROUND_P and NATIVE:      # official: the row sum from P, then P in the keys' dtype for P . V
        acc = acc * alpha[:, None] + tl.dot(p.to(k.dtype), k)
    elif ROUND_P:
        # and its fp32 -> bf16 cast truncates: round to nearest even on the bits (p is finite, >= 0)
        acc = acc * alpha[:, None] + tl.dot(round_bf16(p, NATIVE), k.to(tl.float32), input_precision="ieee")
    else:
        acc = acc * alpha[:, None] + tl.dot(p, k, input_precision="tf32x3")
    return m_new, l_i, acc


@triton.jit
def _step(q, k, valid, m_i, l_i, acc, scale, QK_PRECISION: tl.constexpr, ROUND_P: tl.constexpr,
          NATIVE: tl.constexpr):
    """The scores of keys k [BN, DP] (valid [BN]) and the online softmax's step over them -> (m_i, l_i, acc)."""
    if not ROUND_P:
        k = k.to(tl.float32)
    s = _scores(q, k, valid, scale, QK_PRECISION, ROUND_P, NATIVE)
    return _update(s, k, m_i, l_i, acc, ROUND_P, NATIVE)


@triton.jit
def _program_query(q_ptr, q_row, q_head, H: tl.constexpr, D: tl.constexpr, DP: tl.constexpr, BH: tl.constexpr):
    """A (row, 16-head block, axis 2) program's indices and its query -> (b, the axis-2 index, heads h [BH], dims
    d [DP], their masks, q [BH, DP] as stored)."""
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1) * BH + tl.arange(0, BH)
    d = tl.arange(0, DP)
    hm, dm = h < H, d < D
    q = tl.load(q_ptr + b * q_row + h[:, None] * q_head + d[None, :], mask=hm[:, None] & dm[None, :], other=0.0)
    return b, tl.program_id(2), h, d, hm, dm, q


@triton.jit
def _finish(acc, m_i, l_i, sink_ptr, o_ptr, b, h, d, hm, dm, o_row, o_head, NATIVE: tl.constexpr):
    """The softmax's end for one split: row sum + exp(sink - max), the division, o [BH, len(d)] in o's dtype."""
    sink = tl.load(sink_ptr + h, mask=hm, other=0.0).to(tl.float32)
    mx = tl.where(m_i == float("-inf"), 0.0, m_i)                                       # no valid key: o = 0
    o = acc / (l_i + tl.exp(sink - mx))[:, None]
    if not NATIVE and o_ptr.dtype.element_ty == tl.bfloat16:
        o = round_bf16(o, NATIVE)
    tl.store(o_ptr + b * o_row + h[:, None] * o_head + d[None, :], o.to(o_ptr.dtype.element_ty),
             mask=hm[:, None] & dm[None, :])


@triton.jit
def _attend_split_kernel(q_ptr, k_ptr, mask_ptr, k2_ptr, order_ptr, mask2_ptr, m_ptr, l_ptr, acc_ptr, sink_ptr, o_ptr,
                         N, W, S, scale, q_row, q_head, k_row, k_key, mask_row, k2_row, k2_key, order_row, mask2_row,
                         o_row, o_head, H: tl.constexpr, D: tl.constexpr, DP: tl.constexpr, SPLIT: tl.constexpr,
                         BH: tl.constexpr, BN: tl.constexpr, HAS_MASK: tl.constexpr, QK_PRECISION: tl.constexpr,
                         ROUND_P: tl.constexpr, NATIVE: tl.constexpr, RING: tl.constexpr, RING_BLOCKS: tl.constexpr,
                         FINISH: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    b, sp, h, d, hm, dm, q = _program_query(q_ptr, q_row, q_head, H, D, DP, BH)
    if not ROUND_P:
        q = q.to(tl.float32)
    m_i = tl.full([BH], float("-inf"), tl.float32)
    l_i = tl.zeros([BH], tl.float32)
    acc = tl.zeros([BH, DP], tl.float32)
    if RING_BLOCKS:
        # one split, the ring a whole number of steps (Flash: 128 slots, 2 steps): its steps read the ring by slot,
        # the rest the compressed keys, each one load (a step that straddles both, or a select between them, loads
        # twice: the CSA core took 1.6x as long on the H100, run 66)
        for start in tl.range(0, W, BN):
            k, valid = _ring_keys(k_ptr, mask_ptr, order_ptr, b, start + tl.arange(0, BN), d, dm, W, k_row, k_key,
                                  mask_row, order_row, HAS_MASK)
            m_i, l_i, acc = _step(q, k, valid, m_i, l_i, acc, scale, QK_PRECISION, ROUND_P, NATIVE)
        for start in tl.range(0, N - W, BN):
            k, valid = _list_keys(k2_ptr, mask2_ptr, b, start + tl.arange(0, BN), d, dm, N - W, k2_row, k2_key,
                                  mask2_row, HAS_MASK)
            m_i, l_i, acc = _step(q, k, valid, m_i, l_i, acc, scale, QK_PRECISION, ROUND_P, NATIVE)
    else:
        for start in tl.range(sp * SPLIT, sp * SPLIT + SPLIT, BN):
            j = start + tl.arange(0, BN)
            k, valid = _keys(k_ptr, mask_ptr, k2_ptr, order_ptr, mask2_ptr, b, j, d, dm, N, W, k_row, k_key,
                             mask_row, k2_row, k2_key, order_row, mask2_row, HAS_MASK, RING)
            m_i, l_i, acc = _step(q, k, valid, m_i, l_i, acc, scale, QK_PRECISION, ROUND_P, NATIVE)
    if FINISH:      # one split (official): the merge's end here
        _finish(acc, m_i, l_i, sink_ptr, o_ptr, b, h, d, hm, dm, o_row, o_head, NATIVE)
    else:
        part = (b * S + sp) * H + h                                                     # [BH] rows of the partials
        tl.store(m_ptr + part, m_i, mask=hm)
        tl.store(l_ptr + part, l_i, mask=hm)
        tl.store(acc_ptr + part[:, None] * DP + d[None, :], acc, mask=hm[:, None] & dm[None, :])


@triton.jit
def _scores_kernel(q_ptr, k_ptr, mask_ptr, k2_ptr, order_ptr, mask2_ptr, s_ptr, N, W, scale, q_row, q_head, k_row,
                   k_key, mask_row, k2_row, k2_key, order_row, mask2_row, s_row, s_head, H: tl.constexpr,
                   D: tl.constexpr, DP: tl.constexpr, BH: tl.constexpr, BN: tl.constexpr, HAS_MASK: tl.constexpr,
                   NATIVE: tl.constexpr, RING: tl.constexpr, RING_BLOCKS: tl.constexpr, PDL: tl.constexpr):
    """Official numerics, launch 1 of 2: the scores of one 64-key step of the list for (row, 16 heads), masked keys
    at -inf, into s [B, H, steps x 64]: every step in its own program, so the keys stream on every SM at once."""
    pdl_enter(PDL)
    b, blk, h, d, hm, dm, q = _program_query(q_ptr, q_row, q_head, H, D, DP, BH)
    j = blk * BN + tl.arange(0, BN)
    if RING_BLOCKS:     # the ring a whole number of steps: a step reads the ring or the compressed keys, one load
        if blk * BN < W:
            k, valid = _ring_keys(k_ptr, mask_ptr, order_ptr, b, j, d, dm, W, k_row, k_key, mask_row, order_row,
                                  HAS_MASK)
        else:
            k, valid = _list_keys(k2_ptr, mask2_ptr, b, j - W, d, dm, N - W, k2_row, k2_key, mask2_row, HAS_MASK)
    else:
        k, valid = _keys(k_ptr, mask_ptr, k2_ptr, order_ptr, mask2_ptr, b, j, d, dm, N, W, k_row, k_key, mask_row,
                         k2_row, k2_key, order_row, mask2_row, HAS_MASK, RING)
    s = _scores(q, k, valid, scale, "ieee", True, NATIVE)
    tl.store(s_ptr + b * s_row + h[:, None] * s_head + j[None, :], s, mask=hm[:, None])


@triton.jit
def _attend_pv_kernel(s_ptr, k_ptr, k2_ptr, order_ptr, sink_ptr, o_ptr, N, W, STEPS, s_row, s_head, k_row, k_key,
                      k2_row, k2_key, order_row, o_row, o_head, H: tl.constexpr, D: tl.constexpr, DK: tl.constexpr,
                      BH: tl.constexpr, BN: tl.constexpr, NATIVE: tl.constexpr, RING: tl.constexpr,
                      RING_BLOCKS: tl.constexpr, PDL: tl.constexpr):
    """Official numerics, launch 2 of 2: for (row, 16 heads, DK columns of head_dim), the online softmax over
    `_scores_kernel`'s scores in the keys' order, step by step as the one-launch kernel runs it (`_update`), with
    P . V on those columns only: a program reads its columns of the keys, not all of them."""
    pdl_enter(PDL)
    b = tl.program_id(0).to(tl.int64)
    hb, ds = tl.program_id(1), tl.program_id(2)
    h = hb * BH + tl.arange(0, BH)
    d = ds * DK + tl.arange(0, DK)
    hm, dm = h < H, d < D
    srow = s_ptr + b * s_row + h[:, None] * s_head
    m_i = tl.full([BH], float("-inf"), tl.float32)
    l_i = tl.zeros([BH], tl.float32)
    acc = tl.zeros([BH, DK], tl.float32)
    if RING_BLOCKS:
        for start in tl.range(0, W, BN):
            j = start + tl.arange(0, BN)
            k, _ = _ring_keys(k_ptr, k_ptr, order_ptr, b, j, d, dm, W, k_row, k_key, 0, order_row, False)
            s = tl.load(srow + j[None, :], mask=hm[:, None], other=float("-inf"))
            m_i, l_i, acc = _update(s, k, m_i, l_i, acc, True, NATIVE, True)
        for start in tl.range(0, N - W, BN):
            j = start + tl.arange(0, BN)
            k, _ = _list_keys(k2_ptr, k2_ptr, b, j, d, dm, N - W, k2_row, k2_key, 0, False)
            s = tl.load(srow + W + j[None, :], mask=hm[:, None], other=float("-inf"))
            m_i, l_i, acc = _update(s, k, m_i, l_i, acc, True, NATIVE, True)
    else:
        for start in tl.range(0, STEPS * BN, BN):
            j = start + tl.arange(0, BN)
            k, _ = _keys(k_ptr, k_ptr, k2_ptr, order_ptr, k_ptr, b, j, d, dm, N, W, k_row, k_key, 0, k2_row, k2_key,
                         order_row, 0, False, RING)
            s = tl.load(srow + j[None, :], mask=hm[:, None], other=float("-inf"))
            m_i, l_i, acc = _update(s, k, m_i, l_i, acc, True, NATIVE, True)
    _finish(acc, m_i, l_i, sink_ptr, o_ptr, b, h, d, hm, dm, o_row, o_head, NATIVE)


@triton.jit
def _attend_merge_kernel(m_ptr, l_ptr, acc_ptr, sink_ptr, o_ptr, S, o_row, o_head, H: tl.constexpr,
                         D: tl.constexpr, DP: tl.constexpr, SP: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    s = tl.arange(0, SP)
    d = tl.arange(0, DP)
    sm, dm = s < S, d < D
    part = (b * S + s) * H + h                                                          # [SP]
    m = tl.load(m_ptr + part, mask=sm, other=float("-inf"))
    l = tl.load(l_ptr + part, mask=sm, other=0.0)
    sink = tl.load(sink_ptr + h).to(tl.float32)
    acc = tl.load(acc_ptr + part[:, None] * DP + d[None, :], mask=sm[:, None] & dm[None, :], other=0.0)
    top = tl.maximum(tl.max(m, 0), sink)
    w = tl.exp(m - top)                                                                 # a split with no valid key: 0
    total = tl.sum(l * w, 0) + tl.exp(sink - top)                                       # the sink's share, no value
    o = tl.sum(acc * w[:, None], 0) / total
    tl.store(o_ptr + b * o_row + h * o_head + d, o, mask=dm)


def splits(n: int, H: int, N: int) -> tuple[int, int]:
    """(keys per split, number of splits) for n rows of H heads over N keys: about PROGRAMS programs, at least
    MIN_SPLIT keys (a multiple of BN) per split when there are several, at most MAX_SPLITS splits. Host integers
    only: one launch shape per captured shape."""
    blocks = n * triton.cdiv(H, BH)
    want = max(1, min(N // MIN_SPLIT, triton.cdiv(PROGRAMS, blocks), MAX_SPLITS))
    split = triton.cdiv(triton.cdiv(N, want), BN) * BN
    return split, triton.cdiv(N, split)


def attention_triton(q: torch.Tensor, K: torch.Tensor, mask: torch.Tensor | None, sink: torch.Tensor,
                     scale: float) -> torch.Tensor:
    """q [B,1,H,D], K [B,1,N,D], mask [B|1,1,N] bool or None, sink [H] -> o [B,1,H,D] fp32 (shapes checked by the
    caller)."""
    k3 = K[:, 0]
    mk = None if mask is None else mask[:, 0]
    return _attend(q, k3, mk, None, None, None, sink, scale, torch.float32)


def attention_ring_triton(q: torch.Tensor, window: torch.Tensor, order: torch.Tensor, win_valid: torch.Tensor,
                          comp: torch.Tensor | None, comp_valid: torch.Tensor | None, sink: torch.Tensor,
                          scale: float) -> torch.Tensor:
    """q [B,1,H,D], the window ring [B,W,D] read in order [B,W] (int64 slots) with win_valid [B,W], then comp [B,M,D]
    with comp_valid [B,M] (or neither) -> o [B,1,H,D] in the keys' dtype (official: the kernel stores o in bf16).
    The keys `attention_triton` would take concatenated, read where they lie (shapes checked by the caller)."""
    return _attend(q, window, win_valid, order, comp, comp_valid, sink, scale, window.dtype)


def _last_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _attend(q, k3, mk, order, k2, mk2, sink, scale, out_dtype) -> torch.Tensor:
    """The launches: keys k3 [B,N,D] masked by mk [B|1,N] (or None); with `order` [B,W], k3 is a window ring read in
    that order and k2 [B,M,D] (masked by mk2 [B,M], or None: no compressed keys) follows it."""
    B, _, H, D = q.shape
    ring = order is not None
    W = k3.shape[1] if ring else 0
    N = W + (k2.shape[1] if k2 is not None else 0) if ring else k3.shape[1]
    q3 = _last_contiguous(q[:, 0])
    k3 = _last_contiguous(k3)
    sink = sink if sink.stride(0) == 1 else sink.contiguous()                       # read as sink[h]
    out = torch.empty(B, 1, H, D, dtype=out_dtype, device=q.device)
    if B == 0 or H == 0 or D == 0:
        return out
    DP = max(16, triton.next_power_of_2(D))
    # bf16 (or fp16) keys: the official numerics (P rounded to their dtype per 64-key step): one split, the keys in
    # order, and the merge's end in the same launch
    official = k3.dtype in (torch.bfloat16, torch.float16)
    if official:
        if q3.dtype != k3.dtype:
            q3 = q3.to(k3.dtype)
        bn = BN_OFFICIAL
        split, S = triton.cdiv(max(N, 1), bn) * bn, 1
    else:
        bn = BN
        split, S = splits(B, H, N) if N else (BN, 1)
    m = l = acc = out                                                                   # official: never written
    if not official:
        m = torch.empty(B, S, H, dtype=torch.float32, device=q.device)
        l = torch.empty_like(m)
        acc = torch.empty(B, S, H, DP, dtype=torch.float32, device=q.device)

    def flags(t):                                   # a bool mask [B|1, n] as bytes and its row stride (0: broadcast)
        if t is None:
            return k3, 0                                                                # never read
        t = _last_contiguous(t)
        return t.view(torch.uint8), 0 if t.shape[0] == 1 else t.stride(0)
    has_mask = mk is not None
    mk, mask_row = flags(mk)
    if ring:
        k2 = k3 if k2 is None else _last_contiguous(k2)                                # M = 0: never read
        mk2, mask2_row = flags(mk2) if mk2 is not None else (mk, 0)
        order = _last_contiguous(order)
        k2_row, k2_key, order_row = k2.stride(0), k2.stride(1), order.stride(0)
    else:
        k2, mk2, order, k2_row, k2_key, order_row, mask2_row = k3, mk, k3, 0, 0, 0, 0
    # bf16 (or fp16) q and keys are exact in TF32: one product per element is exact there; 8 warps at head_dim 512
    # keep the [16, 512] query, keys and accumulator in registers (4 spill)
    exact = q.dtype in (torch.bfloat16, torch.float16) and k3.dtype in (torch.bfloat16, torch.float16)
    ring_blocks = ring and official and W % bn == 0 and has_mask
    if official and PV_COLS:
        steps = split // bn
        scores = torch.empty(B, H, split, dtype=torch.float32, device=q.device)
        _scores_kernel[(B, triton.cdiv(H, BH), steps)](
            q3, k3, mk, k2, order, mk2, scores, N, W, scale, q3.stride(0), q3.stride(1), k3.stride(0), k3.stride(1),
            mask_row, k2_row, k2_key, order_row, mask2_row, scores.stride(0), scores.stride(1), H=H, D=D, DP=DP,
            BH=BH, BN=bn, HAS_MASK=has_mask, NATIVE=q.is_cuda, RING=ring, RING_BLOCKS=ring_blocks,
            num_warps=WARPS_WIDE if DP >= 512 else 4, **_NO_FMA, **pdl(q3))
        dk = min(PV_COLS, DP)
        _attend_pv_kernel[(B, triton.cdiv(H, BH), triton.cdiv(D, dk))](
            scores, k3, k2, order, sink, out, N, W, steps, scores.stride(0), scores.stride(1), k3.stride(0),
            k3.stride(1), k2_row, k2_key, order_row, out.stride(0), out.stride(2), H=H, D=D, DK=dk, BH=BH, BN=bn,
            NATIVE=q.is_cuda, RING=ring, RING_BLOCKS=ring_blocks, num_warps=4, **_NO_FMA, **pdl(scores))
        return out
    _attend_split_kernel[(B, triton.cdiv(H, BH), S)](
        q3, k3, mk, k2, order, mk2, m, l, acc, sink, out, N, W, S, scale, q3.stride(0), q3.stride(1), k3.stride(0),
        k3.stride(1), mask_row, k2_row, k2_key, order_row, mask2_row, out.stride(0), out.stride(2),
        H=H, D=D, DP=DP, SPLIT=split, BH=BH, BN=bn, HAS_MASK=has_mask,
        QK_PRECISION="tf32" if exact else "ieee", ROUND_P=official, NATIVE=q.is_cuda, RING=ring,
        RING_BLOCKS=ring_blocks, FINISH=official,
        num_warps=WARPS_WIDE if DP >= 512 else 4, **({} if STAGES is None else {"num_stages": STAGES}),
        **(_NO_FMA if official else {}), **pdl(q3))
    if not official:
        _attend_merge_kernel[(B, H)](m, l, acc, sink, out, S, out.stride(0), out.stride(2), H=H, D=D, DP=DP,
                                     SP=max(2, triton.next_power_of_2(S)), num_warps=4, **pdl(m))
    return out
