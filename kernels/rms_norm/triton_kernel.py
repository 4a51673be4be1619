"""RMSNorm in Triton: one launch for any number of rows (one program per row of N, the whole row in registers),
where the reference runs 6-7 small kernels (cast, pow, mean, add, rsqrt, mul, mul, cast). fp32 throughout, the
weight (fp32) applied after the normalisation as the reference does. Not bit-exact with the reference: the sum of
squares is a tree reduction in another order and rsqrt is the hardware approximation, so results agree to fp32
rounding (a few ulp before the cast to x.dtype), not bit for bit. Launched on torch's current stream (capturable).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._pdl import pdl, pdl_enter
from .._rows import rows


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, o_ptr, x_row, inv_n, eps, N: tl.constexpr, NP: tl.constexpr, WEIGHT: tl.constexpr,
                     PDL: tl.constexpr):
    pdl_enter(PDL)
    r = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, NP)
    m = c < N
    x = tl.load(x_ptr + r * x_row + c, mask=m, other=0.0).to(tl.float32)
    y = x * tl.rsqrt(tl.sum(x * x, axis=0) * inv_n + eps)            # the mean as torch forms it: sum * fp32(1/N)
    if WEIGHT:
        y = tl.load(w_ptr + c, mask=m, other=0.0).to(tl.float32) * y
    tl.store(o_ptr + r * N + c, y.to(o_ptr.dtype.element_ty), mask=m)


def rms_norm_triton(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    N = x.shape[-1]
    x2 = rows(x)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    R = x2.shape[0]
    if R and N:
        np2 = triton.next_power_of_2(N)
        w = weight if weight is not None else x2                       # never read when WEIGHT is False
        # 1 / N rounded to double then to fp32 is fp32(1 / N) (53 >= 2 * 24 + 2 bits: no double-rounding error)
        _rms_norm_kernel[(R,)](x2, w, out, x2.stride(0), 1.0 / N, eps, N=N, NP=np2, WEIGHT=weight is not None,
                               num_warps=max(1, min(16, np2 // 512)), **pdl(x2))
    return out
