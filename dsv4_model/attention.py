"""Attention shared by all layer types: low-rank q with per-head RMSNorm, one K=V head with a sliding window
(including the current token), compressed entries (HCA: all closed blocks; CSA: the indexer's top-k), a
per-head sink logit, de-rotation of the output, and the grouped low-rank output projection."""
from __future__ import annotations

import torch
from torch import nn

from dsv4_kernels.attention.reference import attention_ref
from dsv4_kernels.rms_norm.reference import rms_norm_ref

from .compressor import Compressor
from .indexer import Indexer
from .linear import Linear, RMSNorm
from .quant import dequant, fp8_fake_quant
from .rope import rope_tail

# shapes: B batch, T tokens, H heads, D head_dim, W window, n compressed entries, G groups, R o_lora_rank


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
        self.kv_norm = RMSNorm(self.D, args.norm_eps)
        self.wo_a = Linear(self.H * self.D // self.G, self.G * self.R, dtype)  # plain: the loader dequantises it, as the reference
        self.wo_b = Linear(self.G * self.R, args.dim, dtype)
        self.attn_sink = nn.Parameter(torch.zeros(self.H), requires_grad=False)
        self.compressor = Compressor(args.dim, self.D, self.ratio, self.rd, args.norm_eps, dtype,
                                     batch, args.max_seq_len) if self.ratio else None
        self.indexer = Indexer(args, dtype, batch) if self.ratio == 4 else None
        self.fp8_sim = True
        # the per-head q norm, the KV FP8 sim, the RoPE and the attention core (scores, sink softmax, weighted keys):
        # the references, or kernels set once at load on CUDA (decode.kernel_modules)
        self.rms, self.fp8_quant, self.rope, self.core = rms_norm_ref, fp8_fake_quant, rope_tail, attention_ref
        self.init_state()

    def init_state(self, device=None) -> None:
        """(Re)allocate the decode state (the loader builds modules on the meta device, then calls this)."""
        self.register_buffer("kv_window", torch.zeros(self.batch, self.W, self.D, dtype=self.dtype, device=device),
                             persistent=False)

    def reset(self) -> None:
        self.kv_window.zero_()
        for m in (self.compressor, self.indexer.compressor if self.indexer else None):
            if m is not None:
                m.reset()

    def _nope_fp8(self, kv: torch.Tensor) -> torch.Tensor:
        if not self.fp8_sim:
            return kv
        return torch.cat([self.fp8_quant(kv[..., :-self.rd], 64), kv[..., -self.rd:]], -1)

    def _qkv(self, x: torch.Tensor, cs: torch.Tensor):
        """q [B,T,H,D], kv [B,T,D] (rotated at the positions in cs [T, rd/2, 2]), qr [B,T,q_lora]."""
        qr = self.q_norm(self.wq_a(x))
        q = self.rms(self.wq_b(qr).unflatten(-1, (self.H, self.D)), None, self.eps)
        q = self.rope(q, cs.unsqueeze(-3), self.rd)
        kv = self._nope_fp8(self.rope(self.kv_norm(self.wkv(x)), cs, self.rd))
        return q, kv, qr

    def _attend(self, q: torch.Tensor, K: torch.Tensor, mask: torch.Tensor | None, cs: torch.Tensor) -> torch.Tensor:
        """q [B,T,H,D], K [B,T|1,N,D] (V = K), mask [B|1,T,N] -> projected output [B,T,dim]."""
        o = self.core(q, K, mask, self.attn_sink, self.D ** -0.5)                        # [B,T,H,D] fp32
        o = self.rope(o, cs.unsqueeze(-3), self.rd, inverse=True).to(q.dtype)          # de-rotate by -t
        B, T = o.shape[:2]
        o = o.reshape(B, T, self.G, -1)
        # in the model dtype, as the reference's einsum: no fp32 copy of the 8192x4096 weight per step
        wa = dequant(self.wo_a.qweight, dtype=q.dtype).view(self.G, self.R, -1)
        t = torch.einsum("btgi,gri->btgr", o, wa)
        return self.wo_b(t.flatten(-2))

    # -- decode (reference order: window write, indexer, compressor, attention) -------------------------------
    def decode(self, x: torch.Tensor, pos: int, cs: torch.Tensor) -> torch.Tensor:
        q, kv, qr = self._qkv(x, cs[pos:pos + 1])
        self.kv_window[:, pos % self.W] = kv[:, 0]
        sel = self.indexer.step(x, qr, pos, cs) if self.indexer is not None else None
        if self.compressor is not None:
            self.compressor.step(x, pos, cs, self._nope_fp8)
        parts = [self.kv_window[:, : min(pos + 1, self.W)]]
        n = (pos + 1) // self.ratio if self.ratio else 0
        if n and self.indexer is None:
            parts.append(self.compressor.entries[:, :n])                               # HCA: dense
        elif n:
            ent = self.compressor.entries
            parts.append(torch.gather(ent, 1, sel.unsqueeze(-1).expand(-1, -1, self.D)))  # CSA: top-k
        K = torch.cat(parts, 1).unsqueeze(1)
        return self._attend(q, K, None, cs[pos:pos + 1])

    # -- prefill: the same visibility rules as masks ----------------------------------------------------------
    def prefill(self, x: torch.Tensor, cs: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        cs = cs[:T]
        q, kv, qr = self._qkv(x, cs)
        t = torch.arange(T, device=x.device)
        win = (t[None, :] <= t[:, None]) & (t[None, :] > t[:, None] - self.W)            # [T, T]
        keys, masks = [kv.unsqueeze(1).expand(B, T, T, self.D)], [win.expand(B, T, T)]
        if self.compressor is not None:
            ent = self.compressor.compress_all(x, cs, self._nope_fp8)                    # [B, nb, D]
            nb = ent.shape[1]
            if nb:
                visible = torch.arange(nb, device=x.device)[None, :] < ((t + 1) // self.ratio)[:, None]
                if self.indexer is not None:
                    sel = self.indexer.prefill(x, qr, cs)                                # [B, T, k], -1 = none
                    picked = torch.zeros(B, T, nb + 1, dtype=torch.bool, device=x.device)
                    picked.scatter_(2, torch.where(sel < 0, nb, sel), True)
                    visible = visible & picked[..., :nb]
                keys.append(ent.unsqueeze(1).expand(B, T, nb, self.D))
                masks.append(visible.expand(B, T, nb))
        return self._attend(q, torch.cat(keys, 2), torch.cat(masks, 2), cs)
