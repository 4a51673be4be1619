"""MoE: sqrt-softplus router with a selection-only bias, hash routing for the first layers, route scale,
SwiGLU experts with the clamp on the raw gate, and a shared expert."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dsv4_kernels.fused_swiglu.reference import swiglu_ref

from .linear import Linear


# silu(clamp(gate, max=L)) * clamp(up, -L, L) in fp32: the raw gate is clamped before SiLU. One definition,
# beside the fused kernel it is the oracle of.
swiglu = swiglu_ref


class Expert(nn.Module):
    def __init__(self, dim: int, inter: int, limit: float, fmt: str, dtype):
        super().__init__()
        self.limit = limit
        self.w1 = Linear(dim, inter, fmt, dtype)
        self.w2 = Linear(inter, dim, fmt, dtype)
        self.w3 = Linear(dim, inter, fmt, dtype)

    def forward(self, x: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        h = swiglu(self.w1(x), self.w3(x), self.limit)
        if weight is not None:
            h = weight * h                     # the routing weight multiplies before w2
        return self.w2(h.to(x.dtype)).float()


class Gate(nn.Module):
    def __init__(self, args, layer: int, fmt: str, dtype):
        super().__init__()
        self.k, self.route_scale = args.n_activated_experts, args.route_scale
        self.hash = layer < args.n_hash_layers
        self.weight = nn.Parameter(torch.zeros(args.n_routed_experts, args.dim, dtype=dtype), requires_grad=False)
        self.fmt = fmt
        if self.hash:
            self.register_buffer("tid2eid", torch.zeros(args.vocab_size, self.k, dtype=torch.int64))
        else:
            self.bias = nn.Parameter(torch.zeros(args.n_routed_experts), requires_grad=False)

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [N, d], ids [N] -> (weights [N, k] fp32, expert indices [N, k])."""
        scores = F.softplus(x.float() @ self.weight.float().T).sqrt()
        idx = self.tid2eid[ids] if self.hash else (scores + self.bias).topk(self.k, dim=-1).indices
        w = scores.gather(-1, idx)
        return w / w.sum(-1, keepdim=True) * self.route_scale, idx


class MoE(nn.Module):
    def __init__(self, args, layer: int, policy: dict[str, str], dtype):
        super().__init__()
        self.dim, self.n_experts = args.dim, args.n_routed_experts
        self.gate = Gate(args, layer, policy["router_gate"], dtype)
        self.experts = nn.ModuleList(Expert(args.dim, args.moe_inter_dim, args.swiglu_limit, policy["routed_experts"], dtype)
                                     for _ in range(args.n_routed_experts))
        self.shared_experts = Expert(args.dim, args.moe_inter_dim * args.n_shared_experts, args.swiglu_limit,
                                     policy["shared_experts"], dtype)

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, self.dim)
        weights, idx = self.gate(x, ids.reshape(-1))
        y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        # Reference-style dispatch: per-expert counts read back to the host, then a loop over the experts hit.
        counts = torch.bincount(idx.flatten(), minlength=self.n_experts).tolist()
        for e in range(self.n_experts):
            if counts[e] == 0:
                continue
            rows, slot = torch.where(idx == e)
            y[rows] += self.experts[e](x[rows], weights[rows, slot, None])
        y += self.shared_experts(x)
        return y.to(x.dtype).view(shape)
