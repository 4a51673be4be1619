"""mHC: manifold-constrained hyper-connections. The residual is hc copies X [B,S,hc,d]; each sublayer reads a
sigmoid-weighted mix and writes back through a Sinkhorn-normalised hc x hc matrix (fixed 20 iterations)."""
from __future__ import annotations

import torch
from torch import nn

from dsv4_kernels.sinkhorn.reference import sinkhorn_ref


class HyperConnection(nn.Module):
    def __init__(self, hc: int, dim: int, iters: int, eps: float, norm_eps: float):
        super().__init__()
        self.hc, self.iters, self.eps, self.norm_eps = hc, iters, eps, norm_eps
        mix = (2 + hc) * hc
        self.fn = nn.Parameter(torch.zeros(mix, hc * dim), requires_grad=False)
        self.base = nn.Parameter(torch.zeros(mix), requires_grad=False)
        self.scale = nn.Parameter(torch.ones(3), requires_grad=False)
        # the softmax + Sinkhorn of `pre`: the reference, or its one-launch kernel set at load on CUDA
        # (decode.kernel_modules)
        self.sinkhorn = sinkhorn_ref

    def pre(self, X: torch.Tensor):
        """X [B,S,hc,d] -> (x [B,S,d], post [B,S,hc], comb [B,S,hc,hc])."""
        hc = self.hc
        f = X.flatten(-2).float()
        r = torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + self.norm_eps)
        mix = (f @ self.fn.T) * r                                                  # [B,S,24]
        pre = torch.sigmoid(mix[..., :hc] * self.scale[0] + self.base[:hc]) + self.eps
        post = 2 * torch.sigmoid(mix[..., hc:2 * hc] * self.scale[1] + self.base[hc:2 * hc])
        comb = mix[..., 2 * hc:].unflatten(-1, (hc, hc)) * self.scale[2] + self.base[2 * hc:].view(hc, hc)
        comb = self.sinkhorn(comb, self.iters, self.eps)     # fixed count: no host convergence check
        x = (pre.unsqueeze(-1) * X.float()).sum(-2)
        return x.to(X.dtype), post, comb

    @staticmethod
    def post(y: torch.Tensor, X: torch.Tensor, post: torch.Tensor, comb: torch.Tensor) -> torch.Tensor:
        # X'_k = post_k * y + sum_j comb[j, k] * X_j   (comb used transposed)
        out = post.unsqueeze(-1) * y.float().unsqueeze(-2) + torch.einsum("bsjk,bsjd->bskd", comb, X.float())
        return out.to(X.dtype)


class HyperHead(nn.Module):
    def __init__(self, hc: int, dim: int, eps: float, norm_eps: float):
        super().__init__()
        self.eps, self.norm_eps = eps, norm_eps
        self.fn = nn.Parameter(torch.zeros(hc, hc * dim), requires_grad=False)
        self.base = nn.Parameter(torch.zeros(hc), requires_grad=False)
        self.scale = nn.Parameter(torch.ones(1), requires_grad=False)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        f = X.flatten(-2).float()
        mix = (f @ self.fn.T) * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + self.norm_eps)
        pre = torch.sigmoid(mix * self.scale + self.base) + self.eps
        return (pre.unsqueeze(-1) * X.float()).sum(-2).to(X.dtype)
