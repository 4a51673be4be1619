"""The decode attention core in Triton (one query token per sequence): scores against every key, the mask, the
softmax with the head's sink logit, and the probability-weighted sum of the keys (V = K), in two launches where the
reference runs about a dozen (casts, two fp32 cuBLAS batched GEMMs, masked_fill, cat, softmax, slice).

Split over the keys (flash-decoding): at decode the grid would otherwise be batch x head-blocks, 4 to 32 programs on a
132-SM GPU, each streaming every key. Launch 1 gives each (row, block of 16 heads, split of keys) program its keys
and keeps an online softmax (running max, sum, weighted keys) in registers; launch 2 merges the splits with the
sink logit. Deterministic (no atomics): a replayed graph gives the same bits.

Official numerics (bf16 or fp16 keys, the model dtype): one split per (row, 16 heads), the keys in their given order
in steps of 64 (the official sparse_attn's blocks), the probabilities rounded to the keys' dtype before P . V
(row sum from the unrounded ones), the sink added to the sum after the last step: the reference's algorithm, so the
same roundings; the products on tensor cores (bf16 in, fp32 accumulation: exact products, another summation order
than the CPU's). One split streams all keys in one program per 16 heads: 4 programs per row at Flash's 64 heads.

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

BH = 16            # heads per program: the smallest tl.dot M; Flash's 64 heads are 4 blocks
BN = 16            # keys per inner step
MIN_SPLIT = 16     # keys per split at least (H200, BENCHMARKS.md: 16 against 64 took B=1 from 18.3 to 13.0 µs, B=8 the same)
PROGRAMS = 264     # aim for about two programs per SM of an H200
MAX_SPLITS = 32    # the merge holds every split's [D] partial at once: more spill (64 x 512 fp32 did not)
WARPS_WIDE = 8     # warps of the split kernel at head_dim 512 (4 below): the [16, 512] query and accumulator in registers
STAGES = None      # software-pipelining depth of the split kernel's key loop; None: Triton's default


BN_OFFICIAL = 64   # official kernel.py `block = 64`: the online softmax's step, which the P rounding depends on


@triton.jit
def _attend_split_kernel(q_ptr, k_ptr, mask_ptr, m_ptr, l_ptr, acc_ptr, N, S, scale, q_row, q_head, k_row, k_key,
                         mask_row, H: tl.constexpr, D: tl.constexpr, DP: tl.constexpr, SPLIT: tl.constexpr,
                         BH: tl.constexpr, BN: tl.constexpr, HAS_MASK: tl.constexpr, QK_PRECISION: tl.constexpr,
                         ROUND_P: tl.constexpr, NATIVE: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    hb, sp = tl.program_id(1), tl.program_id(2)
    h = hb * BH + tl.arange(0, BH)
    d = tl.arange(0, DP)
    hm, dm = h < H, d < D
    q = tl.load(q_ptr + b * q_row + h[:, None] * q_head + d[None, :], mask=hm[:, None] & dm[None, :],
                other=0.0)                                                              # [BH, DP]
    if not ROUND_P:
        q = q.to(tl.float32)
    m_i = tl.full([BH], float("-inf"), tl.float32)
    l_i = tl.zeros([BH], tl.float32)
    acc = tl.zeros([BH, DP], tl.float32)
    for start in tl.range(sp * SPLIT, sp * SPLIT + SPLIT, BN):
        j = start + tl.arange(0, BN)
        valid = j < N
        k = tl.load(k_ptr + b * k_row + j[:, None] * k_key + d[None, :], mask=valid[:, None] & dm[None, :],
                    other=0.0)                                                          # [BN, DP]
        if not ROUND_P:
            k = k.to(tl.float32)
        if HAS_MASK:
            valid = valid & (tl.load(mask_ptr + b * mask_row + j, mask=valid, other=0) != 0)
        if ROUND_P and NATIVE:
            s = tl.dot(q, tl.trans(k)) * scale                                          # bf16 in, fp32 sums
        elif ROUND_P:   # the interpreter (CPU tensors) has no bf16 dot: the same exact products in fp32
            s = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision="ieee") * scale
        else:
            s = tl.dot(q, tl.trans(k), input_precision=QK_PRECISION) * scale          # [BH, BN]
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)                            # nothing valid yet: exp(-inf) = 0
        alpha = tl.exp(m_i - m_use)
        p = tl.exp(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if ROUND_P and NATIVE:      # official: the row sum from P, then P in the keys' dtype for P . V
            acc = acc * alpha[:, None] + tl.dot(p.to(k.dtype), k)
        elif ROUND_P:
            # and its fp32 -> bf16 cast truncates: round to nearest even on the bits (p is finite, >= 0)
            bits = p.to(tl.int32, bitcast=True)
            p16 = ((bits + 0x7FFF + ((bits >> 16) & 1)) & -65536).to(tl.float32, bitcast=True)
            acc = acc * alpha[:, None] + tl.dot(p16, k.to(tl.float32), input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p, k, input_precision="tf32x3")
        m_i = m_new
    part = (b * S + sp) * H + h                                                         # [BH] rows of the partials
    tl.store(m_ptr + part, m_i, mask=hm)
    tl.store(l_ptr + part, l_i, mask=hm)
    tl.store(acc_ptr + part[:, None] * DP + d[None, :], acc, mask=hm[:, None] & dm[None, :])


@triton.jit
def _attend_merge_kernel(m_ptr, l_ptr, acc_ptr, sink_ptr, o_ptr, S, o_row, o_head, H: tl.constexpr,
                         D: tl.constexpr, DP: tl.constexpr, SP: tl.constexpr, OFFICIAL: tl.constexpr):
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
    if OFFICIAL:        # one split: the official end, row sum + exp(sink - max), then the division
        mx = tl.max(m, 0)
        mx = tl.where(mx == float("-inf"), 0.0, mx)                                     # no valid key: o = 0
        o = tl.sum(acc, 0) / (tl.sum(l, 0) + tl.exp(sink - mx))
    else:
        top = tl.maximum(tl.max(m, 0), sink)
        w = tl.exp(m - top)                                                             # a split with no valid key: 0
        total = tl.sum(l * w, 0) + tl.exp(sink - top)                                   # the sink's share, no value
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
    B, _, H, D = q.shape
    N = K.shape[2]
    q3, k3 = q[:, 0], K[:, 0]
    if q3.stride(-1) != 1:
        q3 = q3.contiguous()
    if k3.stride(-1) != 1:
        k3 = k3.contiguous()
    if sink.stride(0) != 1:                                                             # the merge reads sink[h]
        sink = sink.contiguous()
    out = torch.empty(B, 1, H, D, dtype=torch.float32, device=q.device)
    if B == 0 or H == 0 or D == 0:
        return out
    DP = max(16, triton.next_power_of_2(D))
    # bf16 (or fp16) keys: the official numerics (P rounded to their dtype per 64-key step): one split, the keys in order
    official = K.dtype in (torch.bfloat16, torch.float16)
    if official:
        if q.dtype != K.dtype:
            q3 = q3.to(K.dtype)
        bn = BN_OFFICIAL
        split, S = triton.cdiv(max(N, 1), bn) * bn, 1
    else:
        bn = BN
        split, S = splits(B, H, N) if N else (BN, 1)
    m = torch.empty(B, S, H, dtype=torch.float32, device=q.device)
    l = torch.empty_like(m)
    acc = torch.empty(B, S, H, DP, dtype=torch.float32, device=q.device)
    if mask is not None:
        mk = mask[:, 0]
        if mk.stride(-1) != 1:
            mk = mk.contiguous()
        mask_row = 0 if mk.shape[0] == 1 else mk.stride(0)
        mk = mk.view(torch.uint8)
    else:
        mk, mask_row = k3, 0                                                            # never read
    # bf16 (or fp16) q and keys are exact in TF32: one product per element is exact there; 8 warps at head_dim 512
    # keep the [16, 512] query, keys and accumulator in registers (4 spill)
    exact = q.dtype in (torch.bfloat16, torch.float16) and K.dtype in (torch.bfloat16, torch.float16)
    _attend_split_kernel[(B, triton.cdiv(H, BH), S)](
        q3, k3, mk, m, l, acc, N, S, scale, q3.stride(0), q3.stride(1), k3.stride(0), k3.stride(1), mask_row,
        H=H, D=D, DP=DP, SPLIT=split, BH=BH, BN=bn, HAS_MASK=mask is not None,
        QK_PRECISION="tf32" if exact else "ieee", ROUND_P=official, NATIVE=q.is_cuda,
        num_warps=WARPS_WIDE if DP >= 512 else 4, **({} if STAGES is None else {"num_stages": STAGES}))
    _attend_merge_kernel[(B, H)](m, l, acc, sink, out, S, out.stride(0), out.stride(2), H=H, D=D, DP=DP,
                                 SP=max(2, triton.next_power_of_2(S)), OFFICIAL=official, num_warps=4)
    return out
