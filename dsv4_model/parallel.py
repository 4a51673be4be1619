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
from .linear import Linear, get_qweight, set_qweight
from .moe import Gate, MoE
from .quant import FP4_MAX, FP8_MAX, QWeight, _pow2_scale, act_sim, dequant, nvfp4_act_fake_quant


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

    The activation simulation quantises blocks of the *full* input row. A block inside one rank's slice is
    simulated locally, exactly as unsharded. A scale that spans ranks needs the amax over every rank, one MAX
    all-reduce of [.., 1] values: the FP8 block when the row is narrower than 128 features (the block is then the
    whole row), and NVFP4's dynamic per-token scale when the checkpoint has no input_scale."""

    group = None
    reduce = True
    spans = False            # the FP8 activation block is the whole row, across ranks

    def _global_amax(self, xf: torch.Tensor) -> torch.Tensor:
        amax = xf.abs().amax(-1, keepdim=True)
        dist.all_reduce(amax, op=dist.ReduceOp.MAX, group=self.group)
        return amax

    def _act_sim(self, x: torch.Tensor, qw: QWeight) -> torch.Tensor:
        if qw.fmt in ("fp8", "mxfp4") and self.spans:
            xf = x.float()
            s = _pow2_scale(self._global_amax(xf), FP8_MAX)
            return ((xf / s).to(torch.float8_e4m3fn).float() * s).to(x.dtype)
        if qw.fmt == "nvfp4" and qw.input_scale is None:
            xf = x.float()
            s = (self._global_amax(xf) / (FP4_MAX * FP8_MAX)).clamp(min=1e-30)
            return nvfp4_act_fake_quant(x, s.reshape(-1, 1, 1))
        return act_sim(x, qw.fmt, qw.input_scale, self.fp8_quant)

    def fp8_block(self) -> int | None:
        # a block that spans ranks takes its amax from every rank: no caller can simulate it alone
        return None if self.spans else super().fp8_block()

    def forward(self, x: torch.Tensor, simulated: bool = False) -> torch.Tensor:
        qw = self.qweight
        if self.act_sim and not simulated:
            x = self._act_sim(x, qw)
        y = F.linear(x.to(self.dtype), dequant(qw, dtype=self.dtype))
        if not self.reduce:
            return y
        y = y.float()
        dist.all_reduce(y, group=self.group)
        return y.to(self.dtype)


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
    """This rank's index heads (`Indexer.query` takes the heads wq_b gives: Hi/N here); the per-head ReLU scores are
    summed over all heads by an all-reduce before top-k, as the reference does. `Hi` stays the global head count: the 1/sqrt(Hi) score scale is over all heads."""

    group = None

    def scores(self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
        s = super().scores(x, q, k, w)
        dist.all_reduce(s, group=self.group)
        return s


class ParallelGate(Gate):
    """The replicated router; a pick of an expert held by another rank keeps its slot with weight 0 and the index
    `n_local` (one past this rank's experts): the reference loop over local experts never visits it, and a
    fixed-shape path clamps it and multiplies by the zero weight. (Mapping it onto a real local expert instead
    would duplicate a row that the reference's `y[rows] += ...` then writes only once.)"""

    start = 0
    n_local = 0
    picks_past_experts = True

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w, idx = super().forward(x, ids)
        local = idx - self.start
        mine = (local >= 0) & (local < self.n_local)
        # picks in local expert order (the others last), as `Gate.forward` gives them: the mapping moved the picks
        # of lower ranks' experts, which came first, to the end's index
        local, order = torch.where(mine, local, self.n_local).sort(-1)
        return torch.where(mine, w, 0.0).gather(-1, order), local


class ParallelMoE(MoE):
    """Local experts and this rank's slice of the shared expert; their sum is all-reduced once, in fp32. Both
    dispatches (the reference loop in `MoE.forward`, the fixed-shape `decode.moe_step`) end in `combine`."""

    group = None
    sums_in_post = False        # the sum is all-reduced before its rounding

    def combine(self, y: torch.Tensor, shared: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        y = y + shared
        dist.all_reduce(y, group=self.group)
        return y.to(dtype)


def _become(module: nn.Module, cls: type, **attrs) -> nn.Module:
    """Give `module` its parallel class in place: same parameters and buffers, the collective added."""
    module.__class__ = cls
    for k, v in attrs.items():
        setattr(module, k, v)
    return module


_BLOCK = {"fp8": (128, 128), "mxfp4": (1, 32), "nvfp4": (1, 16)}     # scale block (rows, cols) per format


def slice_qweight(qw: QWeight, dim: int, lo: int, hi: int, what: str) -> QWeight:
    """Logical rows (dim -2), columns (dim -1) or experts (dim 0 of a stack) [lo, hi) of a stored weight, with the
    matching scales. A slice that cuts a scale block in two cannot be held in the format: ShardError."""
    def cut(t, d, a, b):
        return None if t is None else t.narrow(d, a, b - a).clone()
    if dim == 0:
        stack = qw.data.dim() == 3
        return QWeight(qw.fmt, cut(qw.data, 0, lo, hi), cut(qw.scale, 0, lo, hi),
                       cut(qw.scale2, 0, lo, hi) if stack and qw.scale2 is not None and qw.scale2.dim() else qw.scale2,
                       cut(qw.input_scale, 0, lo, hi) if stack and qw.input_scale is not None and qw.input_scale.dim() else qw.input_scale)
    d = qw.data.dim() + dim
    if qw.fmt == "plain":
        return QWeight("plain", cut(qw.data, d, lo, hi))
    blk = _BLOCK[qw.fmt][0 if dim == -2 else 1]
    if lo % blk and lo // blk != (hi - 1) // blk:
        raise ShardError(f"{what}: features [{lo}, {hi}) per rank cut a {qw.fmt} scale block of {blk}")
    packed = qw.fmt in ("mxfp4", "nvfp4") and dim == -1            # two e2m1 codes per byte along K
    data = cut(qw.data, d, lo // 2, hi // 2) if packed else cut(qw.data, d, lo, hi)
    scale = cut(qw.scale, d, lo // blk, (hi - 1) // blk + 1)
    return QWeight(qw.fmt, data, scale, qw.scale2, qw.input_scale)


def _rows(lin: Linear, lo: int, hi: int, what: str) -> None:
    """Keep output features [lo, hi) (column-parallel)."""
    set_qweight(lin, "", slice_qweight(lin.qweight, -2, lo, hi, what))
    lin.out_features = hi - lo


def _cols(lin: Linear, lo: int, hi: int, group, what: str) -> None:
    """Keep input features [lo, hi) and all-reduce the output (row-parallel)."""
    full, local = lin.in_features, hi - lo
    block = 128 if full % 128 == 0 else full          # the unsharded FP8 activation block (act_sim)
    if lin.fmt in ("fp8", "mxfp4") and local % block and block != full:
        raise ShardError(f"{what}: {local} input features per rank split an FP8 activation block of {block}")
    if lin.fmt == "nvfp4" and local % 16:
        raise ShardError(f"{what}: {local} input features per rank split an NVFP4 activation block of 16")
    set_qweight(lin, "", slice_qweight(lin.qweight, -1, lo, hi, what))
    lin.in_features = local
    _become(lin, RowParallelLinear, group=group, spans=bool(local % block))


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
    _rows(model.head, rank * vl, (rank + 1) * vl, "head")
    _become(model.head, ParallelHead, group=group, world=world)
    for i, block in enumerate(model.layers):
        at = block.attn
        D, R = at.D, at.R
        _rows(at.wq_b, rank * hl * D, (rank + 1) * hl * D, f"layers.{i}.attn.wq_b")
        at.attn_sink = nn.Parameter(at.attn_sink.data[rank * hl:(rank + 1) * hl].clone(), requires_grad=False)
        _rows(at.wo_a, rank * gl * R, (rank + 1) * gl * R, f"layers.{i}.attn.wo_a")  # group g = heads [g*H/G, (g+1)*H/G)
        _cols(at.wo_b, rank * gl * R, (rank + 1) * gl * R, group, f"layers.{i}.attn.wo_b")
        at.H, at.G = hl, gl
        if at.indexer is not None:
            ix = at.indexer
            _rows(ix.wq_b, rank * il * ix.Di, (rank + 1) * il * ix.Di, f"layers.{i}.attn.indexer.wq_b")
            _rows(ix.weights_proj, rank * il, (rank + 1) * il, f"layers.{i}.attn.indexer.weights_proj")
            _become(ix, ParallelIndexer, group=group)
        moe = block.ffn
        ex = moe.experts
        for p in ("w1", "w3", "w2"):
            set_qweight(ex, p, slice_qweight(get_qweight(ex, p), 0, rank * el, (rank + 1) * el, f"layers.{i}.ffn.experts.{p}"))
        ex.n = moe.n_experts = el
        _become(moe.gate, ParallelGate, start=rank * el, n_local=el)
        sh = moe.shared_experts
        _rows(sh.w1, rank * sl, (rank + 1) * sl, f"layers.{i}.ffn.shared_experts.w1")
        _rows(sh.w3, rank * sl, (rank + 1) * sl, f"layers.{i}.ffn.shared_experts.w3")
        _cols(sh.w2, rank * sl, (rank + 1) * sl, group, f"layers.{i}.ffn.shared_experts.w2")
        sh.w2.reduce = False                                               # summed with the routed experts below
        _become(moe, ParallelMoE, group=group)
    return model
