"""Row-invariant products: each row of the result has the same bits whatever the number of rows beside it.

Why: the speculative step's batched verify (speculative.py, `verify="batched"`) runs every projection once over
the B*(k+1) rows of its k+1 positions, where the plain step runs the same projection over B rows; greedy
speculative decoding equals plain greedy decoding bit for bit only if each row's product is the same at both row
counts. On the CPU (MKL through torch) the products the decode writes are not: F.linear, `x @ w.T`, the
attention's grouped einsum and the routed experts' `bmm(W[e], x)` give a row other bits at M = 1 than at M >= 2
(fp32), or past some M (bf16), measured over M in 1..40 at 1, 2 and 4 threads (`benchmarks/row_invariance.py`).
One formulation is invariant in every fp32 case measured: each row as its own [1, K] x [K, N] product of one batched
matmul, `bmm(x [M,1,K], W^T [M,K,N])`, the weight expanded (stride 0) or gathered per row. In bf16 the same bmm is
invariant in most shapes but not all (K 64 x N 48 and K 128 x N 32 at M = 40: oneDNN changes kernels), so a
narrower product runs in fp32 and is rounded back: a bf16 x bf16 product is exact in fp32 and the bf16 GEMM
accumulates in fp32 too, so that is the same sum in another order. These are that formulation for each product
shape the decode has; `decode.decode_kernels(..., rowwise=True)` puts them in
the kernel table's product slots, so the plain step and the verify (and the reference decode over that model)
run the same per-row products. A model without that table keeps the official formulation (F.linear, einsum).

The products are the same maths (fp32 or bf16 products, fp32 accumulation inside the BLAS call); only the order
of the sums inside a row may differ from F.linear's.
"""
from __future__ import annotations

import torch

from .moe import routed_experts_with

# shapes: M rows, K in, N out, G groups, R rank, T tokens, k picks


def rows_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [..., K] @ w[N, K]^T -> [..., N], each row one [1, K] x [K, N] product (the `dense` slot: F.linear's)."""
    if x.dtype != torch.float32:
        return rows_linear(x.float(), w.float()).to(x.dtype)
    K, N = x.shape[-1], w.shape[0]
    x2 = x.reshape(-1, 1, K)
    return torch.bmm(x2, w.t().expand(x2.shape[0], K, N)).view(*x.shape[:-1], N)


def rows_f32_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The `f32` slot's product (fp32 x, an fp32 or bf16 weight widened exactly), per row."""
    return rows_linear(x, w.to(x.dtype))


def rows_grouped(o: torch.Tensor, wa: torch.Tensor) -> torch.Tensor:
    """o [..., G, I] with wa [G, R, I] -> [..., G, R] (the attention output's grouped low-rank projection, the
    `grouped` slot: the reference's einsum), each row and group its own product."""
    return torch.stack([rows_linear(o[..., g, :], wa[g]) for g in range(wa.shape[0])], -2)


def rows_routed_experts(x, idx, wts, w1, w3, w2, limit, act: bool = True) -> torch.Tensor:
    """`moe.routed_experts` (the `experts` slot) with each pair's product as its own row: h [T,1,in] times the
    gathered W[e]^T [T,in,out] (in fp32, as `rows_linear`), where the reference multiplies W[e] [T,out,in] by
    h [T,in,1]."""
    return routed_experts_with(x, idx, wts, w1, w3, w2, limit, act,
                               lambda W, h: torch.bmm(h.float().unsqueeze(1), W.float().transpose(1, 2)).squeeze(1)
                               .to(h.dtype))
