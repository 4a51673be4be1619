"""The mHC Sinkhorn in Triton: one program per [hc, hc] matrix, all iterations in registers. The reference runs
about 2 + 3 * (2 * iters - 1) small kernels per call (115 at 20 iterations; 6 calls per layer-step pair), each
launch costing more than its arithmetic; here it is one launch. Same operation order as the reference, fp32.
Launched by Triton on torch's current stream, so it records into CUDA graphs.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._pdl import pdl, pdl_enter


@triton.jit
def sinkhorn_tile(z, inside, eps, ITERS: tl.constexpr):
    """z [P, P] logits, -inf outside the HC x HC block `inside` -> the block's doubly stochastic matrix (0 outside): a
    row softmax + eps, a column normalisation, then ITERS - 1 row and column normalisations (mHC's `comb`; also
    inlined by dsv4_kernels.mhc's fused pre kernel)."""
    z = tl.exp(z - tl.max(z, axis=1)[:, None])
    z = tl.where(inside, z, 0.0)
    comb = tl.where(inside, z / tl.sum(z, axis=1)[:, None] + eps, 0.0)
    comb = comb / (tl.sum(comb, axis=0)[None, :] + eps)
    for _ in range(ITERS - 1):
        comb = comb / (tl.sum(comb, axis=1)[:, None] + eps)
        comb = comb / (tl.sum(comb, axis=0)[None, :] + eps)
    return comb


@triton.jit
def _sinkhorn_kernel(x_ptr, o_ptr, eps, ITERS: tl.constexpr, HC: tl.constexpr, P: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    m = tl.program_id(0).to(tl.int64)
    r = tl.arange(0, P)[:, None]
    c = tl.arange(0, P)[None, :]
    inside = (r < HC) & (c < HC)
    off = m * HC * HC + r * HC + c
    z = tl.load(x_ptr + off, mask=inside, other=float("-inf"))
    tl.store(o_ptr + off, sinkhorn_tile(z, inside, eps, ITERS), mask=inside)


def sinkhorn_triton(logits: torch.Tensor, iters: int, eps: float) -> torch.Tensor:
    hc = logits.shape[-1]
    x = logits.float().contiguous()
    out = torch.empty_like(x)
    n = x.numel() // (hc * hc)
    if n:
        # padded rows and columns hold 0 and never reach a sum that a real row or column reads
        _sinkhorn_kernel[(n,)](x, out, eps, ITERS=iters, HC=hc, P=max(2, triton.next_power_of_2(hc)), num_warps=1,
                               **pdl(x))
    return out
