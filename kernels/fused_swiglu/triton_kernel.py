"""fused_swiglu in Triton: one pass over the expert GEMM output, fp32 math, output in the input dtype.

out[r, c] = silu(min(gate, L)) * clamp(up, -L, L) (no clamp when L is None), gate/up from the split ([gate | up])
or interleaved (gate at 2c, up at 2c+1) layout. Program (row, column block): no division per element.
Launched by Triton on torch's current stream, so it records into CUDA graphs.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._pdl import pdl, pdl_enter


@triton.jit
def _swiglu_kernel(h_ptr, o_ptr, I, limit, HAS_LIMIT: tl.constexpr, INTERLEAVED: tl.constexpr, BLOCK: tl.constexpr,
                   PDL: tl.constexpr):
    pdl_enter(PDL)
    r = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = c < I
    row = h_ptr + r * 2 * I
    if INTERLEAVED:
        g = tl.load(row + 2 * c, mask=m, other=0.0).to(tl.float32)
        u = tl.load(row + 2 * c + 1, mask=m, other=0.0).to(tl.float32)
    else:
        g = tl.load(row + c, mask=m, other=0.0).to(tl.float32)
        u = tl.load(row + I + c, mask=m, other=0.0).to(tl.float32)
    if HAS_LIMIT:          # the raw gate is clamped before SiLU
        g = tl.minimum(g, limit)
        u = tl.minimum(tl.maximum(u, -limit), limit)
    tl.store(o_ptr + r * I + c, (g / (1.0 + tl.exp(-g)) * u).to(o_ptr.dtype.element_ty), mask=m)


def fused_swiglu_triton(h: torch.Tensor, limit: float | None, layout: str = "split") -> torch.Tensor:
    if layout not in ("split", "interleaved"):
        raise ValueError(f"fused_swiglu: layout must be 'split' or 'interleaved', found {layout!r}")
    shape = h.shape
    h2 = h.reshape(-1, shape[-1]).contiguous()
    rows, width = h2.shape
    inter = width // 2
    out = torch.empty(rows, inter, dtype=h.dtype, device=h.device)
    if rows:
        block = min(1024, triton.next_power_of_2(inter))
        _swiglu_kernel[(rows, triton.cdiv(inter, block))](h2, out, inter, float(limit or 0.0), HAS_LIMIT=limit is not None,
                                                         INTERLEAVED=layout == "interleaved", BLOCK=block,
                                                         num_warps=4, **pdl(h2))
    return out.view(*shape[:-1], inter)
