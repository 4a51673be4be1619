"""Partial interleaved RoPE in Triton: one launch for any number of rows, where the reference runs 12-14 small
kernels (cast, two slices, cos/sin picks, neg, four muls, sub, add, stack, cast, cat).

Layout: x viewed as [R, D] rows (last-dim stride 1, any row stride); the output is a new contiguous [R, D]. Program
p holds BR rows: it copies their first D - rd dims and rotates the last rd as pairs (a, b) = (x[2i], x[2i+1]):
(a cos - b sin, a sin + b cos), or (a cos + b sin, b cos - a sin) for the inverse (the reference's a * cos - b * -sin
and a * -sin + b * cos, equal up to the sign of a zero). fp32 math, the result cast to x.dtype.

cs: the caller's table broadcast to x's leading dims is addressed with two levels, row r reading its rd/2 (cos, sin)
pairs at (r // I) * cs_outer + (r % I) * cs_inner: the decode's tables [n, 1, rd/2, 2] against q [n, 1, H, D]
(cs_inner = 0: every head of a row at its row's position), kv [n, 1, D], the compressor's [n, D] and the reference
decode's one row for all. Broadcasts that need more than two levels are expanded to a contiguous table first.

Not bit-exact with the reference: Triton may contract a * cos - b * sin into an FMA (one rounding instead of two),
so results agree to fp32 rounding (an ulp or two of the products before the cast to x.dtype). Launched on torch's
current stream (capturable).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._pdl import pdl, pdl_enter
from .._rows import rows

# elements per program at most (rows of D): small tiles, so that a decode step's few rows spread over several
# programs (the indexer's 64 query heads of 128: 4.9 us in 2 programs of 4096, 1.9 us in 8 of 1024; H100, runs 69
# and 71)
TILE = 1024


@triton.jit
def _rope_tail_kernel(x_ptr, cs_ptr, o_ptr, R, x_row, I, cs_outer, cs_inner, D: tl.constexpr, NOPE: tl.constexpr,
                      NP: tl.constexpr, HALF: tl.constexpr, HP: tl.constexpr, BR: tl.constexpr, INVERSE: tl.constexpr,
                      PDL: tl.constexpr):
    pdl_enter(PDL)
    r = (tl.program_id(0) * BR + tl.arange(0, BR)).to(tl.int64)[:, None]        # [BR, 1]
    rm = r < R
    xr = x_ptr + r * x_row
    orow = o_ptr + r * D
    if NOPE > 0:                                                                 # the unrotated dims: a copy
        c = tl.arange(0, NP)[None, :]
        m = rm & (c < NOPE)
        tl.store(orow + c, tl.load(xr + c, mask=m, other=0.0), mask=m)
    i = tl.arange(0, HP)[None, :]
    m = rm & (i < HALF)
    a = tl.load(xr + NOPE + 2 * i, mask=m, other=0.0).to(tl.float32)
    b = tl.load(xr + NOPE + 2 * i + 1, mask=m, other=0.0).to(tl.float32)
    csr = cs_ptr + (r // I) * cs_outer + (r % I) * cs_inner + 2 * i
    cos = tl.load(csr, mask=m, other=0.0).to(tl.float32)
    sin = tl.load(csr + 1, mask=m, other=0.0).to(tl.float32)
    if INVERSE:
        ya, yb = a * cos + b * sin, b * cos - a * sin
    else:
        ya, yb = a * cos - b * sin, a * sin + b * cos
    tl.store(orow + NOPE + 2 * i, ya.to(o_ptr.dtype.element_ty), mask=m)
    tl.store(orow + NOPE + 2 * i + 1, yb.to(o_ptr.dtype.element_ty), mask=m)


def _cs_levels(cs: torch.Tensor, lead: tuple[int, ...], R: int, rd: int):
    """cs [.., rd/2, 2] broadcast to `lead` as (table, I, outer stride, inner stride): row r of x (row-major over
    `lead`) reads table + (r // I) * outer + (r % I) * inner. Host integers only."""
    if cs.stride(-1) != 1 or cs.stride(-2) != 2:
        cs = cs.contiguous()
    e = cs.expand(*lead, rd // 2, 2)
    dims: list[tuple[int, int]] = []                                   # (size, stride), outer first, merged
    for n, s in zip(e.shape[:-2], e.stride()[:-2]):
        if n == 1:
            continue
        if dims and dims[-1][1] == n * s:
            dims[-1] = (dims[-1][0] * n, s)
        else:
            dims.append((n, s))
    if len(dims) > 2:                                                  # three levels: one contiguous table
        return e.reshape(R, rd // 2, 2).contiguous(), 1, rd, 0
    (o, so), (i, si) = ([(1, 0)] * (2 - len(dims)) + dims)
    return e, i, so, si


def rope_tail_triton(x: torch.Tensor, cs: torch.Tensor, rd: int, inverse: bool = False) -> torch.Tensor:
    D = x.shape[-1]
    lead = tuple(x.shape[:-1])
    x2 = rows(x)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    R = x2.shape[0]
    if R:
        table, inner, so, si = _cs_levels(cs, lead, R, rd)
        nope = D - rd
        br = max(1, min(triton.next_power_of_2(R), TILE // triton.next_power_of_2(D)))
        _rope_tail_kernel[(triton.cdiv(R, br),)](
            x2, table, out, R, x2.stride(0), inner, so, si, D=D, NOPE=nope, NP=triton.next_power_of_2(max(nope, 1)),
            HALF=rd // 2, HP=triton.next_power_of_2(rd // 2), BR=br, INVERSE=bool(inverse),
            num_warps=4 if br * D >= 2048 else 1, **pdl(x2))
    return out
