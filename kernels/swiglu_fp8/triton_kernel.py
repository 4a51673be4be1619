"""The shared expert's SwiGLU and the down-projection's FP8 activation simulation in one Triton launch, where the
reference runs about six (two casts to fp32, SiLU, the product, the cast back, the FP8 fake quant).

Layout: gate and up viewed as [R, I] rows (last-dim stride 1, any row stride), I = NB blocks of BLOCK; program
(r, p) holds the blocks p*GP .. p*GP+GP-1 of row r as a [GP, BP] tile, the output a new contiguous [R, I].
Per element, the reference's steps at its rounding points: g, u widened to fp32 (exact); with a limit,
g = min(g, L), u = min(max(u, -L), L) (clamp's order; L as torch converts the scalar, to fp32); silu(g) =
g / (1 + exp(-g)) as torch's CUDA SiLU writes it (`expf`: libdevice `__nv_expf`; the IEEE division `tl.div_rn`,
not Triton's approximate `/`); the product with u in fp32; rounded to the output dtype (round to nearest even);
then per block the FP8 fake quant of those rounded values (`dsv4_kernels.act_quant.triton_kernel.fp8_fake_blocks`,
bit-exact with the reference on CUDA). No product is followed by an add, so no FMA contraction can occur: bit for
bit the reference on CUDA. NaN inputs are not reproduced (the hardware min/max drop NaN; clamp propagates it).
Launched on torch's current stream (capturable).

On CPU tensors (only under TRITON_INTERPRET=1) libdevice does not exist: `EXACT=False` uses tl.exp there, and the
interpreter rounds fp32 to bf16 and e4m3 by truncation, so only the logic is checked there, in fp32.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import libdevice

from .._pdl import pdl, pdl_enter
from .._rows import rows
from ..act_quant.triton_kernel import block_grid, block_tile
# its own import line: test_only_the_e4m3_kernels_need_compute_capability_8_9 reads it as this package's e4m3 use
from ..act_quant.triton_kernel import fp8_fake_blocks


@triton.jit
def _swiglu_fp8_kernel(g_ptr, u_ptr, o_ptr, g_row, u_row, o_row, NB, limit, BLOCK: tl.constexpr, GP: tl.constexpr,
                       BP: tl.constexpr, CLAMP: tl.constexpr, EXACT: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    r, col, inside = block_tile(NB, BLOCK, GP, BP)
    g = tl.load(g_ptr + r * g_row + col, mask=inside, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + r * u_row + col, mask=inside, other=0.0).to(tl.float32)
    if CLAMP:
        g = tl.minimum(g, limit)
        u = tl.minimum(tl.maximum(u, -limit), limit)
    if EXACT:
        e = libdevice.exp(-g)
    else:
        e = tl.exp(-g)
    h = tl.div_rn(g, 1.0 + e) * u
    dt = o_ptr.dtype.element_ty
    h = tl.where(inside, h.to(dt).to(tl.float32), 0.0)             # the reference's cast; padding out of the amax
    tl.store(o_ptr + r * o_row + col, fp8_fake_blocks(h, EXACT).to(dt), mask=inside)


def swiglu_fp8_triton(gate: torch.Tensor, up: torch.Tensor, limit: float | None, block: int) -> torch.Tensor:
    I = gate.shape[-1]
    g2, u2 = rows(gate), rows(up)
    out = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
    R, nb = g2.shape[0], I // block
    if R and nb:
        grid, gp, bp, warps = block_grid(R, nb, block)
        _swiglu_fp8_kernel[grid](
            g2, u2, out, g2.stride(0), u2.stride(0), I, nb, float(limit or 0.0), BLOCK=block, GP=gp, BP=bp,
            CLAMP=limit is not None, EXACT=gate.is_cuda, num_warps=warps, **pdl(g2))
    return out
