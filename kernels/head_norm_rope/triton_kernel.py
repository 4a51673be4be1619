"""The q path's per-head norm and RoPE in one Triton launch, where the reference runs about 16 small kernels
(`head_rms_ref`'s casts, square, mean, add, rsqrt and product, each rounded to the model dtype, then the RoPE).

Layout: x viewed as [R, D] rows (last-dim stride 1, any row stride; R = tokens x heads), the output a new contiguous
[R, D]. Program p holds BR rows. Per row, the official per-op rounding of `head_rms_ref` (dt = x.dtype; in fp32 every
rounding is a no-op): sq = dt(x * x); ms = dt(sum(sq) * fp32(1/D)) (the mean as torch forms it); t = dt(ms + eps);
rs = dt(rsqrt(t)) (libdevice `__nv_rsqrtf`, what torch's CUDA rsqrt calls); y = dt(x * rs). The first D - rd dims
are stored as y; the last rd, read back as the pairs (a, b) = (y[2i], y[2i+1]) in fp32, are rotated as the RoPE
kernel does (`dsv4_kernels.rope`: (a cos - b sin, a sin + b cos), the same expressions) and stored in dt.

Not bit-exact with the reference: the sum of squares is a tree reduction in another order than torch's (its result
is rounded to dt, so they differ only where the fp32 sums straddle a dt rounding boundary), and Triton may contract
a * cos - b * sin into an FMA as the RoPE kernel does. Launched on torch's current stream (capturable).

On CPU tensors (only under TRITON_INTERPRET=1) libdevice does not exist: `EXACT=False` uses tl.rsqrt there.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import libdevice

from .._pdl import pdl, pdl_enter
from .._rows import rows
from ..rope.triton_kernel import _cs_levels

TILE = 2048                                            # elements per program at most (rows of D)


@triton.jit
def _head_norm_rope_kernel(x_ptr, cs_ptr, o_ptr, R, x_row, I, cs_outer, cs_inner, inv_d, eps, D: tl.constexpr,
                           DP: tl.constexpr, NOPE: tl.constexpr, NP: tl.constexpr, HALF: tl.constexpr,
                           HP: tl.constexpr, BR: tl.constexpr, EXACT: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    dt = o_ptr.dtype.element_ty
    r = (tl.program_id(0) * BR + tl.arange(0, BR)).to(tl.int64)[:, None]        # [BR, 1]
    rm = r < R
    xr = x_ptr + r * x_row
    orow = o_ptr + r * D
    c = tl.arange(0, DP)[None, :]
    x = tl.load(xr + c, mask=rm & (c < D), other=0.0).to(tl.float32)
    sq = (x * x).to(dt).to(tl.float32)
    ms = (tl.sum(sq, axis=1) * inv_d).to(dt).to(tl.float32)[:, None]            # [BR, 1]
    t = (ms + eps).to(dt).to(tl.float32)
    if EXACT:
        rs = libdevice.rsqrt(t)
    else:
        rs = tl.rsqrt(t)
    rs = rs.to(dt).to(tl.float32)
    if NOPE > 0:                                                                 # the unrotated dims: normed only
        cn = tl.arange(0, NP)[None, :]
        m = rm & (cn < NOPE)
        xn = tl.load(xr + cn, mask=m, other=0.0).to(tl.float32)
        tl.store(orow + cn, (xn * rs).to(dt), mask=m)
    i = tl.arange(0, HP)[None, :]
    m = rm & (i < HALF)
    a = (tl.load(xr + NOPE + 2 * i, mask=m, other=0.0).to(tl.float32) * rs).to(dt).to(tl.float32)
    b = (tl.load(xr + NOPE + 2 * i + 1, mask=m, other=0.0).to(tl.float32) * rs).to(dt).to(tl.float32)
    csr = cs_ptr + (r // I) * cs_outer + (r % I) * cs_inner + 2 * i
    cos = tl.load(csr, mask=m, other=0.0).to(tl.float32)
    sin = tl.load(csr + 1, mask=m, other=0.0).to(tl.float32)
    ya, yb = a * cos - b * sin, a * sin + b * cos
    tl.store(orow + NOPE + 2 * i, ya.to(dt), mask=m)
    tl.store(orow + NOPE + 2 * i + 1, yb.to(dt), mask=m)


def head_norm_rope_triton(x: torch.Tensor, cs: torch.Tensor, eps: float, rd: int) -> torch.Tensor:
    D = x.shape[-1]
    lead = tuple(x.shape[:-1])
    x2 = rows(x)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    R = x2.shape[0]
    if R:
        table, inner, so, si = _cs_levels(cs, lead, R, rd)
        nope, dp = D - rd, triton.next_power_of_2(D)
        br = max(1, min(triton.next_power_of_2(R), TILE // dp))
        # 1 / D rounded to double then to fp32 is fp32(1 / D) (53 >= 2 * 24 + 2 bits: no double-rounding error)
        _head_norm_rope_kernel[(triton.cdiv(R, br),)](
            x2, table, out, R, x2.stride(0), inner, so, si, 1.0 / D, eps, D=D, DP=dp, NOPE=nope,
            NP=triton.next_power_of_2(max(nope, 1)), HALF=rd // 2, HP=triton.next_power_of_2(rd // 2), BR=br,
            EXACT=x.is_cuda, num_warps=4 if br * dp >= 2048 else 1, **pdl(x2))
    return out
