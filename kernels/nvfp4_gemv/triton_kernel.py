"""NVFP4 weight-only GEMV/GEMM for small decode batches, in Triton.

y[b, n] = sum_k x[b, k] * e2m1(W[n, k]) * e4m3(S[n, k // 16]) * s2. The packed bytes and block scales are read
once from HBM and dequantised in registers (Hopper has no FP4 tensor cores, so fewer bytes is the whole win:
0.5625 bytes per weight vs 2 for BF16). Each program owns BLOCK_N output rows for every batch row.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _e2m1(c):
    # code s|e e|m -> value; (e==0 ? m : (2+m) << (e-1)) / 2 written branch-free with min/max
    e = (c >> 1) & 3
    m = c & 1
    base = m + 2 * tl.minimum(e, 1)
    v = (base << (tl.maximum(e, 1) - 1)).to(tl.float32) * 0.5
    return tl.where((c & 8) != 0, -v, v)


@triton.jit
def _nvfp4_gemv_kernel(x_ptr, w_ptr, s_ptr, s2_ptr, y_ptr, B, N, K,
                       BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BATCH: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = rows < N
    half = K // 2
    s2 = tl.load(s2_ptr)
    for b in tl.static_range(BATCH):
        acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for k0 in range(0, half, BLOCK_K // 2):
            kb = k0 + tl.arange(0, BLOCK_K // 2)                         # byte index within the row
            kmask = kb < half
            packed = tl.load(w_ptr + rows[:, None] * half + kb[None, :], mask=rmask[:, None] & kmask[None, :], other=0)
            packed = packed.to(tl.int32)
            lo = _e2m1(packed & 0xF)
            hi = _e2m1((packed >> 4) & 0xF)
            sc = tl.load(s_ptr + rows[:, None] * (K // 16) + (kb[None, :] // 8), mask=rmask[:, None] & kmask[None, :], other=0)
            sc = sc.to(tl.float8e4nv, bitcast=True).to(tl.float32)        # scales travel as raw e4m3 bytes
            xe = tl.load(x_ptr + b * K + 2 * kb, mask=(kmask & (b < B)), other=0.0).to(tl.float32)
            xo = tl.load(x_ptr + b * K + 2 * kb + 1, mask=(kmask & (b < B)), other=0.0).to(tl.float32)
            acc += tl.sum((lo * xe[None, :] + hi * xo[None, :]) * sc, axis=1)
        tl.store(y_ptr + b * N + rows, (acc * s2).to(y_ptr.dtype.element_ty), mask=rmask & (b < B))


def nvfp4_gemv_triton(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, weight_scale_2: torch.Tensor,
                      block_n: int = 16, block_k: int = 256) -> torch.Tensor:
    """x [B, K] bf16 (B <= 8), weight [N, K/2] uint8, weight_scale [N, K/16] e4m3, weight_scale_2 fp32 scalar."""
    B, K = x.shape
    N = weight.shape[0]
    if weight.shape[1] * 2 != K or weight_scale.shape != (N, K // 16):
        raise ValueError(f"nvfp4_gemv: x {tuple(x.shape)}, weight {tuple(weight.shape)}, weight_scale "
                         f"{tuple(weight_scale.shape)}: expected weight [N, K/2] and weight_scale [N, K/16] with K={K}")
    x = x.contiguous()
    y = torch.empty(B, N, dtype=x.dtype, device=x.device)
    batch = 1 << max(B - 1, 0).bit_length()               # one compiled variant per power-of-two batch
    grid = (triton.cdiv(N, block_n),)
    # Triton launches on torch's current stream, so this captures into CUDA graphs.
    _nvfp4_gemv_kernel[grid](x, weight.contiguous(), weight_scale.contiguous().view(torch.uint8), weight_scale_2.float().reshape(1), y, B, N, K,
                             BLOCK_N=block_n, BLOCK_K=block_k, BATCH=batch)
    return y
