"""The compressor's pooling straight from its rings in one Triton launch, where the decode ran three cats (CSA: the
pooled rows of kv and gate, and the bias) and the reduction.

`dsv4_kernels.compressor_reduce`'s program (the same tile shape, the same online softmax, in its order), reading
each slot where it lies in the ring instead of from a gathered copy: slot s < M reads columns [0, D) of ring row s
and bias row s, slot s >= M (overlap only: M = m) columns [D, 2D) of ring row s and bias row s - m. Without overlap
M = S and the ring is read as it is. The same values in the same operations: the gathered copy's bits. Launched on
torch's current stream (capturable).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._pdl import pdl, pdl_enter
from ..compressor_reduce.triton_kernel import softmax_sum_step, tile_shape


@triton.jit
def _pool_kernel(kv_ptr, g_ptr, b_ptr, o_ptr, N, S, D, W, M, DOFF, kv_row, g_row, BR: tl.constexpr, BS: tl.constexpr,
                 BD: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    n = tl.program_id(0) * BR + tl.arange(0, BR)
    d = tl.program_id(1) * BD + tl.arange(0, BD)
    s = tl.arange(0, BS)
    nd = (n < N)[:, None] & (d < D)[None, :]                                   # [BR, BD]
    mx = tl.full((BR, BD), float("-inf"), tl.float32)
    den = tl.zeros((BR, BD), tl.float32)
    acc = tl.zeros((BR, BD), tl.float32)
    for s0 in range(0, S, BS):
        ss = s0 + s
        hi = ss >= M                                                           # series b of the current block
        shift = tl.where(hi, DOFF, 0)
        brow = tl.where(hi, ss - M, ss)
        m3 = nd[:, None, :] & (ss < S)[None, :, None]                          # [BR, BS, BD]
        col = ss[None, :, None] * W + shift[None, :, None] + d[None, None, :]
        z = tl.load(g_ptr + n[:, None, None].to(tl.int64) * g_row + col, mask=m3, other=float("-inf")).to(tl.float32) \
            + tl.load(b_ptr + brow[:, None] * W + shift[:, None] + d[None, :],
                      mask=(ss < S)[:, None] & (d < D)[None, :], other=0.0).to(tl.float32)[None, :, :]
        v = tl.load(kv_ptr + n[:, None, None].to(tl.int64) * kv_row + col, mask=m3, other=0.0).to(tl.float32)
        mx, den, acc = softmax_sum_step(mx, den, acc, z, v)
    tl.store(o_ptr + n[:, None].to(tl.int64) * D + d[None, :], tl.where(den > 0, acc / den, 0.0), mask=nd)


def compressor_pool_triton(kv: torch.Tensor, gate: torch.Tensor, ape: torch.Tensor, m: int, overlap: bool) -> torch.Tensor:
    N, S, W = kv.shape
    D = W // 2 if overlap else W
    out = torch.empty(N, D, dtype=torch.float32, device=kv.device)
    if N:
        kv2, g2 = (t if t[0].is_contiguous() else t.contiguous() for t in (kv, gate))
        br, bs, bd = tile_shape(N, S, D)
        _pool_kernel[(triton.cdiv(N, br), triton.cdiv(D, bd))](
            kv2, g2, ape.contiguous(), out, N, S, D, W, m if overlap else S, D if overlap else 0, kv2.stride(0),
            g2.stride(0), BR=br, BS=bs, BD=bd, num_warps=4, **pdl(kv2))
    return out
