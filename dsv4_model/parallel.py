"""Tensor parallelism for the DSV4 decode, as the official reference shards it (S1 `inference/model.py`):

- embedding: vocab-parallel (each rank holds vocab/N rows, out-of-range ids give zero rows), all-reduce;
- attention: heads split (wq_b column-parallel, attn_sink sliced), wo_a column-parallel by output group,
  wo_b row-parallel + all-reduce; wq_a, wkv, norms and the compressor are replicated;
- indexer: index heads split (wq_b, weights_proj column-parallel), partial scores summed by all-reduce before
  top-k; its compressor is replicated;
- MoE: routed experts split (rank r holds experts [r*E/N, (r+1)*E/N)); the gate is replicated and its picks of
  other ranks' experts get weight 0; the shared expert column/row-parallel; one all-reduce of (routed + shared)
  per MoE (the reference all-reduces the routed sum and runs the shared expert replicated: same result, one
  reduce, 1/N of the shared weights per rank);
- head: column-parallel over the vocab, all-gather of the logits.

`shard(model, group)` turns a loaded single-rank Transformer into this rank's shard in place: weights are
sliced once, and the modules that own a collective become their parallel subclasses (same parameters, same
math, the collective added where the reference has it). Every collective is a plain synchronous
`torch.distributed` call on the current stream: under NCCL it is captured into the CUDA graph with the rest
of the step. World size 1 is the unsharded model (shard() is not called).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .indexer import Indexer
from .linear import Linear
from .moe import Gate, MoE
from .quant import FP8_MAX, _pow2_scale, fp8_fake_quant
from .rope import rope_tail


class ShardError(ValueError):
    """A model that cannot be split over this many ranks; names the dimension and the world size."""


def _split(n: int, world: int, what: str) -> int:
    if n % world:
        raise ShardError(f"{what}={n} is not divisible by the world size {world}")
    return n // world


class ParallelEmbedding(nn.Module):
    """Rows [start, start + vocab/N) of the embedding; ids outside give zero rows; all-reduce sums the ranks."""

    def __init__(self, weight: torch.Tensor, start: int, group):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)       # [vocab/N, dim]
        self.start, self.group = start, group

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        local = ids - self.start
        mine = (local >= 0) & (local < self.weight.shape[0])
        # torch.where, not `ids[mask] = 0` as in the reference: a boolean-mask write is a data-dependent shape
        y = F.embedding(torch.where(mine, local, 0), self.weight).masked_fill(~mine.unsqueeze(-1), 0)
        dist.all_reduce(y, group=self.group)
        return y


class RowParallelLinear(Linear):
    """Input features split across ranks; the partial products are summed by an all-reduce in fp32 (as the
    reference's RowParallelLinear), or by the caller when `reduce` is False.

    The FP8 activation simulation quantises 1x`block` slices of the *full* input row. When a block lies inside
    one rank's slice it is simulated locally, exactly as unsharded; when it spans ranks (a row narrower than 128
    features, so one block covers the whole row) its scale needs the amax over every rank: one MAX all-reduce
    of [.., 1] values, so the sharded step quantises exactly as the unsharded one."""

    group = None
    reduce = True
    block = 0                # the unsharded layer's FP8 block; 0 = whole row across ranks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.act_sim and self.fmt == "fp8" and self.block == 0:
            xf = x.float()
            amax = xf.abs().amax(-1, keepdim=True)
            dist.all_reduce(amax, op=dist.ReduceOp.MAX, group=self.group)
            s = _pow2_scale(amax, FP8_MAX)
            x = ((xf / s).to(torch.float8_e4m3fn).float() * s).to(x.dtype)
            y = F.linear(x.to(self.weight.dtype), self.weight)
        elif self.act_sim and self.fmt == "fp8":
            y = F.linear(fp8_fake_quant(x, self.block).to(self.weight.dtype), self.weight)
        else:
            y = super().forward(x)
        if not self.reduce:
            return y
        y = y.float()
        dist.all_reduce(y, group=self.group)
        return y.to(self.weight.dtype)


class ParallelHead(Linear):
    """Vocab rows [r*V/N, (r+1)*V/N) of the LM head; the logits of every rank are all-gathered into [.., V]."""

    group = None
    world = 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)                                             # [.., V/N]
        lead, v = y.shape[:-1], y.shape[-1]
        flat = y.reshape(-1, v).contiguous()                               # [n, V/N]
        out = torch.empty(self.world * flat.shape[0], v, dtype=y.dtype, device=y.device)
        dist.all_gather_into_tensor(out, flat, group=self.group)           # [N*n, V/N], rank-major
        return out.view(self.world, -1, v).transpose(0, 1).reshape(*lead, self.world * v)


class ParallelIndexer(Indexer):
    """This rank's index heads; the per-head ReLU scores are summed over all heads by an all-reduce before
    top-k, as the reference does. `Hi` stays the global head count: the 1/sqrt(Hi) score scale is over all heads."""

    group = None

    def _q(self, qr: torch.Tensor, cs_q: torch.Tensor) -> torch.Tensor:
        q = self.wq_b(qr).unflatten(-1, (-1, self.Di))                    # [B,T,Hi/N,Di]: this rank's heads
        return self._rotate(rope_tail(q, cs_q, self.rd))

    def _scores(self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        s = super()._scores(x, q, k)
        dist.all_reduce(s, group=self.group)
        return s


class ParallelGate(Gate):
    """The replicated router; a pick of an expert held by another rank keeps its slot with weight 0 and the index
    `n_local` (one past this rank's experts): the reference loop over local experts never visits it, and a
    fixed-shape path clamps it and multiplies by the zero weight. (Mapping it onto a real local expert instead
    would duplicate a row that the reference's `y[rows] += ...` then writes only once.)"""

    start = 0
    n_local = 0

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w, idx = super().forward(x, ids)
        local = idx - self.start
        mine = (local >= 0) & (local < self.n_local)
        return torch.where(mine, w, 0.0), torch.where(mine, local, self.n_local)


class ParallelMoE(MoE):
    """Local experts and this rank's slice of the shared expert; their sum is all-reduced once."""

    group = None

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        y = super().forward(x, ids)
        dist.all_reduce(y, group=self.group)
        return y


def _become(module: nn.Module, cls: type, **attrs) -> nn.Module:
    """Give `module` its parallel class in place: same parameters and buffers, the collective added."""
    module.__class__ = cls
    for k, v in attrs.items():
        setattr(module, k, v)
    return module


def _rows(lin: Linear, lo: int, hi: int) -> None:
    """Keep output features [lo, hi) (column-parallel)."""
    lin.weight = nn.Parameter(lin.weight.data[lo:hi].clone(), requires_grad=False)
    lin.out_features = hi - lo


def _cols(lin: Linear, lo: int, hi: int, world: int, group) -> None:
    """Keep input features [lo, hi) and all-reduce the output (row-parallel)."""
    full = lin.in_features
    block = 128 if full % 128 == 0 else full          # the unsharded Linear's FP8 activation block
    local = hi - lo
    if lin.act_sim and lin.fmt == "fp8" and local % block and block != full:
        raise ShardError(f"row-parallel {lin.in_features}->{lin.out_features}: {local} input features per rank split an "
                         f"FP8 activation block of {block}")
    if lin.fmt == "fp4" and local % 16:
        raise ShardError(f"row-parallel {lin.in_features}->{lin.out_features}: {local} input features per rank split an "
                         "NVFP4 activation block of 16")
    lin.weight = nn.Parameter(lin.weight.data[:, lo:hi].clone(), requires_grad=False)
    lin.in_features = local
    _become(lin, RowParallelLinear, group=group, block=0 if local % block else block)


def shard(model: nn.Module, group=None) -> nn.Module:
    """Turn a loaded Transformer into this rank's tensor-parallel shard, in place (see the module docstring).
    Raises ShardError naming the first dimension the world size does not divide."""
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if world == 1:
        return model
    a = model.args
    vl = _split(a.vocab_size, world, "vocab_size")
    hl = _split(a.n_heads, world, "n_heads")
    gl = _split(a.o_groups, world, "o_groups")
    el = _split(a.n_routed_experts, world, "n_routed_experts")
    il = _split(a.index_n_heads, world, "index_n_heads")
    sl = _split(a.moe_inter_dim * a.n_shared_experts, world, "shared expert width")
    dev = model.embed.weight.device
    model.embed = ParallelEmbedding(model.embed.weight.data[rank * vl:(rank + 1) * vl].clone(), rank * vl, group).to(dev)
    _rows(model.head, rank * vl, (rank + 1) * vl)
    _become(model.head, ParallelHead, group=group, world=world)
    for block in model.layers:
        at = block.attn
        D, R = at.D, at.R
        _rows(at.wq_b, rank * hl * D, (rank + 1) * hl * D)
        at.attn_sink = nn.Parameter(at.attn_sink.data[rank * hl:(rank + 1) * hl].clone(), requires_grad=False)
        _rows(at.wo_a, rank * gl * R, (rank + 1) * gl * R)                 # group g = heads [g*H/G, (g+1)*H/G)
        _cols(at.wo_b, rank * gl * R, (rank + 1) * gl * R, world, group)
        at.H, at.G = hl, gl
        if at.indexer is not None:
            ix = at.indexer
            _rows(ix.wq_b, rank * il * ix.Di, (rank + 1) * il * ix.Di)
            _rows(ix.weights_proj, rank * il, (rank + 1) * il)
            _become(ix, ParallelIndexer, group=group)
        moe = block.ffn
        moe.experts = nn.ModuleList(list(moe.experts)[rank * el:(rank + 1) * el])
        moe.n_experts = el
        _become(moe.gate, ParallelGate, start=rank * el, n_local=el)
        sh = moe.shared_experts
        _rows(sh.w1, rank * sl, (rank + 1) * sl)
        _rows(sh.w3, rank * sl, (rank + 1) * sl)
        _cols(sh.w2, rank * sl, (rank + 1) * sl, world, group)
        sh.w2.reduce = False                                               # summed with the routed experts below
        _become(moe, ParallelMoE, group=group)
    model.tp = (rank, world)
    return model
