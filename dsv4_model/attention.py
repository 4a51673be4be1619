"""Attention shared by all layer types: low-rank q with per-head RMSNorm, one K=V head with a sliding window
(including the current token), compressed entries (HCA: all closed blocks; CSA: the indexer's top-k), a
per-head sink logit, de-rotation of the output, and the grouped low-rank output projection.

Numerics are the official release's (DeepSeek `inference/model.py` Attention.forward, `inference/kernel.py`
sparse_attn): the per-head q norm in the model dtype's own arithmetic (`head_rms_ref`, with q's RoPE
`head_norm_rope_ref`); the core's online softmax over blocks of 64 keys laid out as the official index list (the window oldest first, padded with masked slots to
its W entries, then the compressed picks in their order), P rounded to the model dtype before P . V; the core's
output rounded to the model dtype before the inverse RoPE, and again after it."""
from __future__ import annotations

import torch
from torch import nn

from dsv4_kernels.attention.reference import attention_ref, attention_ring_ref
from dsv4_kernels.head_norm_rope.reference import head_norm_rope_ref
from dsv4_kernels.moe_gemv.reference import f32_linear_ref
from dsv4_kernels.norm_rope_fp8.reference import fp8_nope_ref, norm_fp8_ref, norm_rope_fp8_ref

from .compressor import Compressor, join_projections, joins, still_joined
from .indexer import Indexer
from .linear import Joined, Linear, RMSNorm, common_block, shared_sim
from .quant import dequant
from .rope import rope_tail

# shapes: B batch, T tokens, H heads, D head_dim, W window, n compressed entries, G groups, R o_lora_rank

# q_norm and the FP8 sim qr's projections take as one op (`norm_fp8`: one launch under a CUDA table, built to give
# the two kernels' bits), where False runs them as two. Off until its CUDA parity test and a same-call A/B on a GPU
# have run (`bash benchmarks/h200.sh overlap` with OVERLAP_SPECS naming it): none was lent since it was written
NORM_FP8 = False


def grouped_ref(o: torch.Tensor, wa: torch.Tensor) -> torch.Tensor:
    """o [B,T,G,I] with wa [G,R,I] -> [B,T,G,R]: the reference's einsum."""
    return torch.einsum("btgi,gri->btgr", o, wa)


class Attention(nn.Module):
    def __init__(self, args, layer: int, dtype, batch: int):
        super().__init__()
        self.H, self.D, self.rd, self.W = args.n_heads, args.head_dim, args.rope_head_dim, args.window_size
        self.G, self.R, self.eps = args.o_groups, args.o_lora_rank, args.norm_eps
        self.ratio = args.ratio(layer)
        self.dtype, self.batch = dtype, batch
        self.wq_a = Linear(args.dim, args.q_lora_rank, dtype)
        self.q_norm = RMSNorm(args.q_lora_rank, args.norm_eps)
        self.wq_b = Linear(args.q_lora_rank, self.H * self.D, dtype)
        self.wkv = Linear(args.dim, self.D, dtype)
        self.x_proj = Joined("wq_a", "wkv")        # x's two projections, one launch under a CUDA table
        self.kv_norm = RMSNorm(self.D, args.norm_eps)
        self.wo_a = Linear(self.H * self.D // self.G, self.G * self.R, dtype)  # plain: the loader dequantises it, as the reference
        self.wo_b = Linear(self.G * self.R, args.dim, dtype)
        self.attn_sink = nn.Parameter(torch.zeros(self.H), requires_grad=False)
        self.compressor = Compressor(args.dim, self.D, self.ratio, self.rd, args.norm_eps, dtype,
                                     batch, args.max_seq_len) if self.ratio else None
        self.indexer = Indexer(args, dtype, batch) if self.ratio == 4 else None
        self.fp8_sim = True
        # the KV FP8 sim of the unrotated dims, the RoPE, the q path's per-head norm (in the model dtype's per-op
        # rounding, official) with its RoPE, the kv path's norm, RoPE and FP8 sim, and the attention core (scores,
        # sink softmax, weighted keys): the references, or kernels (`use_kernels`)
        self.fp8_nope, self.rope, self.core = fp8_nope_ref, rope_tail, attention_ref
        # the core over the keys where the graph-safe decode keeps them (`core_ring`): the reference (gather, concatenate,
        # the core, o in the model dtype), or the kernel that reads them in place
        self.ring_core = attention_ring_ref
        self.q_norm_rope, self.norm_rope = head_norm_rope_ref, norm_rope_fp8_ref
        # q_norm with its projections' FP8 sim (`q_lora`): the reference's two calls, or one launch
        self.norm_fp8 = norm_fp8_ref
        # the output's grouped low-rank product (the reference's einsum, or a row-invariant one: rowwise.py)
        self.grouped = grouped_ref
        # the compressors' fp32 products (`compressor_products`): the f32 slot over their four weights joined into
        # one (a CUDA table joins them: `use_kernels`), else each compressor's own
        self.f32 = f32_linear_ref
        self.register_buffer("joint", None, persistent=False)
        self.init_state()

    def use_kernels(self, table) -> None:
        """This module's kernel slots from a kernel table (`decode.KernelTable`); its projections, norms,
        compressor and indexer take their own."""
        self.fp8_nope, self.rope, self.core = table["fp8_nope"], table["rope"], table["attend"]
        self.ring_core = table["attend_ring"]
        self.q_norm_rope, self.norm_rope = table["q_norm_rope"], table["norm_rope_fp8"]
        self.norm_fp8 = table["norm_fp8"]
        self.grouped = table["grouped"]
        self.f32 = table["f32"]
        self.x_proj.use_kernels(self, table)
        if not joins(table):
            self.joint = None               # the weights stay views of it: each compressor's own products again
        elif self.joint is None and len(self.compressors()) > 1:
            self.joint = join_projections(self.compressors())

    def compressors(self) -> list[Compressor]:
        """The indexer's compressor (CSA), then the layer's (CSA, HCA): the order of `compressor_products`."""
        return [c for c in (self.indexer.compressor if self.indexer else None, self.compressor) if c is not None]

    def compressor_products(self, x: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """x [B,T,dim] -> each compressor's (C, Z) [B,T,coff*D] fp32 (`Compressor.project`), in `compressors` order.
        Joined (a CSA layer under a CUDA table): one fp32 product over the four weights, where the two compressors
        took two (run 69: four, each 5-7.5 us plus a fill of its split counts); both decodes call this, so they take
        the same product."""
        comps = self.compressors()
        if self.joint is not None and not still_joined(self.joint, comps):
            self.joint = None               # a weight replaced since the join: each compressor's own products
        if self.joint is None:
            return [c.project(x) for c in comps]
        y = self.f32(x, self.joint).split([n for c in comps for n in (c.wkv.out_features, c.wgate.out_features)], -1)
        return [(y[2 * i], y[2 * i + 1]) for i in range(len(comps))]

    def init_state(self, device=None) -> None:
        """(Re)allocate the decode state (the loader builds modules on the meta device, then calls this)."""
        self.register_buffer("kv_window", torch.zeros(self.batch, self.W, self.D, dtype=self.dtype, device=device),
                             persistent=False)

    def reset(self) -> None:
        self.kv_window.zero_()
        for m in (self.compressor, self.indexer.compressor if self.indexer else None):
            if m is not None:
                m.reset()

    def nope_fp8(self, kv: torch.Tensor) -> torch.Tensor:
        if not self.fp8_sim:
            return kv
        return self.fp8_nope(kv, self.rd, 64)

    def qr_block(self) -> int | None:
        """The FP8 sim block qr's readers (wq_b, and the indexer's wq_b where there is one) all take, or None."""
        return common_block(self.wq_b, *([self.indexer.wq_b] if self.indexer is not None else []))

    def qr_simulated(self) -> bool:
        """Whether `qkv`'s qr comes with its FP8 simulation: where its readers, wq_b and the indexer's wq_b, take the
        same one, it is made once for all of them, with the norm (pass this as the indexer query's `simulated`)."""
        return self.qr_block() is not None

    def qkv(self, x: torch.Tensor, cs: torch.Tensor):
        """q [B,T,H,D], kv [B,T,D] (rotated at the positions in cs [T, rd/2, 2]), qr [B,T,q_lora] (simulated where
        `qr_simulated`): `q_lora`, then `q_heads`."""
        qr, sq, kva = self.q_lora(x)
        q, kv = self.q_heads(qr, sq, kva, cs)
        return q, kv, qr

    def q_lora(self, x: torch.Tensor):
        """x [B,T,dim] -> qr [B,T,q_lora] (normed; simulated where `qr_simulated`), whether it is, and kv's
        projection before its norm [B,T,D]: what the indexer's query (the graph-safe step forks it here) and
        `q_heads` read."""
        xs, sim = shared_sim(x, self.wq_a, self.wkv)     # x's FP8 simulation once for both of its projections
        qa, kva = self.x_proj(self, xs, sim)             # wq_a's and wkv's products (one, where joined)
        # and qr's once for its readers (wq_b, the indexer's wq_b): the condition `qr_simulated` states for the callers
        block = self.qr_block()
        if block is None:
            return self.q_norm(qa), False, kva
        if NORM_FP8:                                     # q_norm and the sim in one launch under a CUDA table
            return self.norm_fp8(qa, self.q_norm.weight, self.q_norm.eps, block), True, kva
        return self.wq_b.fp8_quant(self.q_norm(qa), block), True, kva

    def q_heads(self, qr: torch.Tensor, sq: bool, kva: torch.Tensor, cs: torch.Tensor):
        """`q_lora`'s outputs -> q [B,T,H,D] and kv [B,T,D], rotated at the positions in cs."""
        q = self.q_norm_rope(self.wq_b(qr, simulated=sq).unflatten(-1, (self.H, self.D)), cs.unsqueeze(-3), self.eps,
                             self.rd)
        # kv_norm, the RoPE and nope_fp8 as one op
        kv = self.norm_rope(kva, self.kv_norm.weight, self.kv_norm.eps, cs, self.rd, None,
                            64 if self.fp8_sim else 0)
        return q, kv

    def attend(self, q: torch.Tensor, K: torch.Tensor, mask: torch.Tensor | None, cs: torch.Tensor) -> torch.Tensor:
        """q [B,T,H,D], K [B,T|1,N,D] (V = K), mask [B|1,T,N] -> projected output [B,T,dim]."""
        return self.project(self.core_out(q, K, mask, cs))

    def core_out(self, q: torch.Tensor, K: torch.Tensor, mask: torch.Tensor | None, cs: torch.Tensor) -> torch.Tensor:
        """`attend` before the output projection: the attention core, de-rotated -> o [B,T,H,D]."""
        # official: the kernel stores o in bf16, the inverse RoPE computes in fp32 and writes back into it: two roundings
        o = self.core(q, K, mask, self.attn_sink, self.D ** -0.5).to(q.dtype)           # [B,T,H,D]
        return self.rope(o, cs.unsqueeze(-3), self.rd, inverse=True).to(q.dtype)       # de-rotate by -t

    def core_ring(self, q: torch.Tensor, window: torch.Tensor, order: torch.Tensor, win_valid: torch.Tensor,
                  comp: torch.Tensor | None, comp_valid: torch.Tensor | None, cs: torch.Tensor) -> torch.Tensor:
        """`core_out` over the keys where the graph-safe decode keeps them: the window ring [B,W,D] read in order
        [B,W] (oldest first) with win_valid [B,W], then comp [B,M,D] with comp_valid [B,M] (or neither); q [B,1,H,D]
        -> o [B,1,H,D]. The same keys, masks and roundings as `core_out` on them concatenated."""
        o = self.ring_core(q, window, order, win_valid, comp, comp_valid, self.attn_sink, self.D ** -0.5)
        return self.rope(o, cs.unsqueeze(-3), self.rd, inverse=True).to(q.dtype)       # de-rotate by -t

    def project(self, o: torch.Tensor) -> torch.Tensor:
        """The grouped low-rank output projection: o [B,T,H,D] -> [B,T,dim]."""
        B, T = o.shape[:2]
        o = o.reshape(B, T, self.G, -1)
        # in the model dtype, as the reference's einsum: no fp32 copy of the 8192x4096 weight per step
        wa = dequant(self.wo_a.qweight, dtype=o.dtype).view(self.G, self.R, -1)
        return self.wo_b(self.grouped(o, wa).flatten(-2))

    # -- decode (reference order: window write, indexer, compressor, attention) -------------------------------
    def decode(self, x: torch.Tensor, pos: int, cs: torch.Tensor) -> torch.Tensor:
        q, kv, qr = self.qkv(x, cs[pos:pos + 1])
        self.kv_window[:, pos % self.W] = kv[:, 0]
        cz = self.compressor_products(x)
        sel = self.indexer.step(cz[0], x, qr, pos, cs, self.qr_simulated()) if self.indexer is not None else None
        if self.compressor is not None:
            self.compressor.step(*cz[-1], pos, cs, self.nope_fp8)
        parts, valid = [self.window_keys(self.kv_window, pos)], [self.window_valid(pos)]
        n = (pos + 1) // self.ratio if self.ratio else 0
        if n and self.indexer is None:
            parts.append(self.compressor.entries[:, :n])                               # HCA: dense
        elif n:
            ent = self.compressor.entries
            parts.append(torch.gather(ent, 1, sel.unsqueeze(-1).expand(-1, -1, self.D)))  # CSA: top-k
        K = torch.cat(parts, 1).unsqueeze(1)
        mask = torch.cat(valid + [torch.ones(1, K.shape[2] - self.W, dtype=torch.bool, device=K.device)], 1)
        return self.attend(q, K, mask.unsqueeze(0), cs[pos:pos + 1])

    def window_keys(self, window: torch.Tensor, pos: int) -> torch.Tensor:
        """The window ring [B, W, D] in the official key order (`get_window_topk_idxs`): oldest first. Until the ring
        fills, slot = position: the identity. (The graph-safe step orders it from device positions:
        decode.StepIndex.window_order.)"""
        ar = torch.arange(self.W, device=window.device)
        return window[:, (ar + (pos + 1)) % self.W] if pos >= self.W - 1 else window

    def window_valid(self, pos: int) -> torch.Tensor:
        """Which of the ordered window keys hold a token [1, W]: the first pos+1 until the ring fills (the official
        list pads with -1 after them), then all."""
        return torch.arange(self.W, device=self.kv_window.device)[None, :] <= pos

    # -- prefill: the same visibility rules as masks ----------------------------------------------------------
    def prefill(self, x: torch.Tensor, cs: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        cs = cs[:T]
        q, kv, qr = self.qkv(x, cs)
        t = torch.arange(T, device=x.device)
        win = (t[None, :] <= t[:, None]) & (t[None, :] > t[:, None] - self.W)            # [T, T]
        keys, masks = [kv.unsqueeze(1).expand(B, T, T, self.D)], [win.expand(B, T, T)]
        if self.compressor is not None:
            ent = self.compressor.compress_all(x, cs, self.nope_fp8)                    # [B, nb, D]
            nb = ent.shape[1]
            if nb:
                visible = torch.arange(nb, device=x.device)[None, :] < ((t + 1) // self.ratio)[:, None]
                if self.indexer is not None:
                    sel = self.indexer.prefill(x, qr, cs, self.qr_simulated())           # [B, T, k], -1 = none
                    picked = torch.zeros(B, T, nb + 1, dtype=torch.bool, device=x.device)
                    picked.scatter_(2, torch.where(sel < 0, nb, sel), True)
                    visible = visible & picked[..., :nb]
                keys.append(ent.unsqueeze(1).expand(B, T, nb, self.D))
                masks.append(visible.expand(B, T, nb))
        return self.attend(q, torch.cat(keys, 2), torch.cat(masks, 2), cs)
