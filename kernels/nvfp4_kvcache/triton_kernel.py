"""dequantize_nvfp4_kvcache in Triton: row m of N values from N/2 packed e2m1 bytes (low nibble first), N/16 e4m3
block scales and one fp32 row scale; (value * block scale) * row scale, the reference's order, so fp32 output is
bit-identical. The sizes were checked on the host before the launch; the kernel masks to M x N."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._pdl import pdl, pdl_enter


@triton.jit
def _kv_dequant_kernel(q_ptr, s_ptr, g_ptr, o_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    r = tl.program_id(0) * BM + tl.arange(0, BM)
    j = tl.program_id(1) * (BN // 16) + tl.arange(0, BN // 16)          # scale blocks
    i = tl.arange(0, 8)                                                 # bytes per block
    half = N // 2
    rm = r < M
    jm = j < N // 16
    b = tl.load(q_ptr + r[:, None, None].to(tl.int64) * half + j[None, :, None] * 8 + i[None, None, :],
                mask=rm[:, None, None] & jm[None, :, None], other=0).to(tl.int32)
    s = tl.load(s_ptr + r[:, None].to(tl.int64) * (N // 16) + j[None, :], mask=rm[:, None] & jm[None, :], other=0)
    s = s.to(tl.float8e4nv, bitcast=True).to(tl.float32)[:, :, None]
    g = tl.load(g_ptr + r, mask=rm, other=0.0)[:, None, None]
    # e2m1 -> fp16 bits: magnitude at bits 11..9, sign at 15, = value * 2^-14 exactly
    lo = (((b & 7) << 9) | ((b & 8) << 12)).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32) * 16384.0
    hi = (((b & 0x70) << 5) | ((b & 0x80) << 8)).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32) * 16384.0
    v = tl.reshape(tl.join(lo * s * g, hi * s * g), (BM, BN))                       # element 2k, 2k+1 adjacent
    c = tl.program_id(1) * BN + tl.arange(0, BN)
    tl.store(o_ptr + r[:, None].to(tl.int64) * N + c[None, :], v.to(o_ptr.dtype.element_ty),
             mask=rm[:, None] & (c < N)[None, :])


def dequantize_nvfp4_kvcache_triton(fp4, sf, global_scale, M: int, N: int, out_dtype=torch.bfloat16) -> torch.Tensor:
    if out_dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"dequantize_nvfp4_kvcache: out_dtype must be bfloat16 or float32, found {out_dtype}")
    out = torch.empty(M, N, dtype=out_dtype, device=fp4.device)
    bn = min(256, triton.next_power_of_2(N))
    bm = max(1, 4096 // bn)
    _kv_dequant_kernel[(triton.cdiv(M, bm), triton.cdiv(N, bn))](fp4, sf.view(torch.uint8), global_scale, out, M, N,
                                                                 BM=bm, BN=bn, num_warps=4, **pdl(fp4))
    return out
