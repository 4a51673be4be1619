"""MoE: sqrt-softplus router with a selection-only bias, hash routing for the first layers, route scale,
SwiGLU experts with the clamp on the raw gate, and a shared expert."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dsv4_kernels.fused_swiglu.reference import swiglu_ref

from .linear import Linear
from .quant import fp8_fake_quant, nvfp4_act_fake_quant


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


def _expert_linear(x: torch.Tensor, w: tuple, idx: torch.Tensor) -> torch.Tensor:
    """x [T,k,in] through the experts idx [T,k] of the stack w -> [T,k,out]: the per-expert Linear, batched."""
    fmt, data, _scale, _scale2, input_scale = w
    if fmt == "fp8":
        x = fp8_fake_quant(x, 128 if x.shape[-1] % 128 == 0 else x.shape[-1])
    elif fmt == "fp4":
        x = nvfp4_act_fake_quant(x, input_scale[idx].reshape(-1, 1, 1))   # each expert's own input scale
    W = data[idx]                                                     # [T,k,out,in] gathered by device index
    return (W @ x.to(W.dtype).unsqueeze(-1)).squeeze(-1)


def routed_experts(x: torch.Tensor, idx: torch.Tensor, wts: torch.Tensor, w1: tuple, w3: tuple, w2: tuple,
                   limit: float | None) -> torch.Tensor:
    """y [T,d] fp32 = sum_k w2[idx]( wts * swiglu(w1[idx] x, w3[idx] x, limit) ): fixed shapes, device expert ids.

    x [T,d], idx [T,k] device int, wts [T,k] fp32; each w is `(fmt, data [E,out,in], scale, scale2, input_scale [E])`
    (CONTRACTS section 3). This is the PyTorch implementation (what CPU runs); the fused kernel shares the API.
    """
    idx, order = idx.sort(-1)                   # accumulate in expert order, as the per-expert dispatch does
    wts = wts.gather(-1, order)
    xk = x.unsqueeze(1).expand(-1, idx.shape[1], -1)                                 # [T,k,d]
    h = swiglu(_expert_linear(xk, w1, idx), _expert_linear(xk, w3, idx), float("inf") if limit is None else limit)
    h = wts.unsqueeze(-1) * h                                                         # the routing weight before w2
    out = _expert_linear(h.to(x.dtype), w2, idx).float()                              # [T,k,d]
    y = out[:, 0]
    for j in range(1, out.shape[1]):            # k is fixed: a sequential sum, the same rounding as y[rows] += ...
        y = y + out[:, j]
    return y


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
        self.dim, self.n_experts, self.limit = args.dim, args.n_routed_experts, args.swiglu_limit
        self.gate = Gate(args, layer, policy["router_gate"], dtype)
        self.experts = nn.ModuleList(Expert(args.dim, args.moe_inter_dim, args.swiglu_limit, policy["routed_experts"], dtype)
                                     for _ in range(args.n_routed_experts))
        self.shared_experts = Expert(args.dim, args.moe_inter_dim * args.n_shared_experts, args.swiglu_limit,
                                     policy["shared_experts"], dtype)

    def expert_stacks(self) -> tuple[tuple, tuple, tuple]:
        """(w1, w3, w2) of all experts as stacks `(fmt, data [E,out,in], None, None, input_scale [E])`.

        Built on first use; each expert's weight is then re-pointed at its row of the stack, so the stack costs no
        memory and both dispatches read the same storage. fmt follows the experts' activation-simulation switch."""
        if getattr(self, "_stacks", None) is None:
            stacks = []
            for name in ("w1", "w3", "w2"):
                lins = [getattr(e, name) for e in self.experts]
                data = torch.stack([lin.weight.data for lin in lins])
                scales = torch.stack([lin.input_scale for lin in lins])
                for i, lin in enumerate(lins):
                    lin.weight.data = data[i]
                    lin.input_scale.data = scales[i]
                stacks.append((lins[0], data, scales))
            self._stacks = tuple(stacks)
        return tuple((lin.fmt if lin.act_sim else "bf16", data, None, None, scales) for lin, data, scales in self._stacks)

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
