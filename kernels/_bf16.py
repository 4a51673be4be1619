"""The Triton kernels' rounding of fp32 to bf16 in registers (nearest, ties to even), one definition for all of them.

On a GPU it is the hardware conversion there and back. Under the Triton interpreter (the CPU tests) the fp32 -> bf16
cast truncates, so the rounding is made on the bits instead: the same values, so a kernel's interpreter run checks
the roundings its GPU run makes."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def round_bf16(x, NATIVE: tl.constexpr):
    """x (finite fp32) rounded to bf16, held in fp32."""
    if NATIVE:
        return x.to(tl.bfloat16).to(tl.float32)
    bits = x.to(tl.int32, bitcast=True)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & -65536).to(tl.float32, bitcast=True)
