"""compressor_reduce in Triton: out[n, d] = sum_s softmax_s(gate[n, s, d] + bias[s, d]) * kv[n, s, d], fp32.

One pass over kv and gate with an online softmax (running max, rescaled sum), so each byte is read once. The
position bias enters the logits only. Program (block of rows, block of features); the slot loop is sequential.
A row whose logits are all -inf pools to 0 (nothing to pool). Launched on torch's current stream by Triton.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _reduce_kernel(kv_ptr, g_ptr, b_ptr, o_ptr, N, S, D, BR: tl.constexpr, BD: tl.constexpr, U: tl.constexpr):
    n = tl.program_id(0) * BR + tl.arange(0, BR)
    d = tl.program_id(1) * BD + tl.arange(0, BD)
    m2 = (n < N)[:, None] & (d < D)[None, :]
    base = n[:, None].to(tl.int64) * S * D + d[None, :]
    mx = tl.full((BR, BD), float("-inf"), tl.float32)
    den = tl.zeros((BR, BD), tl.float32)
    acc = tl.zeros((BR, BD), tl.float32)
    for s0 in range(0, S, U):
        for u in tl.static_range(U):          # U slots' loads issued together: more bytes in flight per program
            s = s0 + u
            ms = m2 & (s < S)
            z = tl.load(g_ptr + base + s * D, mask=ms, other=float("-inf")).to(tl.float32) \
                + tl.load(b_ptr + s * D + d, mask=(d < D) & (s < S), other=0.0).to(tl.float32)[None, :]
            v = tl.load(kv_ptr + base + s * D, mask=ms, other=0.0).to(tl.float32)
            new = tl.maximum(mx, z)
            safe = tl.where(new == float("-inf"), 0.0, new)          # all -inf so far: keep the sums at 0
            alpha = tl.exp(mx - safe)
            w = tl.exp(z - safe)
            den = den * alpha + w
            acc = acc * alpha + w * v
            mx = new
    out = tl.where(den > 0, acc / den, 0.0)
    tl.store(o_ptr + n[:, None].to(tl.int64) * D + d[None, :], out, mask=m2)


def compressor_reduce_triton(kv: torch.Tensor, gate: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    N, S, D = kv.shape
    out = torch.empty(N, D, dtype=torch.float32, device=kv.device)
    if N:
        bd = min(256, triton.next_power_of_2(D))
        br = max(1, min(8, 2048 // bd))
        # enough programs to fill the GPU when there are few rows (HCA: many slots, few rows)
        while br > 1 and triton.cdiv(N, br) * triton.cdiv(D, bd) < 1024:
            br //= 2
        while bd > 64 and triton.cdiv(N, br) * triton.cdiv(D, bd) < 1024:
            bd //= 2
        _reduce_kernel[(triton.cdiv(N, br), triton.cdiv(D, bd))](kv.contiguous(), gate.contiguous(), bias.contiguous(), out,
                                                                 N, S, D, BR=br, BD=bd, U=4 if S >= 4 else 1, num_warps=4)
    return out
