"""The mHC mixes in Triton, one launch each, where the reference runs 20-25 small kernels for `pre` (cast, pow,
mean, add, rsqrt, mul, three scale/base/sigmoid chains, mul, sum, cast), ~8 for the head's and ~8 for `post`.

`pre` / head (`_mhc_pre_kernel`): one program per row; the row's hc streams X [hc, d] sit in registers ([HP, DP]
powers of two, masked). It forms the rsqrt of the mean square over all hc * d values (the mean as torch forms it:
sum * fp32(1/N)), scales the matmul's mix by it, applies scale/base and the sigmoids, writes post and the comb
logits (FULL; not for the head), and writes x = sum_j pre_j X_j.

`post` (`_mhc_post_kernel`): program (row, column block) holds X [HP, BD] and y [BD] and writes, for each of the
hc output streams k (a static loop), post_k * y + sum_j comb[j, k] X_j; given a second addend b, y is first y + b
rounded once to X.dtype (the MoE's combine, which is then no launch of its own).

`pre` + Sinkhorn + RMSNorm (`_mhc_pre_norm_kernel`, issue 37; the decode's `HyperConnection.pre_normed`): the
three kernels' operations in one program per row, so a block's `pre` and its sublayer norm are one launch, not
three.

fp32 throughout, the streams cast to X.dtype on store. Not bit-exact with the reference: the sums are tree
reductions in another order, rsqrt and the sigmoid's exp are the hardware approximations and Triton may contract
a multiply-add into an FMA, so results agree to fp32 rounding (a few ulp before the cast), not bit for bit.
Launched on torch's current stream (capturable).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._bf16 import round_bf16
from .._pdl import pdl, pdl_enter
from .._rows import rows
from ..sinkhorn.triton_kernel import sinkhorn_tile

TILE = 4096                                            # elements of X per post program at most


@triton.jit
def _mhc_pre_kernel(X_ptr, mix_ptr, scale_ptr, base_ptr, x_ptr, post_ptr, comb_ptr, x_row, mix_row, inv_n, eps,
                    norm_eps, HC: tl.constexpr, HP: tl.constexpr, CP: tl.constexpr, D: tl.constexpr, DP: tl.constexpr,
                    FULL: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    r = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, HP)
    c = tl.arange(0, DP)
    mj = j < HC
    mc = c < D
    X = tl.load(X_ptr + r * x_row + j[:, None] * D + c[None, :], mask=mj[:, None] & mc[None, :], other=0.0)
    X = X.to(tl.float32)                                                     # [HP, DP]
    rr = tl.rsqrt(tl.sum(tl.sum(X * X, axis=1), axis=0) * inv_n + norm_eps)
    mrow = mix_ptr + r * mix_row
    pre = tl.load(mrow + j, mask=mj, other=0.0) * rr * tl.load(scale_ptr) + tl.load(base_ptr + j, mask=mj, other=0.0)
    pre = tl.sigmoid(pre) + eps                                               # [HP]; masked rows meet X = 0
    x = tl.sum(pre[:, None] * X, axis=0)
    tl.store(x_ptr + r * D + c, x.to(x_ptr.dtype.element_ty), mask=mc)
    if FULL:
        post = tl.load(mrow + HC + j, mask=mj, other=0.0) * rr * tl.load(scale_ptr + 1)
        post = 2 * tl.sigmoid(post + tl.load(base_ptr + HC + j, mask=mj, other=0.0))
        tl.store(post_ptr + r * HC + j, post, mask=mj)
        q = tl.arange(0, CP)
        mq = q < HC * HC
        comb = tl.load(mrow + 2 * HC + q, mask=mq, other=0.0) * rr * tl.load(scale_ptr + 2)
        comb = comb + tl.load(base_ptr + 2 * HC + q, mask=mq, other=0.0)
        tl.store(comb_ptr + r * (HC * HC) + q, comb, mask=mq)


@triton.jit
def _mhc_post_kernel(y_ptr, b_ptr, X_ptr, post_ptr, comb_ptr, o_ptr, y_row, b_row, x_row, HC: tl.constexpr,
                     HP: tl.constexpr, D: tl.constexpr, BD: tl.constexpr, HAS_B: tl.constexpr, ROUND: tl.constexpr,
                     NATIVE: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    r = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BD + tl.arange(0, BD)
    j = tl.arange(0, HP)
    mj = j < HC
    mc = c < D
    X = tl.load(X_ptr + r * x_row + j[:, None] * D + c[None, :], mask=mj[:, None] & mc[None, :], other=0.0)
    X = X.to(tl.float32)                                                     # [HP, BD]
    y = tl.load(y_ptr + r * y_row + c, mask=mc, other=0.0).to(tl.float32)    # [BD]
    if HAS_B:       # y + b in fp32, rounded once to the streams' dtype: MoE.combine's add, in this launch
        y = y + tl.load(b_ptr + r * b_row + c, mask=mc, other=0.0).to(tl.float32)
        if ROUND:
            y = round_bf16(y, NATIVE)
    crow = comb_ptr + r * (HC * HC)
    for k in tl.static_range(HC):
        ck = tl.load(crow + j * HC + k, mask=mj, other=0.0)                  # comb[:, k]
        out = tl.load(post_ptr + r * HC + k) * y + tl.sum(ck[:, None] * X, axis=0)
        tl.store(o_ptr + (r * HC + k) * D + c, out.to(o_ptr.dtype.element_ty), mask=mc)


@triton.jit
def _mhc_pre_norm_kernel(X_ptr, mix_ptr, scale_ptr, base_ptr, w_ptr, h_ptr, post_ptr, comb_ptr, x_row, mix_row, inv_n,
                         inv_d, eps, norm_eps, rms_eps, ITERS: tl.constexpr, HC: tl.constexpr, HP: tl.constexpr,
                         D: tl.constexpr, DP: tl.constexpr, PDL: tl.constexpr):
    # _mhc_pre_kernel, then _sinkhorn_kernel on the comb logits and _rms_norm_kernel on x rounded to X.dtype, the
    # same operations in the same order, in one program per row (three launches -> one)
    pdl_enter(PDL)
    r = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, HP)
    c = tl.arange(0, DP)
    mj = j < HC
    mc = c < D
    X = tl.load(X_ptr + r * x_row + j[:, None] * D + c[None, :], mask=mj[:, None] & mc[None, :], other=0.0)
    X = X.to(tl.float32)
    rr = tl.rsqrt(tl.sum(tl.sum(X * X, axis=1), axis=0) * inv_n + norm_eps)
    mrow = mix_ptr + r * mix_row
    pre = tl.load(mrow + j, mask=mj, other=0.0) * rr * tl.load(scale_ptr) + tl.load(base_ptr + j, mask=mj, other=0.0)
    pre = tl.sigmoid(pre) + eps
    x = tl.sum(pre[:, None] * X, axis=0).to(h_ptr.dtype.element_ty).to(tl.float32)       # x as stored, then read
    h = x * tl.rsqrt(tl.sum(x * x, axis=0) * inv_d + rms_eps)
    h = tl.load(w_ptr + c, mask=mc, other=0.0).to(tl.float32) * h
    tl.store(h_ptr + r * D + c, h.to(h_ptr.dtype.element_ty), mask=mc)
    post = tl.load(mrow + HC + j, mask=mj, other=0.0) * rr * tl.load(scale_ptr + 1)
    post = 2 * tl.sigmoid(post + tl.load(base_ptr + HC + j, mask=mj, other=0.0))
    tl.store(post_ptr + r * HC + j, post, mask=mj)
    a = j[:, None]
    b = j[None, :]
    inside = (a < HC) & (b < HC)
    q = a * HC + b
    z = tl.load(mrow + 2 * HC + q, mask=inside, other=0.0) * rr * tl.load(scale_ptr + 2)
    z = tl.where(inside, z + tl.load(base_ptr + 2 * HC + q, mask=inside, other=0.0), float("-inf"))
    tl.store(comb_ptr + r * (HC * HC) + q, sinkhorn_tile(z, inside, eps, ITERS), mask=inside)


def mhc_pre_norm_triton(X: torch.Tensor, mix: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, eps: float,
                        norm_eps: float, iters: int, weight: torch.Tensor, rms_eps: float):
    hc, d = X.shape[-2], X.shape[-1]
    X2 = rows(X, hc * d)
    mix2 = rows(mix.float(), mix.shape[-1])
    lead = tuple(X.shape[:-2])
    h = torch.empty(*lead, d, dtype=X.dtype, device=X.device)
    post = torch.empty(*lead, hc, dtype=torch.float32, device=X.device)
    comb = torch.empty(*lead, hc, hc, dtype=torch.float32, device=X.device)
    R = X2.shape[0]
    if R and d:
        hp, dp = max(2, triton.next_power_of_2(hc)), triton.next_power_of_2(d)
        _mhc_pre_norm_kernel[(R,)](X2, mix2, scale.float().contiguous(), base.float().contiguous(), weight.contiguous(),
                                   h, post, comb, X2.stride(0), mix2.stride(0), 1.0 / (hc * d), 1.0 / d, eps, norm_eps,
                                   rms_eps, ITERS=iters, HC=hc, HP=hp, D=d, DP=dp,
                                   num_warps=max(1, min(16, hp * dp // 1024)), **pdl(X2))
    return h, post, comb


def _pre(X: torch.Tensor, mix: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, eps: float, norm_eps: float,
         full: bool):
    hc, d = X.shape[-2], X.shape[-1]
    X2 = rows(X, hc * d)
    mix2 = rows(mix.float(), mix.shape[-1])
    lead = tuple(X.shape[:-2])
    x = torch.empty(*lead, d, dtype=X.dtype, device=X.device)
    post = torch.empty(*lead, hc, dtype=torch.float32, device=X.device) if full else x
    comb = torch.empty(*lead, hc, hc, dtype=torch.float32, device=X.device) if full else x
    R = X2.shape[0]
    if R and d:
        hp, dp = triton.next_power_of_2(hc), triton.next_power_of_2(d)
        # 1 / N rounded to double then to fp32 is fp32(1 / N) (53 >= 2 * 24 + 2 bits: no double-rounding error)
        _mhc_pre_kernel[(R,)](X2, mix2, scale.float().contiguous(), base.float().contiguous(), x, post, comb,
                              X2.stride(0), mix2.stride(0), 1.0 / (hc * d), eps, norm_eps, HC=hc, HP=hp,
                              CP=triton.next_power_of_2(hc * hc), D=d, DP=dp, FULL=full,
                              num_warps=max(1, min(16, hp * dp // 1024)), **pdl(X2))
    return x, post, comb


def mhc_pre_triton(X: torch.Tensor, mix: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, eps: float,
                   norm_eps: float):
    return _pre(X, mix, scale, base, eps, norm_eps, True)


def mhc_head_triton(X: torch.Tensor, mix: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, eps: float,
                    norm_eps: float) -> torch.Tensor:
    return _pre(X, mix, scale, base, eps, norm_eps, False)[0]


def mhc_post_triton(y: torch.Tensor, X: torch.Tensor, post: torch.Tensor, comb: torch.Tensor,
                    b: torch.Tensor | None = None) -> torch.Tensor:
    hc, d = X.shape[-2], X.shape[-1]
    if b is not None and X.dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"mhc_post: y + b is rounded to bf16 or fp32 streams, found {X.dtype}")
    X2 = rows(X, hc * d)
    y2 = rows(y, d)
    b2 = rows(b, d) if b is not None else y2                             # never read without b
    post2, comb2 = post.float().reshape(-1, hc).contiguous(), comb.float().reshape(-1, hc * hc).contiguous()
    out = torch.empty(X.shape, dtype=X.dtype, device=X.device)
    R = X2.shape[0]
    if R and d:
        hp = triton.next_power_of_2(hc)
        bd = min(triton.next_power_of_2(d), max(16, TILE // hp))
        _mhc_post_kernel[(R, triton.cdiv(d, bd))](y2, b2, X2, post2, comb2, out, y2.stride(0), b2.stride(0),
                                                 X2.stride(0), HC=hc, HP=hp, D=d, BD=bd, HAS_B=b is not None,
                                                 ROUND=X.dtype == torch.bfloat16, NATIVE=X.is_cuda,
                                                 num_warps=4 if hp * bd >= 2048 else 1, **pdl(y2))
    return out
