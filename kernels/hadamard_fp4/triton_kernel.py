"""The indexer's rotation and FP4 simulation in one Triton launch, where the reference runs five (the cast to
fp32, the product with the Hadamard matrix, the 1/sqrt(D), the cast back, the FP4 fake quant).

Layout: x viewed as [R, D] rows (last-dim stride 1, any row stride), D a power of two; program p holds BR rows.
Per row: widened to fp32 (exact), the fast Walsh-Hadamard transform as log2(D) butterfly stages (pairs i, i + h
-> (a + b, a - b) for h = 1, 2, 4, ...: the Sylvester matrix's product, summed in another order than the
reference's GEMM), times fp32(D^-0.5), rounded to x's dtype, then the FP4 fake quant of each block of 32
(`dsv4_kernels.act_quant.triton_kernel.fp4_fake_blocks`, bit-exact with the reference on CUDA).

Not bit for bit the reference: the butterflies add the same 128 terms in another order than the GEMM, so the fp32
sums may differ by a rounding (bf16 inputs have 8 significant bits: most sums are exact in any order), which moves
the bf16 value only across a rounding boundary and the FP4 code only when that crosses an e2m1 threshold. The
official fast_hadamard_transform sums by butterflies too. `FP4=False` stops before the fake quant (for the parity
tests). Launched on torch's current stream (capturable).

On CPU tensors (only under TRITON_INTERPRET=1) libdevice does not exist: `EXACT=False` uses tl.log2/tl.exp2 there.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._pdl import pdl, pdl_enter
from .._rows import rows
from ..act_quant.triton_kernel import fp4_fake_blocks

# elements per program at most (rows of D). Not smaller: in 1024-element programs of one warp the indexer's 64
# query heads took 6.95 us against 3.4 us in two programs of 4096 (H100, 2026-12-07 run 71; the RoPE before it went
# the other way: rope/triton_kernel.py)
TILE = 4096


@triton.jit
def _hadamard_fp4_kernel(x_ptr, o_ptr, R, x_row, scale, D: tl.constexpr, LOG: tl.constexpr, BR: tl.constexpr,
                         BLOCK: tl.constexpr, FP4: tl.constexpr, EXACT: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    dt = o_ptr.dtype.element_ty
    r = (tl.program_id(0) * BR + tl.arange(0, BR)).to(tl.int64)[:, None]        # [BR, 1]
    rm = r < R
    c = tl.arange(0, D)[None, :]
    x = tl.load(x_ptr + r * x_row + c, mask=rm, other=0.0).to(tl.float32)       # [BR, D]
    for s in tl.static_range(LOG):                                               # butterflies of half-width 2^s
        y = tl.permute(tl.reshape(x, (BR, D >> (s + 1), 2, 1 << s)), (0, 1, 3, 2))   # [BR, D/2h, h, 2]
        a, b = tl.split(y)
        x = tl.reshape(tl.permute(tl.join(a + b, a - b), (0, 1, 3, 2)), (BR, D))
    x = (x * scale).to(dt).to(tl.float32)
    if FP4:
        x = tl.reshape(fp4_fake_blocks(tl.reshape(x, (BR * (D // BLOCK), BLOCK)), EXACT), (BR, D))
    tl.store(o_ptr + r * D + c, x.to(dt), mask=rm)


def hadamard_fp4_triton(x: torch.Tensor, block: int = 32, fp4: bool = True) -> torch.Tensor:
    D = x.shape[-1]
    x2 = rows(x)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    R = x2.shape[0]
    if R:
        br = max(1, min(triton.next_power_of_2(R), TILE // D))
        # D^-0.5 as torch's product with a Python scalar takes it: the double rounded to fp32
        _hadamard_fp4_kernel[(triton.cdiv(R, br),)](
            x2, out, R, x2.stride(0), D ** -0.5, D=D, LOG=D.bit_length() - 1, BR=br, BLOCK=block, FP4=fp4,
            EXACT=x.is_cuda, num_warps=4 if br * D >= 2048 else 1, **pdl(x2))
    return out
