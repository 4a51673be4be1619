"""mhc: the mHC mixes around the `f @ fn.T` matmul, each one Triton launch on CUDA (``triton_kernel.py``; within
fp32 rounding of the reference, not bit-exact: other summation orders, FMA contraction, the hardware rsqrt and
exp), the PyTorch references (``reference.py``) elsewhere. The matmul stays a torch op; the Sinkhorn of `pre` is
`dsv4_kernels.sinkhorn`.

    mhc_pre(X [.., hc, d], mix [.., (2+hc)*hc] fp32, scale [3], base [(2+hc)*hc], eps, norm_eps)
        -> (x [.., d] X.dtype, post [.., hc] fp32, comb logits [.., hc, hc] fp32)
    mhc_head(X [.., hc, d], mix [.., hc] fp32, scale [1], base [hc], eps, norm_eps) -> [.., d] X.dtype
    mhc_post(y [B,S,d], X [B,S,hc,d], post [B,S,hc], comb [B,S,hc,hc], b=None) -> [B,S,hc,d] X.dtype
        (b [B,S,d]: y is y + b first, rounded once to X.dtype: the MoE's combine in this launch)
    mhc_pre_norm(X, mix, scale, base, eps, norm_eps, iters, weight [d], rms_eps)
        -> (rms_norm(x) [.., d] X.dtype, post [.., hc] fp32, comb [.., hc, hc] fp32 after the Sinkhorn)
        (a block's `pre`, its Sinkhorn and its sublayer's RMSNorm in one launch, `HyperConnection.pre_normed`: the
        decode's slot "mhc_pre_norm"; within one bf16 rounding of the three kernels it replaces chained, not bit for
        bit: the norm's sum of squares runs over another register layout)

Shapes are checked with host integers only (capturable).
"""
from __future__ import annotations

import torch

from .._record import Kernel, Op
from .reference import mhc_head_ref, mhc_post_ref, mhc_pre_norm_ref, mhc_pre_ref  # noqa: F401


def _check_pre(name: str, X: torch.Tensor, mix: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, width: int,
               scales: int) -> None:
    if X.dim() < 2 or tuple(mix.shape) != (*X.shape[:-2], width) or tuple(base.shape) != (width,) or \
            tuple(scale.shape) != (scales,):
        raise ValueError(f"{name}: X {tuple(X.shape)}, mix {tuple(mix.shape)}, scale {tuple(scale.shape)}, "
                         f"base {tuple(base.shape)}: expected mix [.., {width}], scale [{scales}], base [{width}]")


def mhc_pre(X: torch.Tensor, mix: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, eps: float, norm_eps: float):
    hc = X.shape[-2] if X.dim() >= 2 else 0
    _check_pre("mhc_pre", X, mix, scale, base, (2 + hc) * hc, 3)
    if X.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import mhc_pre_triton
        return mhc_pre_triton(X, mix, scale, base, eps, norm_eps)
    return mhc_pre_ref(X, mix, scale, base, eps, norm_eps)


def mhc_head(X: torch.Tensor, mix: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, eps: float,
             norm_eps: float) -> torch.Tensor:
    _check_pre("mhc_head", X, mix, scale, base, X.shape[-2] if X.dim() >= 2 else 0, 1)
    if X.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import mhc_head_triton
        return mhc_head_triton(X, mix, scale, base, eps, norm_eps)
    return mhc_head_ref(X, mix, scale, base, eps, norm_eps)


def mhc_post(y: torch.Tensor, X: torch.Tensor, post: torch.Tensor, comb: torch.Tensor,
             b: torch.Tensor | None = None) -> torch.Tensor:
    if X.dim() != 4 or tuple(y.shape) != (*X.shape[:2], X.shape[3]) or tuple(post.shape) != tuple(X.shape[:3]) or \
            tuple(comb.shape) != (*X.shape[:3], X.shape[2]) or (b is not None and b.shape != y.shape):
        raise ValueError(f"mhc_post: y {tuple(y.shape)}, X {tuple(X.shape)}, post {tuple(post.shape)}, comb "
                         f"{tuple(comb.shape)}, b {None if b is None else tuple(b.shape)}: expected y [B,S,d], "
                         "X [B,S,hc,d], post [B,S,hc], comb [B,S,hc,hc], b as y or None")
    if X.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import mhc_post_triton
        return mhc_post_triton(y, X, post, comb, b)
    return mhc_post_ref(y, X, post, comb, b)


def mhc_pre_norm(X: torch.Tensor, mix: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, eps: float,
                 norm_eps: float, iters: int, weight: torch.Tensor, rms_eps: float):
    hc = X.shape[-2] if X.dim() >= 2 else 0
    _check_pre("mhc_pre_norm", X, mix, scale, base, (2 + hc) * hc, 3)
    if tuple(weight.shape) != (X.shape[-1],):
        raise ValueError(f"mhc_pre_norm: weight has shape {tuple(weight.shape)}, expected ({X.shape[-1]},) for X "
                         f"{tuple(X.shape)}")
    if X.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import mhc_pre_norm_triton
        return mhc_pre_norm_triton(X, mix, scale, base, eps, norm_eps, iters, weight, rms_eps)
    return mhc_pre_norm_ref(X, mix, scale, base, eps, norm_eps, iters, weight, rms_eps)


KERNEL = Kernel(ops=(
    Op("mhc_pre", mhc_pre, mhc_pre_ref, targets=("mhc_pre",), parity=("test_mhc_pre_and_head_parity",),
       decode=("mhc_pre", "mHC pre")),
    Op("mhc_post", mhc_post, mhc_post_ref, targets=("mhc_post",), parity=("test_mhc_post_parity",),
       decode=("mhc_post", "mHC post")),
    Op("mhc_head", mhc_head, mhc_head_ref, targets=("mhc_head",), parity=("test_mhc_pre_and_head_parity",),
       decode=("mhc_head", "mHC head")),
    Op("mhc_pre_norm", mhc_pre_norm, mhc_pre_norm_ref, targets=("mhc_pre_norm",), parity=("test_mhc_pre_norm_parity",),
       decode=("mhc_pre_norm", "mHC pre + Sinkhorn + RMSNorm")),
))
