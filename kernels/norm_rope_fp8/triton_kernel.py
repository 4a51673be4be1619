"""The kv path's chain (RMSNorm, partial RoPE, FP8 fake quant of the unrotated dims) and a compressed entry's (its
cast to the model dtype, RMSNorm, RoPE) in one Triton launch each, where the chained kernels took three (kv: norm,
RoPE, quant, and the reference's cat of the quantised and rotated parts: four) and the entry's three.

Layout: x viewed as [R, D] rows (last-dim stride 1, any row stride), the output a new contiguous [R, D] of the
output dtype; one program per row. The steps are the chained kernels' own, in their order and at their rounding
points, so the result is meant to be theirs bit for bit:
- CAST (x's dtype is not the output's): x rounded to the output dtype is stored into the output row and read back
  (after a barrier), so the norm reads what `dsv4_kernels.rms_norm` read, through the same loads;
- NORM: `dsv4_kernels.rms_norm`'s program on that row (the same 1D tile, warps and expressions: its sum of squares
  in its order), rr = rsqrt(sum(x * x) * fp32(1/D) + eps); each element w * (x * rr), rounded to the output dtype;
- ROPE: the last rd dims as the pairs (a, b) of those rounded values, (a cos - b sin, a sin + b cos) as
  `dsv4_kernels.rope` computes them, rounded; the first D - rd copied;
- FP8 (block > 0): `dsv4_kernels.act_quant`'s e4m3 fake quant of the unrotated dims, block by block (amax, the
  ue8m0 scale through libdevice log2/exp2, round to nearest even), on the rounded values.
Without NORM and ROPE (`fp8_nope`) only the quant of the unrotated dims and the copy of the rest: one launch where
the reference's slice, quant and cat were two. With NORM and FP8 but no rotated dims (`norm_fp8`) the RMSNorm and the
quant of the whole row: `Attention.q_lora`'s q_norm and its projections' activation simulation, two launches -> one.
Launched on torch's current stream (capturable). On CPU tensors (TRITON_INTERPRET=1 only) libdevice does not
exist: EXACT=False uses tl.log2/tl.exp2 there.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._pdl import pdl, pdl_enter
from .._rows import rows
# its own import line: test_only_the_e4m3_kernels_need_compute_capability_8_9 reads it as this package's e4m3 use
from ..act_quant.triton_kernel import fp8_fake_blocks
from ..rope.triton_kernel import _cs_levels


@triton.jit
def _norm_rope_fp8_kernel(x_ptr, w_ptr, cs_ptr, o_ptr, x_row, I, cs_outer, cs_inner, inv_n, eps, D: tl.constexpr,
                          DP: tl.constexpr, NOPE: tl.constexpr, BLOCK: tl.constexpr, GP: tl.constexpr,
                          BP: tl.constexpr, HALF: tl.constexpr, HP: tl.constexpr, CAST: tl.constexpr,
                          NORM: tl.constexpr, ROPE: tl.constexpr, FP8: tl.constexpr, EXACT: tl.constexpr,
                          PDL: tl.constexpr):
    pdl_enter(PDL)
    dt = o_ptr.dtype.element_ty
    r = tl.program_id(0).to(tl.int64)
    orow = o_ptr + r * D
    src = x_ptr + r * x_row
    if CAST:
        c = tl.arange(0, DP)
        tl.store(orow + c, tl.load(src + c, mask=c < D, other=0.0).to(dt), mask=c < D)
        tl.debug_barrier()
        src = orow
    rr = 1.0
    if NORM:                                        # rms_norm's program: the same tile and expressions
        c = tl.arange(0, DP)
        m = c < D
        x = tl.load(src + c, mask=m, other=0.0).to(tl.float32)
        rr = tl.rsqrt(tl.sum(x * x, axis=0) * inv_n + eps)
    if CAST:
        tl.debug_barrier()                          # the row is rewritten below: every read of it done first
    # the unrotated dims, as blocks [GP, BP] of BLOCK (one block of all of them without FP8)
    b = tl.arange(0, GP)[:, None]
    j = tl.arange(0, BP)[None, :]
    inside = (b * BLOCK + j < NOPE) & (j < BLOCK)
    col = b * BLOCK + j
    v = tl.load(src + col, mask=inside, other=0.0).to(tl.float32)
    if NORM:
        v = (tl.load(w_ptr + col, mask=inside, other=0.0).to(tl.float32) * (v * rr)).to(dt).to(tl.float32)
    if FP8:                                         # act_quant's fp8 program on each block
        v = fp8_fake_blocks(v, EXACT)
    # the rotated dims, as pairs
    i = tl.arange(0, HP)
    mi = i < HALF
    a = tl.load(src + NOPE + 2 * i, mask=mi, other=0.0).to(tl.float32)
    bb = tl.load(src + NOPE + 2 * i + 1, mask=mi, other=0.0).to(tl.float32)
    if NORM:
        a = (tl.load(w_ptr + NOPE + 2 * i, mask=mi, other=0.0).to(tl.float32) * (a * rr)).to(dt).to(tl.float32)
        bb = (tl.load(w_ptr + NOPE + 2 * i + 1, mask=mi, other=0.0).to(tl.float32) * (bb * rr)).to(dt).to(tl.float32)
    if ROPE:
        csr = cs_ptr + (r // I) * cs_outer + (r % I) * cs_inner + 2 * i
        cos = tl.load(csr, mask=mi, other=0.0).to(tl.float32)
        sin = tl.load(csr + 1, mask=mi, other=0.0).to(tl.float32)
        a, bb = a * cos - bb * sin, a * sin + bb * cos
    tl.store(orow + col, v.to(dt), mask=inside)
    tl.store(orow + NOPE + 2 * i, a.to(dt), mask=mi)
    tl.store(orow + NOPE + 2 * i + 1, bb.to(dt), mask=mi)


def _launch(x: torch.Tensor, weight: torch.Tensor | None, eps: float, cs: torch.Tensor | None, rd: int,
            dtype: torch.dtype, block: int) -> torch.Tensor:
    D = x.shape[-1]
    lead = tuple(x.shape[:-1])
    x2 = rows(x)
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    R = x2.shape[0]
    if R:
        nope, dp = D - rd, triton.next_power_of_2(D)
        if cs is not None:
            table, inner, so, si = _cs_levels(cs, lead, R, rd)
        else:
            table, inner, so, si = x2, 1, 0, 0                      # never read without ROPE
        blk = block if block else max(nope, 1)
        w = weight if weight is not None else x2                    # never read without NORM
        # 1 / D rounded to double then to fp32 is fp32(1 / D) (53 >= 2 * 24 + 2 bits: no double-rounding error)
        _norm_rope_fp8_kernel[(R,)](
            x2, w, table, out, x2.stride(0), inner, so, si, 1.0 / D, eps, D=D, DP=dp, NOPE=nope, BLOCK=blk,
            GP=triton.next_power_of_2(max(1, -(-nope // blk))), BP=triton.next_power_of_2(blk),
            HALF=rd // 2, HP=triton.next_power_of_2(max(1, rd // 2)), CAST=x.dtype != dtype, NORM=weight is not None,
            ROPE=cs is not None, FP8=block > 0, EXACT=x.is_cuda,
            num_warps=max(1, min(16, dp // 512)), **pdl(x2))                   # rms_norm's: its reduction, its order
    return out


def norm_rope_fp8_triton(x: torch.Tensor, weight: torch.Tensor, eps: float, cs: torch.Tensor, rd: int,
                         dtype: torch.dtype | None = None, block: int = 0) -> torch.Tensor:
    return _launch(x, weight, eps, cs, rd, x.dtype if dtype is None else dtype, block)


def fp8_nope_triton(x: torch.Tensor, rd: int, block: int) -> torch.Tensor:
    return _launch(x, None, 0.0, None, rd, x.dtype, block)


def norm_fp8_triton(x: torch.Tensor, weight: torch.Tensor, eps: float, block: int) -> torch.Tensor:
    return _launch(x, weight, eps, None, 0, x.dtype, block)
