"""PyTorch reference of the mHC mixes around the `f @ fn.T` matmul (`dsv4_model.mhc.HyperConnection.pre` / `.post`,
`HyperHead.forward`): the exact formulas the model always used, split at that matmul, so the reference path is
unchanged. fp32 throughout; the mixed streams are cast back to X.dtype."""
from __future__ import annotations

import torch

from ..rms_norm.reference import rms_norm_ref
from ..sinkhorn.reference import sinkhorn_ref


def mhc_pre_ref(X: torch.Tensor, mix: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, eps: float,
                norm_eps: float):
    """X [.., hc, d], mix [.., (2+hc)*hc] fp32 (= X.flatten(-2).float() @ fn.T), scale [3], base [(2+hc)*hc] ->
    (x [.., d] X.dtype, post [.., hc] fp32, comb logits [.., hc, hc] fp32, before the Sinkhorn)."""
    hc = X.shape[-2]
    f = X.flatten(-2).float()
    r = torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + norm_eps)
    mix = mix * r                                                              # [.., (2+hc)*hc]
    pre = torch.sigmoid(mix[..., :hc] * scale[0] + base[:hc]) + eps
    post = 2 * torch.sigmoid(mix[..., hc:2 * hc] * scale[1] + base[hc:2 * hc])
    comb = mix[..., 2 * hc:].unflatten(-1, (hc, hc)) * scale[2] + base[2 * hc:].view(hc, hc)
    x = (pre.unsqueeze(-1) * f.unflatten(-1, (hc, -1))).sum(-2)                 # f is X.float()
    return x.to(X.dtype), post, comb


def mhc_head_ref(X: torch.Tensor, mix: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, eps: float,
                 norm_eps: float) -> torch.Tensor:
    """The head's mix: X [.., hc, d], mix [.., hc] fp32 (= X.flatten(-2).float() @ fn.T), scale [1], base [hc] ->
    [.., d] X.dtype."""
    f = X.flatten(-2).float()
    mix = mix * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + norm_eps)
    pre = torch.sigmoid(mix * scale + base) + eps
    return (pre.unsqueeze(-1) * f.unflatten(-1, tuple(X.shape[-2:]))).sum(-2).to(X.dtype)


def mhc_post_ref(y: torch.Tensor, X: torch.Tensor, post: torch.Tensor, comb: torch.Tensor,
                 b: torch.Tensor | None = None) -> torch.Tensor:
    """X'_k = post_k * y + sum_j comb[j, k] * X_j (comb used transposed): y [B,S,d], X [B,S,hc,d], post [B,S,hc],
    comb [B,S,hc,hc] -> [B,S,hc,d] X.dtype. With `b` [B,S,d], y is y + b first, summed in fp32 and rounded once to
    X.dtype (the MoE's routed fp32 sum plus its shared expert, as `MoE.combine` makes it)."""
    if b is not None:
        y = torch.add(y, b, out=torch.empty(y.shape, dtype=X.dtype, device=y.device))
    # products then a sum over j, as the official Block.hc_post: an einsum (a GEMM, fused multiply-adds) rounds
    # otherwise
    out = post.unsqueeze(-1) * y.float().unsqueeze(-2) + (comb.unsqueeze(-1) * X.float().unsqueeze(-2)).sum(2)
    return out.to(X.dtype)


def mhc_pre_norm_ref(X: torch.Tensor, mix: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, eps: float,
                     norm_eps: float, iters: int, weight: torch.Tensor, rms_eps: float):
    """`pre`, its Sinkhorn and the sublayer's RMSNorm in the order the block runs them (the x of `pre` is read only
    by that norm): -> (h = rms_norm(x, weight, rms_eps) [.., d] X.dtype, post [.., hc] fp32, comb [.., hc, hc] fp32
    after `iters` Sinkhorn iterations)."""
    x, post, logits = mhc_pre_ref(X, mix, scale, base, eps, norm_eps)
    return rms_norm_ref(x, weight, rms_eps), post, sinkhorn_ref(logits, iters, eps)
