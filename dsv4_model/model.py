"""The DSV4 transformer: embedding -> hc streams -> blocks (mHC around attention and MoE) -> hc head, norm, LM head.

This is the reference path, written for clarity: the readable oracle, and the "before" picture that graphcheck
inventories (a host position read back per step, growing attention extents, host branches on block closes,
per-expert counts read back in the MoE).

The layer interface: what the two decodes (this reference, and the graph-safe step in `decode.py`) share, by
public name. The graph-safe step keeps its own state and control flow and calls these for all of the math:

- `Block.compose(X, attn, ffn)`: the layer, written once. X [B,S,hc,d] -> X: mHC pre -> norm -> attention ->
  mHC post, then mHC pre -> norm -> FFN -> mHC post (as the official reference's Block). `attn` and `ffn` take
  the normed mix h [B,S,d] to y [B,S,d]: the reference gives `Attention.decode`/`prefill` and `MoE.forward`
  (`Block.forward`), the graph-safe step `decode.attention_step` and `decode.moe_step` over its state
  (`decode.block_step`). The MTP block (`mtp.MTPBlock`) is a Block and runs the same composition.
- `HyperConnection.pre_normed(X, norm) -> (h [B,S,d], post [B,S,hc], comb [B,S,hc,hc])` (mHC pre, Sinkhorn and
  the sublayer's RMSNorm as one op) and `.post(y, X, post, comb) -> X` (y a tensor, or an `mhc.Sum` of two
  addends it forms in the same op: the graph-safe MoE's routed and shared outputs); `HyperHead(X) -> x [B,S,d]`.
- `Attention.qkv(x, cs) -> (q [B,T,H,D], kv [B,T,D], qr [B,T,q_lora])` (qr FP8-simulated where `.qr_simulated()`; the graph-safe step calls its two halves, `.q_lora(x)` and `.q_heads(...)`), `.attend(q, K, mask, cs) -> [B,T,d]`,
  `.nope_fp8(kv)`; `Compressor.project(x) -> (C, Z)` (wkv, wgate; one joined product under a CUDA table), `.pool/.finish` and its state writes `.ring_write/.close_block`;
  `Indexer.query/.scores/.select/.rotate`; `MoE.gate(x, ids) -> (weights, idx)`, `.experts.compute(...)`,
  `.shared_experts(x)`, `.combine(y, shared, dtype)` (their sum over the tensor-parallel ranks, rounded).
- `Transformer.streams(ids) -> X [B,S,hc,d]` (the embedding as hc streams), `.layers`, `.mtp`, `.embed`,
  `.rope_main`/`.rope_compress` (rope rows by position), `.logits(X)` (hc head, norm, LM head: fp32 [B,S,V]).
- Kernel slots: a module that calls a swappable op (fake quants, RMSNorm, RoPE and the fused norm + RoPE ops, mHC
  mixes and Sinkhorn, pooling and the compressor's state writes, index scores and top-k, the attention core, the
  GEMVs, the routed experts) holds it as an attribute, the PyTorch reference from its constructor. Its class's
  `use_kernels(table)` sets its own slots from a kernel table (`decode.KernelTable`, built by
  `decode.decode_kernels(device)`); `Transformer.use_kernels(table)` gives the table to every module, and
  `Transformer.kernels` says which table they hold. Only the model's holder attaches one (a graph-safe decoder
  does when built with `kernels=True`/`False`): both decodes then run the same kernels.

A new layer kind: its module here (reference math as public methods with shape comments, its kernel slots in its
own `use_kernels`), its decode state in `decode.py` (a `LayerState` part, reset by row) and its sublayer entry in
`Block.compose` with the two calls the decodes pass it (CONTRIBUTING.md, "A model layer").
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .attention import Attention
from .config import ModelArgs
from .linear import Linear, RMSNorm
from .mhc import HyperConnection, HyperHead
from .moe import MoE
from .rope import rope_table


class Block(nn.Module):
    def __init__(self, args: ModelArgs, layer: int, dtype, batch: int):
        super().__init__()
        self.compressed = args.ratio(layer) > 0
        self.attn_norm = RMSNorm(args.dim, args.norm_eps)
        self.attn = Attention(args, layer, dtype, batch)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)
        self.ffn = MoE(args, layer, dtype)
        hc = (args.hc_mult, args.dim, args.hc_sinkhorn_iters, args.hc_eps, args.norm_eps)
        self.hc_attn = HyperConnection(*hc)
        self.hc_ffn = HyperConnection(*hc)

    def compose(self, X: torch.Tensor, attn: Callable[[torch.Tensor], torch.Tensor],
                ffn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """The layer, written once for both decodes: X [B,S,hc,d] -> X [B,S,hc,d]. Each sublayer reads the mHC mix
        of the streams, normed, and writes back through mHC: `attn`, then `ffn`, each h [B,S,d] -> y [B,S,d] as the
        caller runs them (the reference's own calls, or the graph-safe step's over its state)."""
        h, post, comb = self.hc_attn.pre_normed(X, self.attn_norm)  # h [B,S,d], post [B,S,hc], comb [B,S,hc,hc]
        X = self.hc_attn.post(attn(h), X, post, comb)
        h, post, comb = self.hc_ffn.pre_normed(X, self.ffn_norm)
        return self.hc_ffn.post(ffn(h), X, post, comb)

    def forward(self, X: torch.Tensor, ids: torch.Tensor, cs: torch.Tensor, pos: int | None) -> torch.Tensor:
        """X [B,S,hc,d], ids [B,S]; pos is the decode position, or None for a masked prefill from 0."""
        def attn(h):
            return self.attn.prefill(h, cs) if pos is None else self.attn.decode(h, pos, cs)
        return self.compose(X, attn, lambda h: self.ffn(h, ids))


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs, dtype=torch.bfloat16, batch: int = 1):
        super().__init__()
        self.args, self.dtype, self.batch = args, dtype, batch
        self.policy: dict[str, str] = {}    # component -> computed format, filled by the loader
        self.embed = nn.Embedding(args.vocab_size, args.dim, dtype=dtype)
        self.embed.weight.requires_grad_(False)
        self.layers = nn.ModuleList(Block(args, i, dtype, batch) for i in range(args.n_layers))
        self.hc_head = HyperHead(args.hc_mult, args.dim, args.hc_eps, args.norm_eps)
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.head = Linear(args.dim, args.vocab_size, torch.float32)     # the reference computes logits in fp32
        self.mtp = nn.ModuleList()          # the MTP blocks (mtp.MTPBlock), filled by the loader when the checkpoint has them
        self.kernels = None                 # the kernel table `use_kernels` last gave the modules; None: their references
        self._tables()

    def _tables(self, device=None) -> None:
        cap = self.args.max_seq_len
        self.register_buffer("rope_main", rope_table(self.args, False, cap).to(device), persistent=False)
        self.register_buffer("rope_compress", rope_table(self.args, True, cap).to(device), persistent=False)
        self.register_buffer("pos", torch.zeros((), dtype=torch.long, device=device), persistent=False)

    def init_state(self, device=None) -> None:
        """(Re)allocate tables and decode state on `device` in every module that has them (the loader builds the
        modules on the meta device, so no weight is ever allocated twice)."""
        self._tables(device)
        for m in self.modules():
            if m is not self and hasattr(m, "init_state"):
                m.init_state(device)

    def use_kernels(self, table) -> None:
        """Put a kernel table (`decode.decode_kernels`) on every module: each module class takes its own slots
        (`use_kernels` of Linear, RMSNorm, Attention, Indexer, Compressor, HyperConnection, HyperHead, Gate,
        Experts). A change to this model, made on purpose by its holder: its reference decode and every graph-safe
        decoder over it run `table` from now on (the same kernels in both, so they stay equal bit for bit)."""
        for m in self.modules():
            if m is not self and hasattr(m, "use_kernels"):
                m.use_kernels(table)
        self.kernels = table

    def reset(self) -> None:
        self.pos.zero_()
        for layer in (*self.layers, *self.mtp):
            layer.attn.reset()

    def set_simulation(self, enabled: bool) -> None:
        """Switch every FP8/FP4 activation simulation on or off (they default to on, as in the reference)."""
        for m in self.modules():
            for flag in ("act_sim", "fp8_sim", "fp4_sim"):
                if hasattr(m, flag):
                    setattr(m, flag, enabled)

    def streams(self, ids: torch.Tensor) -> torch.Tensor:
        """The hc residual streams the first block reads: ids [B,S] -> the embedding copied hc times [B,S,hc,d]."""
        return self.embed(ids).unsqueeze(2).repeat(1, 1, self.args.hc_mult, 1)

    def _hidden(self, ids: torch.Tensor, pos: int | None) -> torch.Tensor:
        X = self.streams(ids)                                                           # [B,S,hc,d]
        for layer in self.layers:
            cs = self.rope_compress if layer.compressed else self.rope_main
            X = layer(X, ids, cs, pos)
        return X

    def logits(self, X: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.hc_head(X)).float()).float()

    @torch.inference_mode()
    def decode_step(self, tokens: torch.Tensor) -> torch.Tensor:
        """One decode step at the model's current position. tokens [B] -> fp32 logits [B, vocab]."""
        pos = int(self.pos)
        if pos >= self.args.max_seq_len:
            raise ValueError(f"decode position {pos} exceeds the cache capacity max_seq_len={self.args.max_seq_len}")
        logits = self.logits(self._hidden(tokens.view(-1, 1), pos))[:, -1]
        self.pos += 1
        return logits

    @torch.inference_mode()
    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        """Batched masked forward from position 0: tokens [B,T] -> fp32 logits [B,T,vocab] (no cache written)."""
        if tokens.shape[1] > self.args.max_seq_len:
            raise ValueError(f"prefill of {tokens.shape[1]} tokens exceeds max_seq_len={self.args.max_seq_len}")
        return self.logits(self._hidden(tokens, None))

    @torch.inference_mode()
    def score(self, tokens) -> torch.Tensor:
        """Teacher-forced fp32 logits [T, vocab] of decoding the sequence token by token from a fresh cache."""
        t = torch.as_tensor(tokens, dtype=torch.long, device=self.embed.weight.device).view(-1)
        self.reset()
        return torch.stack([self.decode_step(t[i:i + 1].expand(self.batch)).float()[0] for i in range(t.numel())])
