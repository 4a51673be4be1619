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

On CUDA (`cuda_products`, built once at load) the products take the project's kernels, each called so that a row's
sums do not depend on the row count (read off the kernel code; `benchmarks/row_invariance.py --device cuda` checks
it):
- fp32 weights: the fp32 rows kernel (`f32_gemv_cuda`: its per-row FMA chain, lane shuffle sum and cluster split
  depend on (N, K) only), in pieces of at most 8 rows (its limit);
- bf16 weights: the bf16 Triton kernel with the tile and K split of an 8-row call at every row count, split sums
  in order (`bf16_linear_rows`; the default path chooses both from the row count);
- FP4/FP8 weights (the GEMV slot): the tensor-core GEMV's 2..8-token path (per-token column scale,
  column-independent mma, K split from K alone) in pieces of 2 to 8 rows, a single row padded with a zero row
  (its one-token path sums otherwise); where that kernel does not take them, the CUDA-core rows kernel (per-row
  FMA chain at any width).
Anything else falls back to the per-row bmm, whose invariance on cuBLAS is not known.
"""
from __future__ import annotations

import torch

from dsv4_kernels.act_quant.reference import fp4_fake_quant_ref

from .moe import routed_experts_with
from .quant import QWeight, dequant

# shapes: M rows, K in, N out, G groups, R rank, T tokens, k picks


def rows_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [..., K] @ w[N, K]^T -> [..., N], each row one [1, K] x [K, N] product (the `dense` slot: F.linear's)."""
    if x.dtype != torch.float32:
        return rows_linear(x.float(), w).to(x.dtype)
    K, N = x.shape[-1], w.shape[0]
    w = w.to(x.dtype)
    x2 = x.reshape(-1, 1, K)
    return torch.bmm(x2, w.t().expand(x2.shape[0], K, N)).view(*x.shape[:-1], N)


def rows_hadamard_fp4(x: torch.Tensor, hadamard: torch.Tensor, block: int = 32) -> torch.Tensor:
    """The indexer's rotation with its FP4 sim (the `hadamard_fp4` slot: `hadamard_fp4_ref`), its product
    x.float() @ H per row (`rows_linear` with H^T)."""
    t = (rows_linear(x.float(), hadamard.t()) * hadamard.shape[0] ** -0.5).to(x.dtype)
    return fp4_fake_quant_ref(t, block)


def grouped_with(o: torch.Tensor, wa: torch.Tensor, linear) -> torch.Tensor:
    """o [..., G, I] with wa [G, R, I] -> [..., G, R] through `linear(x, W)` per group."""
    return torch.stack([linear(o[..., g, :], wa[g]) for g in range(wa.shape[0])], -2)


def rows_grouped(o: torch.Tensor, wa: torch.Tensor) -> torch.Tensor:
    """o [..., G, I] with wa [G, R, I] -> [..., G, R] (the attention output's grouped low-rank projection, the
    `grouped` slot: the reference's einsum), each row and group its own product."""
    return grouped_with(o, wa, rows_linear)


def rows_routed_experts(x, idx, wts, w1, w3, w2, limit, act: bool = True) -> torch.Tensor:
    """`moe.routed_experts` (the `experts` slot) with each pair's product as its own row: h [T,1,in] times the
    gathered W[e]^T [T,in,out] (in fp32, as `rows_linear`), where the reference multiplies W[e] [T,out,in] by
    h [T,in,1]."""
    return routed_experts_with(x, idx, wts, w1, w3, w2, limit, act,
                               lambda W, h: torch.bmm(h.float().unsqueeze(1), W.float().transpose(1, 2)).squeeze(1)
                               .to(h.dtype))


def cuda_products() -> dict:
    """The row-invariant products on CUDA through the project's kernels, which of them build here decided once (at
    load, `decode.decode_kernels`): {"dense", "f32", "grouped", "gemv"} -> function, the per-row bmm (above) where a
    kernel does not take the inputs."""
    from dsv4_kernels.bf16_gemv import KERNEL as BF16
    from dsv4_kernels.bf16_gemv.triton_kernel import bf16_linear_rows
    from dsv4_kernels.moe_gemv import cuda_kernel
    ext, bf16 = cuda_kernel.build()[0], BF16.available()[0]

    def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            return linear(x.float(), w).to(x.dtype)
        K, N = x.shape[-1], w.shape[0]
        x2 = x.reshape(-1, K).contiguous()
        M = x2.shape[0]
        if w.dtype == torch.bfloat16 and bf16:
            return bf16_linear_rows(x2, w).view(*x.shape[:-1], N)
        if w.dtype == torch.float32 and M and ext:
            w = w.contiguous()                      # the indexer passes its Hadamard matrix transposed (a view)
            if all(cuda_kernel.f32_fits(x2[i:i + 8], w) for i in range(0, M, 8)):
                return torch.cat([cuda_kernel.f32_gemv_cuda(x2[i:i + 8], w) for i in range(0, M, 8)]).view(
                    *x.shape[:-1], N)
        return rows_linear(x, w)

    def piece(x: torch.Tensor, w: tuple) -> torch.Tensor:
        # 1..8 bf16 rows through the tensor-core GEMV's multi-token path (one row padded with a zero row)
        if x.shape[0] > 1:
            return cuda_kernel.mma_gemv_cuda(x, w)
        return cuda_kernel.mma_gemv_cuda(torch.cat([x, torch.zeros_like(x)]), w)[:1]

    def gemv(x: torch.Tensor, w: tuple) -> torch.Tensor:
        if w[0] == "plain":
            return linear(x, w[1])
        if ext and cuda_kernel.fits(x.shape[-1], w):
            x = x.contiguous()
            if x.dtype == torch.bfloat16 and cuda_kernel.mma_fits(x[:2], w):
                return torch.cat([piece(x[i:i + 8], w) for i in range(0, x.shape[0], 8)])
            return cuda_kernel.fp4_gemv_cuda(x, w, path="rows")
        return linear(x.float(), dequant(QWeight(*w))).to(x.dtype)

    return {"dense": linear, "f32": linear, "gemv": gemv,
            "grouped": lambda o, wa: grouped_with(o, wa, linear)}
