"""FP4 (MXFP4 / NVFP4) weight-only GEMVs for decode, in Triton: the routed experts of a MoE layer and single
projections. Hopper has no FP4 tensor cores, so the whole win is bytes: 0.53 (MXFP4) or 0.56 (NVFP4) bytes per
weight instead of 2. The packed codes and block scales are read once, decoded in registers, and fed as bf16 to
`tl.dot` against the (at most 16, zero-padded) token columns; the tensor cores make the padding free.

Decoding an e2m1 code c without a table: placing its 3 magnitude bits at fp16 bits 11..9 and its sign at bit 15
gives the fp16 number e2m1(c) * 2^-14 exactly (code 1 becomes the fp16 subnormal 2^-15), so one shift-and-or per
nibble and a conversion; the 2^14 is folded into the block scale. Every dequantised weight (e2m1 x e8m0, or
e2m1 x e4m3) has at most 6 significant bits, so the bf16 operand is exact; NVFP4's per-matrix global scale is
applied to the fp32 accumulator.

Routed experts, without sorting and without host reads: program (p, n-block) handles pair p = (token p // k,
slot p % k) only if p is the first of the pairs that chose the same expert (in chunks of 16); it then reads that
expert's rows once for all those pairs (a token-major loop would read an expert once per token that picked it).
Stage 1 (w1, w3 together) ends in SwiGLU (clamp before SiLU) times the routing weight and writes h [P, inter] in
x's dtype, as the reference rounds it before w2; stage 2 (w2) writes y2 [P, dim] fp32; a sum over k gives y
(`sum_pairs_triton`, the routed paths' last launch: one where the reference's slot-order loop takes k - 1).
Fixed launch shapes; launched by Triton on torch's current stream, so it records into CUDA graphs.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._pdl import pdl, pdl_enter

from .reference import act_inputs, expert_rows

TP = 16          # token columns per program: the smallest tl.dot width; decode batches are at most 8
BD_SUM = 512     # output columns per program of the pair sum: 8 programs per token at Flash's dim 4096


@triton.jit
def _run(idx_ptr, p, P, PP: tl.constexpr, TPC: tl.constexpr):
    """Pair p's expert e, whether p leads a chunk of TPC pairs that chose e, and that chunk's pair indices."""
    q = tl.arange(0, PP)
    ids = tl.load(idx_ptr + q, mask=q < P, other=-1)
    e = tl.load(idx_ptr + p)
    same = (ids == e) & (q < P)
    rank_p = tl.sum((same & (q < p)).to(tl.int32), axis=0)
    rank_q = tl.cumsum(same.to(tl.int32), axis=0) - 1
    r = tl.arange(0, TPC)
    sel = same[None, :] & (rank_q[None, :] == (rank_p + r)[:, None])               # [TPC, PP]
    member = tl.sum(tl.where(sel, q[None, :], 0), axis=1)
    valid = tl.sum(sel.to(tl.int32), axis=1) > 0
    return e, (rank_p % TPC) == 0, member, valid


@triton.jit
def _fp4_tile(w_ptr, s_ptr, rows, rmask, kb0, K, FMT: tl.constexpr, G: tl.constexpr, BN: tl.constexpr,
              BK: tl.constexpr, DT: tl.constexpr):
    """Rows `rows`, columns [2*kb0, 2*kb0 + BK) of one FP4 matrix -> (even, odd) columns [BN, BK/2] in DT."""
    NB: tl.constexpr = BK // G            # scale blocks in the chunk
    HB: tl.constexpr = G // 2             # packed bytes per scale block
    half = K // 2
    j = tl.arange(0, NB)
    i = tl.arange(0, HB)
    kb = kb0 + j[:, None] * HB + i[None, :]                                          # [NB, HB] byte columns
    m = rmask[:, None, None] & (kb < half)[None, :, :]
    b = tl.load(w_ptr + rows[:, None, None] * half + kb[None, :, :], mask=m, other=0).to(tl.int32)
    sb = kb0 // HB + j
    sr = tl.load(s_ptr + rows[:, None] * (K // G) + sb[None, :], mask=rmask[:, None] & (sb < K // G)[None, :], other=0)
    if FMT == 0:   # e8m0: the byte is the fp32 exponent field
        sc = (sr.to(tl.int32) << 23).to(tl.float32, bitcast=True)
    else:          # e4m3
        sc = sr.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    sc = (sc * 16384.0)[:, :, None]
    lo = (((b & 7) << 9) | ((b & 8) << 12)).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32) * sc
    hi = (((b & 0x70) << 5) | ((b & 0x80) << 8)).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32) * sc
    return tl.reshape(lo.to(DT), (BN, BK // 2)), tl.reshape(hi.to(DT), (BN, BK // 2))


@triton.jit
def _x_cols(x_ptr, xrow, valid, kb0, K, BK: tl.constexpr, DT: tl.constexpr):
    """Even and odd input columns of the chunk for the token rows `xrow` -> [BK/2, TP] each."""
    kb = kb0 + tl.arange(0, BK // 2)
    m = (kb < K // 2)[:, None] & valid[None, :]
    base = x_ptr + xrow[None, :].to(tl.int64) * K + 2 * kb[:, None]
    return tl.load(base, mask=m, other=0.0).to(DT), tl.load(base + 1, mask=m, other=0.0).to(DT)


# e2m1 pairs -> fp16 bits for 4 packed bytes at once: spread bytes 0,1 (then 2,3) into the two 16-bit halves
# (prmt), then one shift-mask per field for both halves. Outputs: lo nibbles (elements 2j) of bytes 0..3 in
# $0,$1 and hi nibbles (elements 2j+1) in $2,$3, each fp16 = e2m1 * 2^-14. A constexpr: a jit function may read
# no other kind of global (the H200 run failed to compile it as a plain str).
_E2M1X4_ASM = tl.constexpr("""{
.reg .b32 z, t0, t1, a, b;
mov.b32 z, 0;
prmt.b32 t0, $4, z, 0x4140;
prmt.b32 t1, $4, z, 0x4342;
shl.b32 a, t0, 9; and.b32 a, a, 0x0E000E00; shl.b32 b, t0, 12; and.b32 b, b, 0x80008000; or.b32 $0, a, b;
shl.b32 a, t1, 9; and.b32 a, a, 0x0E000E00; shl.b32 b, t1, 12; and.b32 b, b, 0x80008000; or.b32 $1, a, b;
shl.b32 a, t0, 5; and.b32 a, a, 0x0E000E00; shl.b32 b, t0, 8; and.b32 b, b, 0x80008000; or.b32 $2, a, b;
shl.b32 a, t1, 5; and.b32 a, a, 0x0E000E00; shl.b32 b, t1, 8; and.b32 b, b, 0x80008000; or.b32 $3, a, b;
}""")


@triton.jit
def _block_dot(w_ptr, s_ptr, rows, rmask, kk, K, xb, acc, FMT: tl.constexpr, G: tl.constexpr, BN: tl.constexpr,
               ASM: tl.constexpr, DT: tl.constexpr):
    """acc += (W[rows, kk:kk+G] . xb) * scale[rows, kk/G]: one scale block. The codes go to the tensor cores as
    fp16 = e2m1 * 2^-14 (exact, no conversion per weight); the block scale (times 2^14) multiplies the [BN, TP]
    partial product instead of every weight."""
    HB: tl.constexpr = G // 2
    i = tl.arange(0, HB)
    inb = kk < K
    b = tl.load(w_ptr + rows[:, None] * (K // 2) + kk // 2 + i[None, :], mask=rmask[:, None] & inb, other=0)
    if ASM:
        lo, hi = tl.inline_asm_elementwise(_E2M1X4_ASM, "=r,=r,=r,=r,r", [b], dtype=(tl.float16, tl.float16),
                                           is_pure=True, pack=4)
    else:
        bi = b.to(tl.int16)
        lo = (((bi & 7) << 9) | ((bi & 8) << 12)).to(tl.float16, bitcast=True)
        hi = (((bi & 0x70) << 5) | ((bi & 0x80) << 8)).to(tl.float16, bitcast=True)
    w = tl.reshape(tl.join(lo, hi), (BN, G))                                          # natural column order
    sr = tl.load(s_ptr + rows * (K // G) + kk // G, mask=rmask & inb, other=0)
    if FMT == 0:
        sc = (sr.to(tl.int32) << 23).to(tl.float32, bitcast=True)
    else:
        sc = sr.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    if DT == tl.float32:
        part = tl.dot(w.to(tl.float32), xb, input_precision="ieee")
    else:
        part = tl.dot(w, xb)
    return acc + part * (sc * 16384.0)[:, None]


@triton.jit
def _x_block(x_ptr, xrow, valid, kk, K, G: tl.constexpr, DT: tl.constexpr):
    """Input columns [kk, kk+G) for the token rows `xrow` -> [G, TP]."""
    c = kk + tl.arange(0, G)
    return tl.load(x_ptr + xrow[None, :].to(tl.int64) * K + c[:, None], mask=(c < K)[:, None] & valid[None, :],
                   other=0.0).to(DT)


@triton.jit
def _dot(a, b, acc, DT: tl.constexpr):
    if DT == tl.float32:
        return tl.dot(a, b, acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def _fp4_rows_kernel(x_ptr, idx_ptr, wts_ptr, out_ptr, wa_ptr, sa_ptr, ga_ptr, wb_ptr, sb_ptr, gb_ptr,
                     P, XDIV, N, K, limit,
                     FMT: tl.constexpr, G: tl.constexpr, MODE: tl.constexpr, HAS_LIMIT: tl.constexpr,
                     BN: tl.constexpr, BK: tl.constexpr, TPC: tl.constexpr, PP: tl.constexpr, DT: tl.constexpr,
                     DECODE: tl.constexpr, HROUND: tl.constexpr, ROUND: tl.constexpr, PDL: tl.constexpr):
    """MODE 0: out[b, n] = x[b] . W[n] (one matrix). MODE 1: expert up, h = wts * swiglu(w1 x, w3 x).
    MODE 2: expert down, y2 = w2 h. out rows are pairs (MODE 1, 2) or tokens (MODE 0)."""
    pdl_enter(PDL)
    pid = tl.program_id(0)
    rows = tl.program_id(1) * BN + tl.arange(0, BN)
    rmask = rows < N
    if MODE == 0:
        e64 = tl.full((), 0, tl.int64)
        member = pid * TPC + tl.arange(0, TPC)
        valid = member < P
        lead = pid >= 0
    else:
        e, lead, member, valid = _run(idx_ptr, pid, P, PP, TPC)
        e64 = e.to(tl.int64)
    rmask = rmask & lead          # a non-leading pair's program reads nothing and writes nothing
    valid = valid & lead
    half = K // 2
    wa = wa_ptr + e64 * N * half
    sa = sa_ptr + e64 * N * (K // G)
    wb = wb_ptr + e64 * N * half
    sbp = sb_ptr + e64 * N * (K // G)
    xrow = member // XDIV
    acc_a = tl.zeros((BN, TPC), tl.float32)
    acc_b = tl.zeros((BN, TPC), tl.float32)
    if DECODE == 0:
        for kb0 in range(0, half, BK // 2):
            xe, xo = _x_cols(x_ptr, xrow, valid, kb0, K, BK, DT)
            lo, hi = _fp4_tile(wa, sa, rows, rmask, kb0, K, FMT, G, BN, BK, DT)
            acc_a = _dot(lo, xe, acc_a, DT)
            acc_a = _dot(hi, xo, acc_a, DT)
            if MODE == 1:
                lo, hi = _fp4_tile(wb, sbp, rows, rmask, kb0, K, FMT, G, BN, BK, DT)
                acc_b = _dot(lo, xe, acc_b, DT)
                acc_b = _dot(hi, xo, acc_b, DT)
    else:
        for k0 in range(0, K, BK):
            for j in tl.static_range(BK // G):
                kk = k0 + j * G
                xb = _x_block(x_ptr, xrow, valid, kk, K, G, DT)
                acc_a = _block_dot(wa, sa, rows, rmask, kk, K, xb, acc_a, FMT, G, BN, DECODE == 2, DT)
                if MODE == 1:
                    acc_b = _block_dot(wb, sbp, rows, rmask, kk, K, xb, acc_b, FMT, G, BN, DECODE == 2, DT)
    if FMT == 1:
        acc_a = acc_a * tl.load(ga_ptr + e64)
        if MODE == 1:
            acc_b = acc_b * tl.load(gb_ptr + e64)
    if ROUND:      # each projection's output in the activation dtype (bf16), as the reference's linear returns it
        acc_a = acc_a.to(tl.bfloat16).to(tl.float32)
        acc_b = acc_b.to(tl.bfloat16).to(tl.float32)
    if MODE == 1:
        g = acc_a
        u = acc_b
        if HAS_LIMIT:   # clamp the raw gate before SiLU; the up projection both ways
            g = tl.minimum(g, limit)
            u = tl.minimum(tl.maximum(u, -limit), limit)
        wt = tl.load(wts_ptr + member, mask=valid, other=0.0)
        res = (g / (1.0 + tl.exp(-g)) * u) * wt[None, :]
    else:
        res = acc_a
    if HROUND:    # h goes to w2 rounded to bf16 (as the reference), carried in fp16 for the fp16 tensor-core path
        res = res.to(tl.bfloat16).to(tl.float32)
    optr = out_ptr + member[None, :].to(tl.int64) * N + rows[:, None]
    tl.store(optr, res.to(out_ptr.dtype.element_ty), mask=rmask[:, None] & valid[None, :])


# (BN, BK, num_warps, num_stages, DECODE). DECODE 0 dequantises whole tiles to bf16 in fp32 arithmetic; 1 feeds
# fp16 codes per scale block (scale on the partial product); 2 is 1 with the packed-byte decode in PTX. The H200
# sweep of DECODE 0 tiles (benchmarks/results/kernels-h200-1.txt) found BN=64, BK=256, 4 warps fastest for every
# GEMV and routed shape; DECODE 1 and 2 have not been timed on a GPU yet (`benchmarks/kernels.py --sweep`).
CONFIG = {"gemv": (64, 256, 4, 3, 0), "up": (64, 256, 4, 3, 0), "down": (64, 256, 4, 3, 0)}
_FMT = {"mxfp4": (0, 32), "nvfp4": (1, 16)}


@triton.jit
def _sum_pairs_kernel(y_ptr, o_ptr, D, K: tl.constexpr, BD: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    t = tl.program_id(0).to(tl.int64)
    d = tl.program_id(1) * BD + tl.arange(0, BD)
    m = d < D
    base = y_ptr + t * K * D + d
    acc = tl.load(base, mask=m, other=0.0)
    for j in tl.static_range(1, K):          # slot order, one fp32 add each: the loop's roundings (no products)
        acc = acc + tl.load(base + j * D, mask=m, other=0.0)
    tl.store(o_ptr + t * D + d, acc, mask=m)


def sum_pairs_triton(y: torch.Tensor) -> torch.Tensor:
    """`reference.sum_pairs` in one launch: y [T, k, dim] fp32 -> [T, dim], each token's k outputs added one after
    another in slot order, bit for bit the loop's k - 1 adds (fp32 adds in the same order round the same)."""
    T, k, D = y.shape
    y = y.contiguous()
    out = torch.empty(T, D, dtype=y.dtype, device=y.device)
    if T and D:
        if k == 0:
            raise ValueError(f"sum_pairs_triton: expected at least one pair per token, found y {tuple(y.shape)}")
        _sum_pairs_kernel[(T, triton.cdiv(D, BD_SUM))](y, out, D, K=k, BD=BD_SUM, num_warps=4, **pdl(y))
    return out


def _parts(w):
    """(data, scale, global scale) as the kernel reads them: raw bytes; fp32 global scales (a dummy for MXFP4)."""
    fmt, data, scale, scale2, _ = w
    for name, t in (("data", data), ("scale", scale)):
        if not t.is_contiguous():
            raise ValueError(f"FP4 kernel: the weight's {name} must be contiguous, found strides {t.stride()}")
    d = data.view(torch.uint8)
    g2 = scale2.reshape(-1) if fmt == "nvfp4" else d
    if fmt == "nvfp4" and g2.dtype != torch.float32:
        raise TypeError(f"FP4 kernel: nvfp4 scale2 must be float32 (converted once at load), found {scale2.dtype}")
    return d, scale.view(torch.uint8), g2


def _operand(x: torch.Tensor, decode: int) -> tuple[torch.Tensor, object]:
    """The activation as the kernel's tensor cores take it. The fp16 paths (DECODE 1, 2) convert bf16 to fp16:
    exact for 2^-14 <= |x| <= 65504 (decode activations and expert hiddens live well inside)."""
    if x.dtype == torch.float32:
        return x, tl.float32
    if decode == 0 or x.dtype == torch.float16:
        return x, {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}[x.dtype]
    return x.to(torch.float16), tl.float16


def _launch(grid, x, dt, idx, wts, out, wa, wb, P, xdiv, N, K, limit, fmt, mode, cfg, hround=False, rnd=False):
    bn, bk, warps, stages, decode = cfg
    f, g = _FMT[fmt]
    a, b = _parts(wa), _parts(wb if wb is not None else wa)
    _fp4_rows_kernel[grid](x, idx, wts, out, *a, *b, P, xdiv, N, K, float(limit or 0.0),
                           FMT=f, G=g, MODE=mode, HAS_LIMIT=limit is not None, BN=bn, BK=max(bk, g), TPC=TP,
                           PP=max(16, triton.next_power_of_2(P)), DT=dt, DECODE=decode, HROUND=hround, ROUND=rnd,
                           num_warps=warps, num_stages=stages, **pdl(x))


def fp4_gemv_triton(x: torch.Tensor, w, cfg=None) -> torch.Tensor:
    """x [B, K] bf16/fp32 contiguous, w an FP4 weight tuple [N, K/2] -> y [B, N] in x.dtype."""
    B, K = x.shape
    N = w[1].shape[0]
    cfg = cfg or CONFIG["gemv"]
    xo, dt = _operand(x, cfg[4])
    y = torch.empty(B, N, dtype=x.dtype, device=x.device)
    _launch((triton.cdiv(B, TP), triton.cdiv(N, cfg[0])), xo, dt, xo, xo, y, w, None, B, 1, N, K, None, w[0], 0, cfg)
    return y


def routed_experts_triton(x, idx, wts, w1, w3, w2, limit, cfg_up=None, cfg_down=None, act_sim=None) -> torch.Tensor:
    T, k = idx.shape
    P = T * k
    dim = x.shape[1]
    inter = w1[1].shape[1]
    idx_flat = idx.reshape(-1)
    wts_flat = wts.reshape(-1)
    cu, cd = cfg_up or CONFIG["up"], cfg_down or CONFIG["down"]
    rnd = x.dtype == torch.bfloat16
    x, xdiv = expert_rows(x, idx_flat, k, w1, act_sim)
    xo, dt = _operand(x, cu[4])
    # h in the dtype stage 2 reads (fp16 on its fp16 path), rounded to x.dtype's precision first
    hdt = torch.float16 if (x.dtype == torch.bfloat16 and cd[4] != 0 and act_sim is None) else x.dtype
    h = torch.empty(P, inter, dtype=hdt, device=x.device)
    _launch((P, triton.cdiv(inter, cu[0])), xo, dt, idx_flat, wts_flat, h, w1, w3, P, xdiv, inter, dim, limit, w1[0], 1, cu,
            hround=hdt != x.dtype, rnd=rnd)
    if act_sim is not None:
        h = act_inputs(h, idx_flat, w2, act_sim).contiguous()
    h, hdt_tl = _operand(h, cd[4])
    y2 = torch.empty(P, dim, dtype=torch.float32, device=x.device)
    _launch((P, triton.cdiv(dim, cd[0])), h, hdt_tl, idx_flat, wts_flat, y2, w2, None, P, 1, dim, inter, None, w2[0], 2, cd,
            rnd=rnd)
    return sum_pairs_triton(y2.view(T, k, dim))
