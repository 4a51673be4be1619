"""KV compressor: CSA (ratio 4, two overlapping series, 8 slots) and HCA (ratio 128, one series).

Per token: C = x Wkv^T, Z = x Wgate^T. A block closes when (p+1) % m == 0 and pools
c_b = sum softmax(Z + ape) * C per feature (ape on the logits only), then RMSNorm, RoPE at p+1-m, and the
caller's post-processing (FP8 sim for attention, Hadamard + FP4 sim for the indexer).
"""
from __future__ import annotations

import torch
from torch import nn

from dsv4_kernels.compressor_reduce.reference import compressor_reduce_ref

from .linear import Linear, RMSNorm
from .rope import rope_tail

# shapes: B batch, T tokens, m ratio, D output width, coff 2 (CSA) or 1 (HCA)


class Compressor(nn.Module):
    def __init__(self, dim: int, width: int, ratio: int, rd: int, eps: float, dtype, batch: int, capacity: int):
        super().__init__()
        self.m, self.D, self.rd = ratio, width, rd
        self.overlap = ratio == 4          # the reference hard-codes the overlap for ratio 4
        coff = 2 if self.overlap else 1
        # The reference declares these fp32 ("compression need fp32"): fp32 weights, fp32 activations.
        self.wkv = Linear(dim, coff * width, torch.float32)
        self.wgate = Linear(dim, coff * width, torch.float32)
        self.ape = nn.Parameter(torch.zeros(ratio, coff * width), requires_grad=False)
        self.norm = RMSNorm(width, eps)
        self.rope = rope_tail              # or its one-launch kernel (`use_kernels`)
        self.reduce = compressor_reduce_ref   # the pooling: likewise
        self.dtype, self.batch, self.capacity, self.coff = dtype, batch, capacity, coff
        self.init_state()

    def use_kernels(self, table) -> None:
        """This module's kernel slots from a kernel table (`decode.KernelTable`)."""
        self.rope, self.reduce = table["rope"], table["reduce"]

    def init_state(self, device=None) -> None:
        slots, w = (2 * self.m if self.overlap else self.m), self.coff * self.D
        # decode state: rows [0, m) the previous block (CSA only), [m, 2m) the current one; raw C and Z in fp32
        self.register_buffer("kv_state", torch.zeros(self.batch, slots, w, device=device), persistent=False)
        self.register_buffer("gate_state", torch.full((self.batch, slots, w), float("-inf"), device=device), persistent=False)
        self.register_buffer("entries", torch.zeros(self.batch, self.capacity // self.m + 1, self.D, dtype=self.dtype,
                                                    device=device), persistent=False)

    def reset(self) -> None:
        self.kv_state.zero_()
        self.gate_state.fill_(float("-inf"))
        self.entries.zero_()

    def slot_bias(self) -> torch.Tensor:
        D = self.D
        if self.overlap:  # previous block's series a (first half), current block's series b (second half)
            return torch.cat([self.ape[:, :D], self.ape[:, D:]], 0)
        return self.ape

    def pool_rows(self, kv: torch.Tensor, gate: torch.Tensor):
        """[.., 2m, 2D] state -> the 8 pooled rows [.., 2m, D] (CSA); HCA rows as they are."""
        if not self.overlap:
            return kv, gate
        m, D = self.m, self.D
        return (torch.cat([kv[..., :m, :D], kv[..., m:, D:]], -2), torch.cat([gate[..., :m, :D], gate[..., m:, D:]], -2))

    def finish(self, c: torch.Tensor, cs_start: torch.Tensor, post) -> torch.Tensor:
        """Pooled c [.., D] -> the entry: RMSNorm, RoPE by the rows cs_start of the table at each block's first
        position (cs[block_start]), then `post`."""
        c = self.norm(c.to(self.entries.dtype))
        c = self.rope(c, cs_start, self.rd)
        return post(c)

    def step(self, x: torch.Tensor, pos: int, cs: torch.Tensor, post) -> None:
        """Decode: fold token `pos` into the partial block; emit an entry when the block closes."""
        m = self.m
        C = self.wkv(x.float())[:, 0]
        Z = self.wgate(x.float())[:, 0]
        slot = (m if self.overlap else 0) + pos % m
        self.kv_state[:, slot] = C
        self.gate_state[:, slot] = Z
        if (pos + 1) % m:
            return
        kv, gate = self.pool_rows(self.kv_state, self.gate_state)
        c = self.reduce(kv, gate, self.slot_bias())                             # [B, D] fp32
        b = pos // m
        self.entries[:, b] = self.finish(c, cs[b * m], post)
        if self.overlap:  # the closed block becomes "previous"
            self.kv_state[:, :m] = self.kv_state[:, m:]
            self.gate_state[:, :m] = self.gate_state[:, m:]

    def compress_all(self, x: torch.Tensor, cs: torch.Tensor, post) -> torch.Tensor:
        """Prefill: entries of every complete block of x [B,T,d] -> [B, T // m, D]."""
        B, T, _ = x.shape
        m, D = self.m, self.D
        nb = T // m
        if nb == 0:
            return x.new_zeros(B, 0, D)
        C = self.wkv(x[:, : nb * m].float()).view(B, nb, m, -1)
        Z = self.wgate(x[:, : nb * m].float()).view(B, nb, m, -1)
        if self.overlap:
            prevC = torch.cat([C.new_zeros(B, 1, m, 2 * D), C[:, :-1]], 1)
            prevZ = torch.cat([Z.new_full((B, 1, m, 2 * D), float("-inf")), Z[:, :-1]], 1)
            C, Z = torch.cat([prevC, C], 2), torch.cat([prevZ, Z], 2)
        kv, gate = self.pool_rows(C, Z)
        c = self.reduce(kv.flatten(0, 1), gate.flatten(0, 1), self.slot_bias()).view(B, nb, D)
        starts = torch.arange(nb, device=x.device) * m
        return self.finish(c, cs[starts], post)
