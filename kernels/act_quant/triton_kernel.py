"""The activation fake-quants in Triton: one launch per call, where the reference runs 10-16 small kernels
(abs, amax, clamp, div, log2, ceil, exp2, div, cast, cast, mul, cast; FP4: seven compares and a table gather).

Layout: x viewed as [R, K] rows (last-dim stride 1, any row stride), K = NB blocks of BLOCK. Program (r, g) holds
the tile [GP, BP] of blocks g*GP .. g*GP+GP-1 of row r (GP, BP powers of two, masked to NB and BLOCK), takes each
block's amax in registers and writes the dequantised values. Launched on torch's current stream (capturable).

Bit-exact with the reference run on CUDA (`reference.py`), step by step:
- amax: a max, exact in any order;
- amax / qmax: torch computes a tensor over a Python scalar on CUDA as `amax * fp32(1 / qmax)` (one rounding of
  the product); the kernel does the same product with the same fp32 constant;
- log2, exp2: libdevice `__nv_log2f` / `__nv_exp2f`, what torch's `::log2` / `::exp2` call (never the
  approximate `tl.log2`); their inputs are normal floats here, so the FTZ variant Triton selects agrees;
- x / s: s is a power of two, so x / s = x * 2^-e exactly (the reciprocal is exact);
- e4m3: the round-to-nearest-even conversion (cvt.rn.satfinite); saturation never triggers because
  |x| / s <= 448 (the scale rounds up);
- e2m1: the reference's seven thresholds, compared in fp32; a negative value that rounds to 0 gives -0.0 and
  -0.0 gives +0.0, as the table lookup does.
NaN inputs are not reproduced (the hardware max drops NaN; the reference propagates it).

On CPU tensors (only under TRITON_INTERPRET=1) libdevice does not exist: `EXACT=False` uses tl.log2/tl.exp2
(numpy there), and the interpreter's own e4m3 conversion does not round to nearest even, so only the logic
(blocks, masks, scales) is checked there, not the bits.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import libdevice

from .._pdl import pdl, pdl_enter
from .._rows import rows
from .reference import FP4_MAX, FP8_MAX

# fp32(1 / qmax) as torch's CUDA division by a Python scalar forms it: the constants become fp32 in the kernel by
# round-to-nearest, and the double 1 / qmax rounded again to fp32 is fp32(1 / qmax) (53 >= 2 * 24 + 2 bits); the
# clamp's 1e-4 likewise becomes the fp32 torch converts the scalar to
INV_FP8_MAX = tl.constexpr(1.0 / FP8_MAX)
INV_FP4_MAX = tl.constexpr(1.0 / FP4_MAX)
FP8_MIN_AMAX = tl.constexpr(1e-4)
FP4_MIN_AMAX = tl.constexpr(6 * 2.0 ** -126)
TILE = 4096                                            # elements per program at most (blocks of one row)


@triton.jit
def _pow2_scale(x, MIN_AMAX: tl.constexpr, INV_MAX: tl.constexpr, EXACT: tl.constexpr):
    """x [G, B] fp32, one block per row -> (s, 1/s) [G, 1]: the block's power-of-two scale
    2^ceil(log2(max(amax, MIN_AMAX) / MAX)), the one rule of both formats' fake quant."""
    amax = tl.max(tl.abs(x), axis=1)[:, None]
    v = tl.maximum(amax, MIN_AMAX) * INV_MAX
    if EXACT:
        e = tl.ceil(libdevice.log2(v))
        return libdevice.exp2(e), libdevice.exp2(-e)
    e = tl.ceil(tl.log2(v))
    return tl.exp2(e), tl.exp2(-e)


@triton.jit
def fp8_fake_blocks(x, EXACT: tl.constexpr):
    """x [G, B] fp32, one block per row (zeros where masked) -> its e4m3 fake quant in fp32: the FP8 branch of
    `_fake_quant_kernel`, for kernels that end in the FP8 activation simulation (`dsv4_kernels.swiglu_fp8`)."""
    s, rs = _pow2_scale(x, FP8_MIN_AMAX, INV_FP8_MAX, EXACT)
    return (x * rs).to(tl.float8e4nv, fp_downcast_rounding="rtne").to(tl.float32) * s


@triton.jit
def fp4_fake_blocks(x, EXACT: tl.constexpr):
    """x [G, B] fp32, one block per row (zeros where masked) -> its e2m1 fake quant in fp32: the FP4 branch of
    `_fake_quant_kernel`, for kernels that end in the FP4 simulation (`dsv4_kernels.hadamard_fp4`)."""
    s, rs = _pow2_scale(x, FP4_MIN_AMAX, INV_FP4_MAX, EXACT)
    y = x * rs
    a = tl.abs(y)
    idx = ((a > 0.25).to(tl.int32) + (a >= 0.75).to(tl.int32) + (a > 1.25).to(tl.int32)
           + (a >= 1.75).to(tl.int32) + (a > 2.5).to(tl.int32) + (a >= 3.5).to(tl.int32) + (a > 5.0).to(tl.int32))
    # code -> magnitude: 0, .5, 1, 1.5 (idx/2) for idx < 4; 2, 3, 4, 6 above
    mag = tl.where(idx < 4, idx.to(tl.float32) * 0.5, tl.where(idx == 7, 6.0, (idx - 2).to(tl.float32)))
    return mag * tl.where(y < 0, -1.0, 1.0) * s                     # not -mag: Triton negates as 0 - x (+0.0)


@triton.jit
def block_tile(NB, BLOCK: tl.constexpr, GP: tl.constexpr, BP: tl.constexpr):
    """A program's tile under `block_grid`'s launch: (its row r, the columns col [GP, BP] of its GP blocks, the mask
    of those inside the row's NB blocks)."""
    r = tl.program_id(0).to(tl.int64)
    b = tl.program_id(1) * GP + tl.arange(0, GP)[:, None]           # block index in the row
    j = tl.arange(0, BP)[None, :]                                   # element in the block
    return r, b * BLOCK + j, (b < NB) & (j < BLOCK)


@triton.jit
def _fake_quant_kernel(x_ptr, o_ptr, x_row, o_row, NB, BLOCK: tl.constexpr, GP: tl.constexpr, BP: tl.constexpr,
                       FP4: tl.constexpr, EXACT: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    r, col, inside = block_tile(NB, BLOCK, GP, BP)
    x = tl.load(x_ptr + r * x_row + col, mask=inside, other=0.0).to(tl.float32)
    if FP4:
        out = fp4_fake_blocks(x, EXACT)
    else:
        out = fp8_fake_blocks(x, EXACT)
    tl.store(o_ptr + r * o_row + col, out.to(o_ptr.dtype.element_ty), mask=inside)


def block_grid(rows: int, nb: int, block: int) -> tuple[tuple[int, int], int, int, int]:
    """How a kernel over `rows` rows of `nb` blocks of `block` elements launches (this one and the kernels that end
    in the same fake quant, e.g. swiglu_fp8): (grid, GP blocks per program, BP lanes per block (block rounded up to
    a power of two), num_warps), at most TILE elements a program, 4 warps from 1024."""
    bp = triton.next_power_of_2(block)
    gp = min(triton.next_power_of_2(nb), max(1, TILE // bp))
    return (rows, triton.cdiv(nb, gp)), gp, bp, 4 if gp * bp >= 1024 else 1


def _launch(x: torch.Tensor, block: int, fp4: bool) -> torch.Tensor:
    K = x.shape[-1]
    x2 = rows(x)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    R, nb = x2.shape[0], K // block
    if R and nb:
        grid, gp, bp, warps = block_grid(R, nb, block)
        _fake_quant_kernel[grid](x2, out, x2.stride(0), K, nb, BLOCK=block, GP=gp, BP=bp, FP4=fp4,
                                 EXACT=x.is_cuda, num_warps=warps, **pdl(x2))
    return out


def fp8_fake_quant_triton(x: torch.Tensor, block: int) -> torch.Tensor:
    return _launch(x, block, False)


def fp4_fake_quant_triton(x: torch.Tensor, block: int = 32) -> torch.Tensor:
    return _launch(x, block, True)
