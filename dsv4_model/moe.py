"""MoE: a router (sqrt-softplus by default, a selection-only bias, hash routing for the first layers, route
scale), routed experts held stacked in their stored format, and a shared expert.

The routed experts' SwiGLU clamps the raw gate (swiglu_limit); the shared expert does not, as in the official
reference (`shared_experts = Expert(dim, moe_inter_dim)`, no swiglu_limit). HF transformers clamps it too:
`shared_expert_clamp=True` in the config reproduces that.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dsv4_kernels.fused_swiglu.reference import swiglu_ref
from dsv4_kernels.moe_gemv.reference import f32_linear_ref, sum_pairs
from dsv4_kernels.moe_route.reference import SCORE_FUNCS, moe_route_ref
from dsv4_kernels.swiglu_fp8.reference import swiglu_fp8_ref

from .linear import Joined, Linear, get_qweight, init_qweight, shared_sim
from .quant import QWeight, act_sim, dequant


def swiglu(gate: torch.Tensor, up: torch.Tensor, limit: float | None) -> torch.Tensor:
    """silu(clamp(gate, max=L)) * clamp(up, -L, L) in fp32; limit None or 0 = no clamp (the reference's `> 0`)."""
    if limit:
        return swiglu_ref(gate, up, limit)
    return F.silu(gate.float()) * up.float()


class Expert(nn.Module):
    """A SwiGLU FFN of three Linears (the shared expert).

    Where w1 and w3 simulate their input the same way (the FP8 fake quant of one block size) it runs once for
    both. Where w2's simulation is the FP8 fake quant, it runs with the SwiGLU as one op, `swiglu_fp8` (the
    reference calls, or the one-launch kernel: `use_kernels`), and w2 takes the result as simulated."""

    def __init__(self, dim: int, inter: int, limit: float | None, dtype):
        super().__init__()
        self.limit = limit
        self.w1 = Linear(dim, inter, dtype)
        self.w2 = Linear(inter, dim, dtype)
        self.w3 = Linear(dim, inter, dtype)
        self.gate_up = Joined("w1", "w3")          # one launch under a CUDA table
        self.swiglu_fp8 = swiglu_fp8_ref

    def use_kernels(self, table) -> None:
        """This module's kernel slot from a kernel table (`decode.KernelTable`); w1 and w3 joined under a CUDA one."""
        self.swiglu_fp8 = table["swiglu_fp8"]
        self.gate_up.use_kernels(self, table)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [.., dim] -> [.., dim] in w2's dtype (the model's): `MoE.combine` widens it, exactly, in its fp32 add (an
        fp32 copy here was a launch of its own)."""
        w1, w2, w3 = self.w1, self.w2, self.w3
        xs, shared = shared_sim(x, w1, w3)
        g, u = self.gate_up(self, xs, shared)
        block = w2.fp8_block()
        if block is not None and g.dtype == x.dtype:
            return w2(self.swiglu_fp8(g, u, self.limit, block), simulated=True)
        return w2(swiglu(g, u, self.limit).to(x.dtype))


class Experts(nn.Module):
    """The routed experts of one layer: w1, w3 [E, inter, dim] and w2 [E, dim, inter] as QWeight stacks in the
    stored format (buffers w1_weight, w1_scale, w1_scale2, w1_input_scale, ...)."""

    def __init__(self, n: int, dim: int, inter: int, limit: float | None, dtype):
        super().__init__()
        self.n, self.limit, self.dtype = n, limit, dtype
        self.act_sim = True
        # the routed-expert compute `(x, idx, wts, w1, w3, w2, limit, act) -> y`: `routed_experts`, or the fused kernel
        # (`use_kernels`); the reference dispatch and the graph-safe step share it
        self.compute = routed_experts
        for p, shape in (("w1", (n, inter, dim)), ("w3", (n, inter, dim)), ("w2", (n, dim, inter))):
            init_qweight(self, p, shape, dtype)

    def use_kernels(self, table) -> None:
        """This module's kernel slot from a kernel table (`decode.KernelTable`)."""
        self.compute = table["experts"]

    w1 = property(lambda self: get_qweight(self, "w1"))
    w2 = property(lambda self: get_qweight(self, "w2"))
    w3 = property(lambda self: get_qweight(self, "w3"))

    def forward(self, x: torch.Tensor, e: int, weight: torch.Tensor | None = None) -> torch.Tensor:
        """Expert e on its rows x [R, dim], routing weights [R, 1] (None: 1) -> [R, dim] fp32, through `compute`:
        the decode's routed-expert compute with every row's one pick being e, so the reference dispatch and the
        graph-safe step run the same arithmetic (on a GPU, the same kernels at B = 1)."""
        idx = torch.full((x.shape[0], 1), e, dtype=torch.long, device=x.device)
        if weight is None:
            weight = torch.ones(x.shape[0], 1, device=x.device)
        return self.compute(x, idx, weight, self.w1.astuple(), self.w3.astuple(), self.w2.astuple(), self.limit,
                            act=self.act_sim)


def routed_experts(x: torch.Tensor, idx: torch.Tensor, wts: torch.Tensor, w1: tuple, w3: tuple, w2: tuple,
                   limit: float | None, act: bool = True) -> torch.Tensor:
    """y [T,d] fp32 = sum_j w2[idx_j]( wts_j * swiglu(w1[idx_j] x, w3[idx_j] x, limit) ): fixed shapes, device ids.

    x [T,d], idx [T,k] device int, wts [T,k] fp32; each w a stack `(fmt, data, scale, scale2, input_scale)`
    (QWeight.astuple). The PyTorch implementation, what CPU runs: per pick j, the T rows' experts gathered by device
    index and one batched matvec, in the model dtype as the reference linears (bf16 products, fp32 accumulation),
    each stored format's activation simulation before every projection (`act`); the picks summed in slot order
    (`sum_pairs`: the callers sort each row's picks, so that is the reference dispatch's expert order). One pick per
    call keeps the matvec shape [T, out, in] whatever k is: the reference's dispatch calls this with k = 1 per expert,
    and at T = 1 a GPU then runs the very GEMM for both paths.
    """
    return routed_experts_with(x, idx, wts, w1, w3, w2, limit, act,
                               lambda W, h: torch.bmm(W, h.unsqueeze(-1)).squeeze(-1))


def routed_experts_with(x, idx, wts, w1, w3, w2, limit, act, matvec) -> torch.Tensor:
    """`routed_experts` with its batched matvec given: matvec(W [T,out,in], h [T,in]) -> [T,out] (rowwise.py's
    row-invariant one for the speculative step's batched verify)."""
    def linear(h: torch.Tensor, w: tuple, e: torch.Tensor) -> torch.Tensor:            # h [T,in], e [T] -> [T,out]
        qw = QWeight(*w)
        if act:
            h = act_sim(h, qw.fmt, None if qw.input_scale is None else qw.input_scale[e].reshape(-1, 1))
        return matvec(dequant(qw, index=e, dtype=x.dtype), h.to(x.dtype))

    out = []
    for j in range(idx.shape[1]):                   # k is fixed: a host-known loop
        e = idx[:, j]
        h = wts[:, j:j + 1] * swiglu(linear(x, w1, e), linear(x, w3, e), limit)       # the routing weight before w2
        out.append(linear(h.to(x.dtype), w2, e).float())
    return sum_pairs(torch.stack(out, 1))


class Gate(nn.Module):
    # whether a pick can index past the experts this module's MoE holds (a tensor-parallel rank's gate marks another
    # rank's experts so: parallel.ParallelGate); a fixed-shape dispatch clamps such picks, the others need no clamp
    picks_past_experts = False

    def __init__(self, args, layer: int, dtype):
        super().__init__()
        self.k, self.route_scale, self.score_func = args.n_activated_experts, args.route_scale, args.score_func
        if self.score_func not in SCORE_FUNCS:
            raise ValueError(f"score_func {self.score_func!r} is not supported; expected one of {', '.join(SCORE_FUNCS)}")
        self.hash = layer < args.n_hash_layers
        self.dtype = torch.float32          # the reference computes the router in fp32 (the weight stays as stored)
        self.matmul = f32_linear_ref        # or the fp32 decode GEMV (`use_kernels`)
        # scores, bias or hash table, top-k, renormalisation, route scale, expert order: the reference chain, or
        # its one-launch kernel (`use_kernels`)
        self.route = moe_route_ref
        init_qweight(self, "", (args.n_routed_experts, args.dim), self.dtype)
        if self.hash:
            self.register_buffer("tid2eid", torch.zeros(args.vocab_size, self.k, dtype=torch.int64))
        else:
            self.bias = nn.Parameter(torch.zeros(args.n_routed_experts), requires_grad=False)

    @property
    def fmt(self) -> str:
        return self.fmts[""]

    def use_kernels(self, table) -> None:
        """This module's kernel slots from a kernel table (`decode.KernelTable`)."""
        self.matmul, self.route = table["f32"], table["route"]

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [N, d], ids [N] -> (weights [N, k] fp32, expert indices [N, k]), each row's picks in expert order
        (`dsv4_kernels.moe_route`). The reference computes in fp32."""
        qw = get_qweight(self)
        # a plain weight goes in as held (bf16 as stored): the fp32 product widens it, exactly, without a copy
        w = qw.data if qw.fmt == "plain" else dequant(qw, dtype=self.dtype)
        logits = self.matmul(x, w)          # fp32: x widened in the product (no fp32 copy of it in a launch)
        if self.hash:
            return self.route(logits, self.k, self.route_scale, self.score_func, None, self.tid2eid, ids)
        return self.route(logits, self.k, self.route_scale, self.score_func, self.bias)


class MoE(nn.Module):
    def __init__(self, args, layer: int, dtype):
        super().__init__()
        self.dim, self.n_experts = args.dim, args.n_routed_experts
        self.gate = Gate(args, layer, dtype)
        limit = args.swiglu_limit or None
        self.limit = limit
        self.experts = Experts(args.n_routed_experts, args.dim, args.moe_inter_dim, limit, dtype)
        self.shared_experts = Expert(args.dim, args.moe_inter_dim * args.n_shared_experts,
                                     limit if args.shared_expert_clamp else None, dtype)

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
            y[rows] += self.experts(x[rows], e, weights[rows, slot, None])
        return self.combine(y, self.shared_experts(x), x.dtype).view(shape)

    # `combine` is the plain add mHC post can make in its own launch (`mhc.Sum`); not where it is a collective
    sums_in_post = True

    def combine(self, y: torch.Tensor, shared: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The routed experts' fp32 sum y [N,d] plus the shared expert's output, summed over the tensor-parallel
        ranks (fp32, before the cast, as the reference all-reduces), in `dtype`. One rank holds everything: the add
        and its one rounding in one launch (`(y + shared.float()).to(dtype)`'s values, shared widened in the add,
        without the fp32 sum's own kernel and buffer); `parallel.ParallelMoE` all-reduces the fp32 sum between them."""
        return torch.add(y, shared, out=torch.empty(y.shape, dtype=dtype, device=y.device))
