"""mHC: manifold-constrained hyper-connections. The residual is hc copies X [B,S,hc,d]; each sublayer reads a
sigmoid-weighted mix and writes back through a Sinkhorn-normalised hc x hc matrix (fixed 20 iterations).

The `f @ fn.T` matmul is `f32_linear_ref` (fp32, as the reference: the bf16 streams widened, in the product) or the
fp32 decode GEMV (which widens them as it reads them: no fp32 copy of the streams per sublayer); what surrounds it (the
rsqrt norm, sigmoids, scale/base, the weighted sums) is `dsv4_kernels.mhc`'s reference, or its one-launch kernel:
kernel slots, set by `use_kernels`."""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from dsv4_kernels.mhc.reference import mhc_head_ref, mhc_post_ref, mhc_pre_norm_ref, mhc_pre_ref
from dsv4_kernels.moe_gemv.reference import f32_linear_ref
from dsv4_kernels.sinkhorn.reference import sinkhorn_ref


class Sum(NamedTuple):
    """A sublayer's output y given as two addends, y = a + b summed in fp32 and rounded once to the streams' dtype (a
    fp32, b widened exactly): `MoE.combine`'s values, left to `HyperConnection.post` to form in its own launch."""
    a: torch.Tensor
    b: torch.Tensor


class HyperConnection(nn.Module):
    def __init__(self, hc: int, dim: int, iters: int, eps: float, norm_eps: float):
        super().__init__()
        self.hc, self.iters, self.eps, self.norm_eps = hc, iters, eps, norm_eps
        mix = (2 + hc) * hc
        self.fn = nn.Parameter(torch.zeros(mix, hc * dim), requires_grad=False)
        self.base = nn.Parameter(torch.zeros(mix), requires_grad=False)
        self.scale = nn.Parameter(torch.ones(3), requires_grad=False)
        # the softmax + Sinkhorn of `pre` and the mixes around its matmul and of `post`: the references, or their
        # one-launch kernels (`use_kernels`)
        self.sinkhorn, self.pre_mix, self.post_mix = sinkhorn_ref, mhc_pre_ref, mhc_post_ref
        self.matmul = f32_linear_ref
        # `pre`, its Sinkhorn and the sublayer's RMSNorm as one op (`pre_normed`, what the blocks call): the
        # reference composition, or its one-launch kernel (`use_kernels`)
        self.pre_norm = mhc_pre_norm_ref

    def use_kernels(self, table) -> None:
        """This module's kernel slots from a kernel table (`decode.KernelTable`)."""
        self.sinkhorn, self.pre_mix, self.post_mix, self.matmul = (table["sinkhorn"], table["mhc_pre"],
                                                                    table["mhc_post"], table["f32"])
        self.pre_norm = table["mhc_pre_norm"]

    def pre(self, X: torch.Tensor):
        """X [B,S,hc,d] -> (x [B,S,d], post [B,S,hc], comb [B,S,hc,hc])."""
        mix = self.matmul(X.flatten(-2), self.fn)          # [B,S,24] fp32 (X widened in the product), before the norm
        x, post, comb = self.pre_mix(X, mix, self.scale, self.base, self.eps, self.norm_eps)
        comb = self.sinkhorn(comb, self.iters, self.eps)     # fixed count: no host convergence check
        return x, post, comb

    def pre_normed(self, X: torch.Tensor, norm) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`pre`, then the sublayer's RMSNorm `norm` (a `linear.RMSNorm`) of its x, the only reader of x:
        X [B,S,hc,d] -> (norm(x) [B,S,d], post [B,S,hc], comb [B,S,hc,hc])."""
        mix = self.matmul(X.flatten(-2), self.fn)          # [B,S,24] fp32 (X widened in the product), before the norm
        return self.pre_norm(X, mix, self.scale, self.base, self.eps, self.norm_eps, self.iters, norm.weight, norm.eps)

    def post(self, y: torch.Tensor | Sum, X: torch.Tensor, post: torch.Tensor, comb: torch.Tensor) -> torch.Tensor:
        # X'_k = post_k * y + sum_j comb[j, k] * X_j   (comb used transposed); a `Sum` y is formed in the same op
        if isinstance(y, Sum):
            return self.post_mix(y.a, X, post, comb, y.b)
        return self.post_mix(y, X, post, comb)


class HyperHead(nn.Module):
    def __init__(self, hc: int, dim: int, eps: float, norm_eps: float):
        super().__init__()
        self.eps, self.norm_eps = eps, norm_eps
        self.fn = nn.Parameter(torch.zeros(hc, hc * dim), requires_grad=False)
        self.base = nn.Parameter(torch.zeros(hc), requires_grad=False)
        self.scale = nn.Parameter(torch.ones(1), requires_grad=False)
        self.head_mix = mhc_head_ref    # or its one-launch kernel (`use_kernels`)
        self.matmul = f32_linear_ref    # likewise

    def use_kernels(self, table) -> None:
        """This module's kernel slots from a kernel table (`decode.KernelTable`)."""
        self.head_mix, self.matmul = table["mhc_head"], table["f32"]

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        mix = self.matmul(X.flatten(-2), self.fn)          # [B,S,hc] fp32 (X widened in the product), before the norm
        return self.head_mix(X, mix, self.scale, self.base, self.eps, self.norm_eps)
