"""Graph-safe decode: the reference model's layer math, with device-native state and control flow.

One step feeds one token to each of B sequences, each at its own position (continuous batching). Every shape is
fixed by host-known integers (bucket size, capacities) and nothing is read back to the host, so the step captures
into a CUDA graph and replays bit for bit. What differs from the reference path (`model.py`):

- positions `pos` [B] are a device tensor, advanced on the device; rope rows, ring slots, block indices and every
  mask derive from them;
- the compressors (CSA, HCA and the indexer's) fold the token into their partial-state ring every step, pool the
  open block every step, and write the pooled entry with a masked update when the sequence's position closes the
  block (no host branch on `(pos+1) % m`);
- attention reads the whole window ring and the whole compressed list, masked by position (no growing slice);
- the indexer scores every compressed slot (unclosed ones -inf) and always gathers a fixed k, padded picks masked;
- MoE: routing on the device, experts computed by `moe.routed_experts` over gathered expert weights (fixed shapes,
  device expert ids; no per-expert count read back, no host loop);
- Sinkhorn runs its fixed 20 iterations (mhc.py is shared);
- on CUDA the chains that read only what exists when they start (the compressors' products and folds, the shared
  expert; with `QUERY_ON_SIDE` the indexer's query) run on side streams (`SideStream`), parallel branches of the
  captured graph.

KV layout: per-sequence max-length buffers, not paged. The window is a fixed ring of W slots per sequence anyway;
what grows is only the compressed lists, 4x (CSA) and 128x (HCA) shorter than the token count, so paging would save
little memory at decode batches of at most 8, while a block table adds an indirection to every gather and mask.
With max-length rows each validity mask is one comparison against the position, and a sequence is one row (what a
tensor-parallel split along heads leaves untouched).

Layer math is not re-implemented: each block runs its own composition (`Block.compose`, the one the reference
runs) with this step's sublayers, which call the reference modules' own functions (`Attention.q_lora/q_heads`,
`Attention.attend`, `Compressor.pool/finish`, `Indexer.query/scores/select`, the gate, the shared expert,
head): the layer interface written down in model.py's docstring. Only state and control flow live here.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import torch
import torch.nn.functional as F
from torch import nn

from dsv4_kernels import KERNELS as KERNEL_OPS
from dsv4_kernels.hadamard_fp4.reference import hadamard_fp4_ref
from dsv4_kernels.indexer.reference import gather_picks_ref
from dsv4_kernels.moe_gemv.reference import f32_linear_ref
from dsv4_kernels.sinkhorn.reference import sinkhorn_ref

from .attention import Attention, grouped_ref
from .compressor import Compressor
from .mhc import Sum
from .model import Transformer
from .moe import routed_experts
from .quant import act_sim

# shapes: B bucket rows, W window, D head_dim, m ratio, N compressed slots per sequence, V vocab, d dim


class CompressorState(nn.Module):
    """One compressor's decode state per sequence: the open block (and for CSA the previous one) of raw C and Z,
    and the compressed entries of every closed block."""

    def __init__(self, comp, batch: int, capacity: int, dtype):
        super().__init__()
        coff = 2 if comp.overlap else 1
        slots = 2 * comp.m if comp.overlap else comp.m
        self.register_buffer("kv_state", torch.zeros(batch, slots, coff * comp.D), persistent=False)
        self.register_buffer("gate_state", torch.full((batch, slots, coff * comp.D), float("-inf")), persistent=False)
        self.register_buffer("entries", torch.zeros(batch, -(-capacity // comp.m), comp.D, dtype=dtype), persistent=False)

    def reset_rows(self, rows: slice) -> None:
        self.kv_state[rows] = 0
        self.gate_state[rows] = float("-inf")
        self.entries[rows] = 0


class LayerState(nn.Module):
    def __init__(self, attn, batch: int, capacity: int, dtype):
        super().__init__()
        self.register_buffer("kv_window", torch.zeros(batch, attn.W, attn.D, dtype=dtype), persistent=False)
        self.comp = CompressorState(attn.compressor, batch, capacity, dtype) if attn.compressor is not None else None
        self.icomp = CompressorState(attn.indexer.compressor, batch, capacity, dtype) if attn.indexer is not None else None

    def reset_rows(self, rows: slice) -> None:
        self.kv_window[rows] = 0
        for c in (self.comp, self.icomp):
            if c is not None:
                c.reset_rows(rows)


class StepIndex:
    """What a step derives from the positions alone, made once per step and shared by every layer: the rope rows,
    the window slot and mask, and per block size the open block's slot, the block index, whether it closes and
    which compressed slots are valid. Each is a kernel launch in the graph; per layer and per compressor they were
    some 40 of the step's launches at Flash structure. Lives for one forward call (no state across steps)."""

    def __init__(self, pos: torch.Tensor, rows: torch.Tensor, tables: dict[bool, torch.Tensor]):
        self.pos, self.rows, self.tables, self._made = pos, rows, tables, {}

    def _once(self, key, make):
        if key not in self._made:
            self._made[key] = make()
        return self._made[key]

    def cs(self, compressed: bool) -> torch.Tensor:
        """The rope rows at each position [n,1,rd/2,2] of the layer's table."""
        return self._once(("cs", compressed), lambda: self.tables[compressed][self.pos].unsqueeze(1))

    def window(self, W: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(ring slot [n], valid slots [n, W]): the ring is full once pos >= W-1."""
        pos = self.pos
        return self._once(("window", W), lambda: (pos % W, torch.arange(W, device=pos.device)[None, :] <= pos[:, None]))

    def window_order(self, W: int) -> torch.Tensor:
        """The ring slots oldest first [n, W] (the official window index list): from the slot after the current one
        once the ring is full, the identity before. From the ring slot, without another remainder."""
        def make():
            slot, _ = self.window(W)
            nxt = slot + 1
            start = torch.where((self.pos >= W - 1) & (nxt < W), nxt, 0)
            order = start[:, None] + torch.arange(W, device=slot.device)[None, :]
            return torch.where(order >= W, order - W, order)
        return self._once(("window_order", W), make)

    def blocks(self, m: int, overlap: bool, N: int) -> tuple[torch.Tensor, ...]:
        """For blocks of m with N slots: (open block's state slot [n], block index [n] (clamped into N), closes
        [n, 1], closed blocks [n], valid compressed slots [n, N])."""
        def make():
            pos = self.pos
            closed = (pos + 1) // m
            return ((m if overlap else 0) + pos % m, (pos // m).clamp(max=N - 1), (closed * m == pos + 1).unsqueeze(-1),
                    closed, torch.arange(N, device=pos.device)[None, :] < closed[:, None])
        return self._once(("blocks", m, overlap, N), make)

    def block_cs(self, compressed: bool, m: int, overlap: bool, N: int) -> torch.Tensor:
        """The rope rows at the first position of each row's open block [n, rd/2, 2]."""
        return self._once(("block_cs", compressed, m, overlap, N),
                          lambda: self.tables[compressed][self.blocks(m, overlap, N)[1] * m])

    def unclosed(self, m: int, overlap: bool, N: int) -> torch.Tensor:
        """The compressed slots not yet valid [n, N] (`blocks`' valid, negated): the indexer masks its scores with
        it in place, one launch a layer where `torch.where` with a scalar took two (a fill, then the select)."""
        return self._once(("unclosed", m, overlap, N), lambda: ~self.blocks(m, overlap, N)[4])


# the step's independent chains on side CUDA streams (`SideStream`); False: every launch in line, one stream
OVERLAP = True
# the CSA indexer's query on the second side lane, beside q's heads (True), or on the main stream after them: B=1
# 2 % faster a layer on both GPUs (run 86, H100: 0.2156 ms against 0.2196; run 87, H200: 0.1921 against 0.1961),
# B=8 unchanged; its 300-step replay equals the one-stream step's bit for bit (run 87)
QUERY_ON_SIDE = True
# the MoE's combine (routed + shared, rounded to the model dtype) inside mHC post's launch, where one rank holds the
# MoE (`MoE.sums_in_post`): one launch a layer fewer, the same values; off until its A/B and the official-numerics
# gate run on a GPU
COMBINE_IN_POST = False


class SideStream:
    """Side CUDA streams ("lanes") for chains of the step that read only what was made before their `fork`, write
    only what nothing else reads or writes until the join (their own outputs, a compressor's own state), and whose
    outputs the main stream reads only after the join. In a captured graph they become parallel branches: a chain
    of small, latency-bound launches runs while the main stream streams weights (at B=1 a layer is about half small
    launches). No value changes: each kernel computes what it computed in line. Two forks on one lane run in order;
    forks on two lanes run at once, so they must not touch each other's outputs either. Forks go inside `window()`,
    which joins at its end.

    Memory: the caller keeps every input of a branch referenced until the join. The caching allocator hands a freed
    block to the next tensor of the stream that made it, so an input freed on the main stream while the branch still
    reads it could be overwritten. A branch's own tensors come from its lane's blocks; the main stream reads them
    only after the join, and a lane allocates again only inside a later `fork`, after waiting on the main stream, so
    a block a lane takes back is never still read. Every use of a lane goes through `fork` for that reason.
    A branch must not issue a collective (tensor parallelism) while the main stream may issue one: the ranks would
    order them differently."""

    def __init__(self, device: torch.device, lanes: int = 2):
        self.device = device
        self.streams = [torch.cuda.Stream(device) for _ in range(lanes)]
        self.forked: set[int] = set()

    def fork(self, fn: Callable, *args, lane: int = 0):
        stream = self.streams[lane]
        stream.wait_stream(torch.cuda.current_stream(self.device))
        self.forked.add(lane)
        with torch.cuda.stream(stream):
            return fn(*args)

    def join(self) -> None:
        # only the lanes forked since the last join: under capture, waiting on a lane the capture never reached
        # waits on work outside the graph, and the capture fails ("operation failed due to a previous error")
        main = torch.cuda.current_stream(self.device)
        for lane in sorted(self.forked):
            main.wait_stream(self.streams[lane])
        self.forked.clear()

    @contextlib.contextmanager
    def window(self):
        """The forks made inside are joined at its end, after an exception too: a lane left forked would make the
        next join, perhaps under the next capture, wait on work outside it."""
        try:
            yield self
        finally:
            self.join()


class InLine:
    """No side stream: a branch runs where it is forked (CPU, the speculative verify, `OVERLAP` off)."""

    def fork(self, fn: Callable, *args, lane: int = 0):
        return fn(*args)

    def window(self):
        return contextlib.nullcontext(self)


IN_LINE = InLine()


def compressor_fold(comp: Compressor, st: CompressorState, n: int, C: torch.Tensor, Z: torch.Tensor, ix: StepIndex,
                    compressed: bool, post) -> None:
    """Fold a token into each row's open block, its projections C, Z [n, coff*D] fp32 (raw values and gate logits,
    `x_products`); write the entry of every block that closes."""
    m, rows = comp.m, ix.rows
    kv_state, gate_state, entries = st.kv_state[:n], st.gate_state[:n], st.entries[:n]
    slot, b, closes, _, _ = ix.blocks(m, comp.overlap, entries.shape[1])
    comp.ring_write(kv_state, gate_state, C, Z, rows, slot)
    c = comp.pool(kv_state, gate_state)                                            # [n, D] fp32, every step
    c = comp.finish(c, ix.block_cs(compressed, m, comp.overlap, entries.shape[1]), post)
    # the masked entry write and (CSA) a closed block becoming "previous", the only rows read again
    comp.close_block(entries, rows, b, closes, c, kv_state, gate_state, m, comp.overlap)


def x_products(attn: Attention, x: torch.Tensor) -> dict:
    """The products of x [n,T,d] that only the stateful part of attention reads: each compressor's C and Z (fp32)
    and the indexer's score weights. Pure functions of x, so computing them ahead of the state writes (or beside
    q and kv's chain, `SideStream`) changes no value."""
    side = {}
    cz = attn.compressor_products(x)
    if attn.indexer is not None:
        side["iC"], side["iZ"] = cz[0]
        side["iw"] = attn.indexer.weights(x)
    if attn.compressor is not None:
        side["C"], side["Z"] = cz[-1]
    return side


def fold_position(attn: Attention, st: LayerState, n: int, side: dict, j: int, ix: StepIndex,
                  compressed: bool) -> None:
    """Position j's token into each compressor's state (`compressor_fold`): the indexer's, then the layer's, the
    reference order. They write only their own state, which nothing else of the step writes."""
    if attn.indexer is not None:
        idx = attn.indexer
        compressor_fold(idx.compressor, st.icomp, n, side["iC"][:, j], side["iZ"][:, j], ix, compressed, idx.rotate)
    if attn.compressor is not None:
        compressor_fold(attn.compressor, st.comp, n, side["C"][:, j], side["Z"][:, j], ix, compressed, attn.nope_fp8)


def attend_position(attn: Attention, st: LayerState, n: int, q: torch.Tensor, kv: torch.Tensor, side: dict, j: int,
                    ix: StepIndex, compressed: bool, gather, folded: bool = False) -> torch.Tensor:
    """Position j of the projected positions (q [n,T,H,D], kv [n,T,D], `x_products` with the indexer's query "iq")
    at its StepIndex ix: its state writes (window, then `fold_position` unless `folded`: already done) and its
    attention over the state as it then is -> o [n,1,H,D] before the output projection. Every operand has the
    one-position step's shape, so each row's values are the one-position step's."""
    def at(t):              # position j's slice, laid out as a one-position step's tensor
        return t[:, j:j + 1].contiguous()
    cs = ix.cs(compressed)                                                           # [n,1,rd/2,2]
    window = st.kv_window[:n]
    slot, win_valid = ix.window(window.shape[1])
    # row r's token into its slot: a scatter along the slots (the rows are 0..n-1), one small launch where
    # index_put_ over (rows, slot) took 4 us (run 69)
    window.scatter_(1, slot.view(-1, 1, 1).expand(-1, 1, window.shape[2]), kv[:, j:j + 1])
    # oldest first, as the official index list (the order of the 64-key blocks of the attention's online softmax);
    # the valid slots of the ordered ring are the same first pos+1 (all once it is full). The core reads the ring in
    # that order where it lies (`Attention.core_ring`), then the compressed keys
    order = ix.window_order(window.shape[1])
    if not folded:
        fold_position(attn, st, n, side, j, ix, compressed)
    comp = comp_valid = sel = None
    if attn.indexer is not None:
        idx = attn.indexer
        ent = st.icomp.entries[:n]
        closed = ix.blocks(idx.compressor.m, idx.compressor.overlap, ent.shape[1])[3]
        scores = idx.scores(None, at(side["iq"]), ent, at(side["iw"]))[:, 0]           # [n, N]
        scores.masked_fill_(ix.unclosed(idx.compressor.m, idx.compressor.overlap, ent.shape[1]), float("-inf"))
        sel = idx.select(scores, min(idx.topk, ent.shape[1]))                          # one launch
        sel_valid = sel < closed[:, None]                                            # padded picks masked
    if attn.compressor is not None:
        comp_m = attn.compressor
        ent = st.comp.entries[:n]
        if sel is None:                                                              # HCA: every closed block
            comp, comp_valid = ent, ix.blocks(comp_m.m, comp_m.overlap, ent.shape[1])[4]
        else:                                                                        # CSA: the fixed-k picks
            comp, comp_valid = gather(ent, sel), sel_valid
    return attn.core_ring(at(q), window, order, win_valid, comp, comp_valid, cs)


def attention_step(attn: Attention, st: LayerState, n: int, x: torch.Tensor, ix: StepIndex, compressed: bool,
                   gather=gather_picks_ref, side: SideStream | InLine = IN_LINE) -> torch.Tensor:
    """x [n,1,d] -> [n,1,d]; the state writes (the window, each compressor's fold: disjoint state, so their order
    is free and the folds run beside q and kv's chain) and attention. `gather`: the CSA gather of the picked entries
    chosen at load (`csa_gather`). `side`: where the chains that read only x, qr and the positions run
    (`SideStream`; in line by default)."""
    return attention_positions(attn, st, n, x, [ix], compressed, gather, side=side)


def attention_positions(attn: Attention, st: LayerState, n: int, x: torch.Tensor, ixs: list[StepIndex],
                        compressed: bool, gather=gather_picks_ref, before=None,
                        side: SideStream | InLine = IN_LINE) -> torch.Tensor:
    """x [n,T,d], the tokens at T consecutive positions of each row (ixs: their StepIndex, one per position) ->
    [n,T,d]: every projection once over the n*T rows (q, kv, the compressors', the indexer's, the output's), the
    state writes and the attention position by position (`attend_position`). T = 1 is the plain step.
    `before(attn, st, j, ix)`, if given, runs before position j's state writes (the speculative verify snapshots
    what they overwrite there).

    `x_products` read only x, and in the plain step (T = 1, no `before`) the compressors' folds read only those and
    the positions (and write only their compressor's state): they run on `side`'s first lane, beside q and kv's
    chain; with `QUERY_ON_SIDE` the indexer's query, which reads only qr, on its second, beside q's heads.
    """
    cs = ixs[0].cs(compressed) if len(ixs) == 1 else torch.cat([ix.cs(compressed) for ix in ixs], 1)  # [n,T,rd/2,2]
    folded = len(ixs) == 1 and before is None
    with side.window():
        if folded:
            _index_folds(attn, st, ixs[0], compressed)
            prods = side.fork(_products_and_folds, attn, st, n, x, ixs[0], compressed)
        else:
            prods = side.fork(x_products, attn, x)
        qr, sq, kva = attn.q_lora(x)
        iq = None
        if attn.indexer is not None:
            args = (qr, cs.unsqueeze(-3), attn.qr_simulated())
            iq = side.fork(attn.indexer.query, *args, lane=1) if QUERY_ON_SIDE else None
        q, kv = attn.q_heads(qr, sq, kva, cs)
        if attn.indexer is not None and iq is None:
            iq = attn.indexer.query(*args)
    if iq is not None:
        prods = {**prods, "iq": iq}
    os = []
    for j, ix in enumerate(ixs):                    # host-known T: a fixed sequence of one-position updates
        if before is not None:
            before(attn, st, j, ix)
        os.append(attend_position(attn, st, n, q, kv, prods, j, ix, compressed, gather, folded))
    return attn.project(os[0] if len(os) == 1 else torch.cat(os, 1))


def _products_and_folds(attn: Attention, st: LayerState, n: int, x: torch.Tensor, ix: StepIndex,
                        compressed: bool) -> dict:
    prods = x_products(attn, x)
    fold_position(attn, st, n, prods, 0, ix, compressed)
    return prods


def _index_folds(attn: Attention, st: LayerState, ix: StepIndex, compressed: bool) -> None:
    """Make the StepIndex tensors the compressors' folds read (`compressor_fold`) on the main stream. The StepIndex
    keeps each for every later layer: made on a lane, its memory would be that lane's, and the main stream's later
    reads would rest on the joins alone, a rule the next change to a join could break without a sign."""
    for comp, cst in ((attn.indexer.compressor if attn.indexer else None, st.icomp), (attn.compressor, st.comp)):
        if comp is not None:
            ix.block_cs(compressed, comp.m, comp.overlap, cst.entries.shape[1])      # makes ix.blocks(...) too


# the small-op kernels (one launch each; the attention core two): slot -> (dsv4_kernels name, reference, name in the
# log note), from the kernel records that name a decode slot (dsv4_kernels/_record.py), in package order
SMALL_KERNELS = {op.decode[0]: (op.name, op.reference, op.decode[1]) for op in KERNEL_OPS.values() if op.decode}


def small_kernels(device: torch.device, use_kernels: bool = True) -> dict:
    """The kernels of the small ops, decided once at load: each key of SMALL_KERNELS ("fp8", "rms", "rope",
    "q_norm_rope", "mhc_pre", "mhc_post", "mhc_head", "mhc_pre_norm", "norm_rope_fp8", "fp8_nope", "pool",
    "ring_write", "close_block", "attend", "attend_ring", "score", "select", "route", "swiglu_fp8", "hadamard_fp4") -> the function, the Triton kernel where the device is
    CUDA and it is usable, else its PyTorch reference."""
    chosen = {key: ref for key, (_, ref, _) in SMALL_KERNELS.items()}
    if use_kernels and torch.device(device).type == "cuda":
        from dsv4_kernels import available, select
        for key, (name, _, _) in SMALL_KERNELS.items():
            if available(name)[0]:
                chosen[key] = select(name, device)
    return chosen


def kernel_experts(device: torch.device, use_kernels: bool = True):
    """The routed-expert compute for `device`, decided once at load: the fused Triton kernel
    (`dsv4_kernels.moe_gemv`) where the device is CUDA and it is usable, else `moe.routed_experts`. The kernel's
    activation simulation uses the one-launch FP8 fake quant where that is usable. Returns (function, note); the
    note says which and why, for the runner's log line."""
    if not use_kernels:
        return routed_experts, "routed experts: PyTorch reference (kernels switched off)"
    if torch.device(device).type != "cuda":
        return routed_experts, "routed experts: PyTorch reference (no CUDA device)"
    from dsv4_kernels import available, select
    ok, why = available("routed_experts")
    if not ok:
        return routed_experts, f"routed experts: PyTorch reference ({why})"
    kernel = select("routed_experts", device)
    sim = functools.partial(act_sim, fp8=small_kernels(device)["fp8"])

    def run(x, idx, wts, w1, w3, w2, limit, act=True):
        # the kernel is weight-only; the stored format's activation simulation runs around its launches
        return kernel(x, idx, wts, w1, w3, w2, limit, act_sim=sim if act else None)
    return run, "routed experts: fused Triton kernel"


def csa_gather(device: torch.device, keys: list[tuple], use_kernels: bool = True):
    """The CSA attention's gather of its picked compressed entries (`ent [n, N, D]`, `sel [n, k]` -> `[n, k, D]`),
    decided once at load: the CuTeDSL kernel (`dsv4_kernels.compiled("gather_picks")`, a copy bit for bit torch's,
    faster on the H100) compiled here for every key (n, N, k, D, dtype) the step will ask for, where CuTeDSL runs;
    else torch's gather. No step compiles. Returns (function, note)."""
    if not use_kernels or torch.device(device).type != "cuda" or not keys:
        return gather_picks_ref, "CSA gather: torch.gather"
    from dsv4_kernels import compiled
    fn = compiled("gather_picks", device, prepare={"keys": keys})   # CuTeDSL where it runs, else torch's gather
    if getattr(fn, "compiled", None) is None:
        return fn, "CSA gather: torch.gather (CuTeDSL cannot run here)"
    return fn, "CSA gather: CuTeDSL"


@dataclass(frozen=True)
class KernelTable:
    """The functions behind the modules' kernel slots, decided once at load (`decode_kernels`): slot -> function.
    The slots: each key of SMALL_KERNELS, "gemv" (the stored-format GEMV, or None: the dense product), "dense"
    (the other projections and the indexer's Hadamard product, `(x, W) -> x @ W^T`), "grouped" (the attention
    output's grouped product), "f32" (the fp32 products of mHC and the router), "sinkhorn" and "experts" (the
    routed-expert compute). Each module class takes its own slots in its `use_kernels(table)`;
    `Transformer.use_kernels(table)` gives the table to every module."""

    fns: Mapping[str, Callable | None] = field(repr=False)
    cuda: bool              # the CUDA kernels, chosen for a CUDA device with kernels on (the CSA gather follows)
    note: str               # which ran and why, for the runner's log line
    rowwise: bool = False   # asked for row-invariant products (decode_kernels(rowwise=True)): the batched verify

    def __getitem__(self, slot: str) -> Callable | None:
        return self.fns[slot]


def decode_kernels(device: torch.device, use_kernels: bool = True, rowwise: bool = False) -> KernelTable:
    """The decode's kernel table for `device`, decided once at load: the quantised and fp32 projections through the
    stored-format GEMV (`dsv4_kernels.moe_gemv.weight_gemv`: FP8 and FP4 weights read as stored, no dequantised
    copy per step), the fp32 products of mHC and the router through the fp32 GEMV (`f32_linear`), the one-launch
    Sinkhorn, the routed-expert compute (`kernel_experts`: the reference dispatch and the graph-safe step both run
    it) and the small ops (`small_kernels`: fake quants, RMSNorm, RoPE, mHC mixes, compressor pooling, the indexer's
    scores and top-k, the attention core), on CUDA; the PyTorch references elsewhere or when kernels are off.
    Building the table changes no model: `Transformer.use_kernels(table)` puts it on one.

    `rowwise`: every product slot (the GEMV, the dense and grouped products, the fp32 mixes and router, the PyTorch
    routed experts) as rowwise.py's row-invariant products, each row's bits independent of the row count: what the
    speculative step's batched verify needs to equal the plain step (speculative.py). On CUDA those call the
    project's GEMV kernels in row-invariant ways (rowwise.py says which, and why from their code; the CUDA tests of
    the batched verify in tests/dsv4_model/test_speculative.py and benchmarks/row_invariance.py check it there)."""
    on = use_kernels and torch.device(device).type == "cuda"
    experts, experts_note = kernel_experts(device, use_kernels)
    gemv, sink, f32, f32_note = None, sinkhorn_ref, f32_linear_ref, "PyTorch"
    small = chosen = small_kernels(device, use_kernels)      # chosen: before rowwise swaps a reference for its own
    if on:
        from dsv4_kernels import available
        from dsv4_kernels.moe_gemv import cuda_kernel
        from dsv4_kernels.moe_gemv import weight_gemv as gemv
        built, why = cuda_kernel.build()
        if built:
            from dsv4_kernels.moe_gemv import f32_linear as f32
            f32_note = "the fp32 GEMV"
        else:
            f32_note = f"PyTorch ({why})"
        if available("sinkhorn")[0]:
            from dsv4_kernels.sinkhorn import sinkhorn as sink
    dense, grouped = F.linear, grouped_ref
    if rowwise:
        from . import rowwise as rows
        # the fp32 products too (x and the weight widened exactly): rows_linear takes any weight dtype
        dense, grouped, f32 = rows.rows_linear, rows.rows_grouped, rows.rows_f32
        f32_note = "row-invariant (rowwise.py)"
        if on:                              # the project's kernels, called so that their rows are invariant
            cuda = rows.cuda_products()
            dense, grouped, f32, gemv = cuda["dense"], cuda["grouped"], cuda["f32"], cuda["gemv"]
        if experts is routed_experts:       # the fused kernel's pairs are independent; the PyTorch bmm's are not
            experts, experts_note = rows.rows_routed_experts, f"{experts_note}, row-invariant"
        if small["hadamard_fp4"] is hadamard_fp4_ref:    # the Triton rotation sums each row by butterflies already
            small = {**small, "hadamard_fp4": rows.rows_hadamard_fp4}
    fns = MappingProxyType({**small, "gemv": gemv, "dense": dense, "grouped": grouped, "f32": f32, "sinkhorn": sink,
                            "experts": experts})
    rows_note = "row-invariant " if rowwise else ""
    if not on:
        return KernelTable(fns, False, f"{experts_note}; projections: {'row-invariant bmm' if rowwise else 'F.linear'}; "
                                       f"mHC: PyTorch Sinkhorn; "
                                       f"{', '.join(note for *_, note in SMALL_KERNELS.values())}: PyTorch", rowwise)
    fused = [note for key, (_, ref, note) in SMALL_KERNELS.items() if chosen[key] is not ref]
    gemv_note = "the row-invariant GEMV pieces (rowwise.py)" if rowwise else "the stored-format GEMV"
    return KernelTable(fns, True, f"{experts_note}; projections: quantised and fp32 through {gemv_note}, "
                                  f"the rest {rows_note}PyTorch; "
                                  f"mHC and router products: {f32_note}; mHC: "
                                  f"{'one-launch' if sink is not sinkhorn_ref else 'PyTorch'} Sinkhorn; "
                                  f"Triton: {', '.join(fused) or 'none'}", rowwise)


def moe_step(moe, x: torch.Tensor, ids: torch.Tensor, side: SideStream | InLine = IN_LINE) -> torch.Tensor:
    """The reference MoE with a fixed-shape expert dispatch: x [n,1,d], ids [n,1]. The experts run through
    `moe.experts.compute` (`moe.routed_experts`, or the fused kernel set at load on CUDA), as the reference's do.
    The shared expert reads only x: it runs on `side` (`SideStream`), beside the router and the routed experts."""
    shape = x.shape
    x = x.reshape(-1, moe.dim)
    with side.window():
        shared = side.fork(moe.shared_experts, x)
        # each row's picks come in expert order (the gate's route sorts them), so their slot-order sum rounds as the
        # reference's loop over the experts
        weights, idx = moe.gate(x, ids.reshape(-1))
        ex = moe.experts
        # under tensor parallelism a pick of another rank's expert has index ex.n and weight 0 (parallel.ParallelGate):
        # clamped into the stack it adds exactly zero, at a fixed shape (a gate whose picks are all local needs no
        # clamp: one launch a layer fewer)
        if moe.gate.picks_past_experts:
            idx = idx.clamp(max=ex.n - 1)
        y = ex.compute(x, idx, weights, ex.w1.astuple(), ex.w3.astuple(), ex.w2.astuple(), moe.limit, act=ex.act_sim)
    if COMBINE_IN_POST and moe.sums_in_post:
        return Sum(y.view(shape), shared.view(shape))      # mHC post adds them (`HyperConnection.post`)
    return moe.combine(y, shared, x.dtype).view(shape)


def block_step(blk, st: LayerState, X: torch.Tensor, ids: torch.Tensor, ix: StepIndex, n: int,
               gather=gather_picks_ref, side: SideStream | InLine = IN_LINE) -> torch.Tensor:
    """One block (a `model.Block`, or the MTP block) of the step over its state: X [n,1,hc,d] -> X, through the
    block's own composition (`Block.compose`) with the graph-safe sublayers. `gather`: the CSA gather chosen at load
    (`csa_gather`); `side`: the side streams of the sublayers' independent chains (`SideStream`), or in line."""
    def attn(h):
        return attention_step(blk.attn, st, n, h, ix, blk.compressed, gather, side)
    return blk.compose(X, attn, lambda h: moe_step(blk.ffn, h, ids, side))


def block_positions(blk, st: LayerState, X: torch.Tensor, ids: torch.Tensor, ixs: list[StepIndex], n: int,
                    gather=gather_picks_ref, before=None) -> torch.Tensor:
    """`block_step` over T consecutive positions per row: X [n,T,hc,d], ids [n,T] -> X; the projections and the
    MoE once over the n*T rows, the state writes and attention position by position (`attention_positions`)."""
    def attn(h):
        return attention_positions(blk.attn, st, n, h, ixs, blk.compressed, gather, before)
    return blk.compose(X, attn, lambda h: moe_step(blk.ffn, h, ids))


class GraphSafeDecoder(nn.Module):
    """Static decode state for up to `batch` sequences over a loaded `Transformer` (its modules and weights).

    Static I/O: `tokens` [batch] (the token each row feeds next), `pos` [batch] (its position), `logits`
    [batch, V] fp32. `step(n)` runs rows [0, n) (n a bucket size, a host integer) and advances their positions.

    The step runs the model's own modules with the kernels they hold. `kernels=None` (the default) changes nothing
    in the model: its modules run as their holder set them (`Transformer.use_kernels`; the PyTorch references on a
    freshly loaded model). `kernels=True` / `False` asks the decoder to put the decode kernels for the model's
    device / the PyTorch references on the model first (`model.use_kernels(decode_kernels(device, kernels))`): a
    change to the model, which its reference decode then runs too (the same kernels in both decodes, so on one GPU
    they stay equal bit for bit, issue 36). `rowwise=True` (with `kernels` given) asks for the table's row-invariant
    products (`decode_kernels(rowwise=True)`): what the speculative step's batched verify needs.
    """

    def __init__(self, model: Transformer, batch: int = 8, kernels: bool | None = None, rowwise: bool = False):
        super().__init__()
        self.__dict__["model"] = model              # not a submodule: the decoder owns state, not weights
        args = model.args
        self.batch, self.capacity = batch, args.max_seq_len
        dev, dtype = model.embed.weight.device, model.dtype
        if rowwise and kernels is None:
            raise ValueError("GraphSafeDecoder: rowwise=True asks for a kernel table on the model; pass kernels=True "
                             "or False with it (kernels=None leaves the model's modules as their holder set them)")
        if kernels is not None:
            model.use_kernels(decode_kernels(dev, kernels, rowwise))     # asked for: once, never per step
        table = model.kernels
        self.layers = nn.ModuleList(LayerState(layer.attn, batch, self.capacity, dtype) for layer in model.layers)
        # the CSA gather's shapes, read off the state attention_step gathers from: every bucket of rows up to
        # `batch`, each CSA layer's entries [N, D] and its k = min(topk, the indexer's entry count)
        keys = sorted({(b, st.comp.entries.shape[1], min(layer.attn.indexer.topk, st.icomp.entries.shape[1]),
                        st.comp.entries.shape[2], dtype)
                       for layer, st in zip(model.layers, self.layers) if st.icomp is not None
                       for b in range(1, batch + 1)}, key=str)
        self.gather, gather_note = csa_gather(dev, keys, table is not None and table.cuda)
        # the plain step's independent chains on side streams (the multi-position forward keeps one stream)
        self.side = SideStream(dev) if OVERLAP and dev.type == "cuda" else IN_LINE
        if table is None:
            self.kernel_note = (f"no kernel table on the model: its modules' PyTorch references throughout "
                                f"(model.use_kernels or kernels=True gives them the decode kernels); {gather_note}")
        else:
            experts_note, _, rest = table.note.partition("; ")
            self.kernel_note = f"{experts_note}; {gather_note}; {rest}"
        self.register_buffer("tokens", torch.zeros(batch, dtype=torch.long), persistent=False)
        self.register_buffer("pos", torch.zeros(batch, dtype=torch.long), persistent=False)
        self.register_buffer("logits", torch.zeros(batch, args.vocab_size), persistent=False)
        self.register_buffer("rows", torch.arange(batch), persistent=False)
        self.to(dev)

    def reset(self, rows: slice | int | None = None) -> None:
        """Start fresh sequences in `rows` (host-side, outside any graph): state zeroed, position 0."""
        rows = slice(None) if rows is None else slice(rows, rows + 1) if isinstance(rows, int) else rows
        for st in self.layers:
            st.reset_rows(rows)
        self.pos[rows] = 0
        self.tokens[rows] = 0

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """tokens [n], pos [n] (device) -> fp32 logits [n, V]; state rows [0, n) are updated in place."""
        return self.model.logits(self.hidden(tokens, pos))[:, -1]

    def hidden(self, tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """`forward` up to the last block: the final streams [n,1,hc,d] before the hc head (what the MTP block
        reads, speculative.py)."""
        model, n = self.model, tokens.shape[0]
        pos = pos.clamp(max=self.capacity - 1)        # rows past capacity (idle padding) never index out of range
        ids = tokens.view(n, 1)
        X = model.streams(ids)                                                         # [n,1,hc,d]
        ix = self.index(pos, n)
        for i in range(len(self.layers)):
            X = self.block(i, X, ids, ix, n)
        return X

    def hidden_positions(self, tokens: torch.Tensor, pos: torch.Tensor, before=None) -> torch.Tensor:
        """`hidden` over T consecutive positions per row in one forward: tokens [n,T] at positions pos..pos+T-1 ->
        the final streams [n,T,hc,d]; the state takes all T positions (`before(attn, st, j, ix)` runs before each
        layer's writes of position j). Each row's values are T plain steps' where the model's kernel table has
        row-invariant products (`decode_kernels(rowwise=True)`): the speculative step's batched verify."""
        model, (n, T) = self.model, tokens.shape
        ixs = [self.index((pos + j).clamp(max=self.capacity - 1), n) for j in range(T)]
        X = model.streams(tokens)                                                      # [n,T,hc,d]
        for i in range(len(self.layers)):
            X = block_positions(model.layers[i], self.layers[i], X, tokens, ixs, n, self.gather, before)
        return X

    def index(self, pos: torch.Tensor, n: int) -> StepIndex:
        """The step's position-derived tensors (made on first use, shared by every layer)."""
        return StepIndex(pos, self.rows[:n], {False: self.model.rope_main, True: self.model.rope_compress})

    def block(self, i: int, X: torch.Tensor, ids: torch.Tensor, ix: StepIndex, n: int) -> torch.Tensor:
        """Layer i of the step: X [n,1,hc,d] -> X; its state rows [0, n) updated in place (benchmarks/decode.py
        captures it alone for the per-layer profile)."""
        return block_step(self.model.layers[i], self.layers[i], X, ids, ix, n, self.gather, self.side)

    @torch.inference_mode()
    def step(self, n: int | None = None) -> torch.Tensor:
        """One graph-safe step of rows [0, n): reads `tokens`, `pos`; writes `logits`; advances `pos` by one."""
        n = self.batch if n is None else n
        self.logits[:n] = self.forward(self.tokens[:n], self.pos[:n])
        self.pos[:n] += 1
        return self.logits[:n]

    def state(self) -> dict[str, torch.Tensor]:
        """Every tensor the step writes (for snapshots, bitwise replay checks and sharding)."""
        return dict(self.named_buffers())
