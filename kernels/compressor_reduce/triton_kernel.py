"""compressor_reduce in Triton: out[n, d] = sum_s softmax_s(gate[n, s, d] + bias[s, d]) * kv[n, s, d], fp32.

A program takes a [BR rows, BS slots, BD features] tile per step and folds it into an online softmax (running
max, rescaled sums), so each byte is read once. The whole tile's loads are issued together: with one slot per
step (the first version) the HCA shape (few rows, 128 slots) kept 32 bytes in flight per thread and reached 20%
of copy bandwidth. The position bias enters the logits only. A row whose logits are all -inf pools to 0
(nothing to pool). Launched on torch's current stream by Triton.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._pdl import pdl, pdl_enter


@triton.jit
def softmax_sum_step(mx, den, acc, z, v):
    """One chunk of the online softmax-weighted sum over axis 1 of z, v [BR, BS, BD]: the running max, denominator
    and weighted sum [BR, BD] updated (the pooling kernel, compressor_pool, runs the same step on its ring's rows)."""
    new = tl.maximum(mx, tl.max(z, axis=1))
    safe = tl.where(new == float("-inf"), 0.0, new)                            # all -inf so far: keep the sums at 0
    alpha = tl.exp(mx - safe)
    w = tl.exp(z - safe[:, None, :])
    return new, den * alpha + tl.sum(w, axis=1), acc * alpha + tl.sum(w * v, axis=1)


@triton.jit
def _reduce_kernel(kv_ptr, g_ptr, b_ptr, o_ptr, N, S, D, BR: tl.constexpr, BS: tl.constexpr, BD: tl.constexpr,
                   PDL: tl.constexpr):
    pdl_enter(PDL)
    n = tl.program_id(0) * BR + tl.arange(0, BR)
    d = tl.program_id(1) * BD + tl.arange(0, BD)
    s = tl.arange(0, BS)
    nd = (n < N)[:, None] & (d < D)[None, :]                                   # [BR, BD]
    base = n[:, None, None].to(tl.int64) * S * D + d[None, None, :]            # [BR, 1, BD]
    mx = tl.full((BR, BD), float("-inf"), tl.float32)
    den = tl.zeros((BR, BD), tl.float32)
    acc = tl.zeros((BR, BD), tl.float32)
    for s0 in range(0, S, BS):
        ss = s0 + s
        m3 = nd[:, None, :] & (ss < S)[None, :, None]                          # [BR, BS, BD]
        off = base + ss[None, :, None] * D
        z = tl.load(g_ptr + off, mask=m3, other=float("-inf")).to(tl.float32) \
            + tl.load(b_ptr + ss[:, None] * D + d[None, :], mask=(ss < S)[:, None] & (d < D)[None, :],
                      other=0.0).to(tl.float32)[None, :, :]
        v = tl.load(kv_ptr + off, mask=m3, other=0.0).to(tl.float32)
        mx, den, acc = softmax_sum_step(mx, den, acc, z, v)
    tl.store(o_ptr + n[:, None].to(tl.int64) * D + d[None, :], tl.where(den > 0, acc / den, 0.0), mask=nd)


# elements of one tensor a program loads per step: 16 KB of fp32 over 4 warps, 32 per thread
TILE = 4096


def tile_shape(N: int, S: int, D: int) -> tuple[int, int, int]:
    """(BR, BS, BD): all slots in one step up to 32 (CSA's 8, and HCA's 128 in four), features in 16-byte runs
    per thread, rows filling the rest of the tile, then halved while the grid would leave SMs idle."""
    bs = min(32, triton.next_power_of_2(max(S, 1)))
    bd = min(128, triton.next_power_of_2(max(D, 1)), max(TILE // bs, 16))
    br = max(1, TILE // (bs * bd))
    while br > 1 and triton.cdiv(N, br) * triton.cdiv(D, bd) < 1024:
        br //= 2
    while bd > 32 and triton.cdiv(N, br) * triton.cdiv(D, bd) < 1024:
        bd //= 2
    return br, bs, bd


def compressor_reduce_triton(kv: torch.Tensor, gate: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    N, S, D = kv.shape
    out = torch.empty(N, D, dtype=torch.float32, device=kv.device)
    if N:
        br, bs, bd = tile_shape(N, S, D)
        _reduce_kernel[(triton.cdiv(N, br), triton.cdiv(D, bd))](kv.contiguous(), gate.contiguous(), bias.contiguous(),
                                                                 out, N, S, D, BR=br, BS=bs, BD=bd, num_warps=4,
                                                                 **pdl(kv))
    return out
