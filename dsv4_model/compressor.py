"""KV compressor: CSA (ratio 4, two overlapping series, 8 slots) and HCA (ratio 128, one series).

Per token: C = x Wkv^T, Z = x Wgate^T. A block closes when (p+1) % m == 0 and pools
c_b = sum softmax(Z + ape) * C per feature (ape on the logits only), then RMSNorm, RoPE at p+1-m, and the
caller's post-processing (FP8 sim for attention, Hadamard + FP4 sim for the indexer).
"""
from __future__ import annotations

import torch
from torch import nn

from dsv4_kernels.compressor_pool.reference import compressor_pool_ref
from dsv4_kernels.compressor_ring.reference import close_block_ref, ring_write_ref
from dsv4_kernels.moe_gemv.reference import f32_linear_ref
from dsv4_kernels.norm_rope_fp8.reference import norm_rope_fp8_ref

from .linear import Linear, RMSNorm, join_weights
from .linear import still_joined as weights_joined
from .quant import QWeight

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
        # the pooling from the rings (`pool`) and an entry's cast, norm and RoPE (`finish`): the references, or
        # one-launch kernels (`use_kernels`)
        self.pool_reduce, self.norm_rope = compressor_pool_ref, norm_rope_fp8_ref
        # the graph-safe step's writes of its per-row state (decode.compressor_fold; the reference path writes its
        # own under host branches): likewise
        self.ring_write, self.close_block = ring_write_ref, close_block_ref
        # the fp32 product over wkv and wgate joined into one weight (`join`): None until a CUDA kernel table asks
        # for it, then [2*coff*D, dim] with the two modules' weights views of its halves (no second copy)
        self.f32 = f32_linear_ref
        self.register_buffer("joint", None, persistent=False)
        self.dtype, self.batch, self.capacity, self.coff = dtype, batch, capacity, coff
        self.init_state()

    def use_kernels(self, table) -> None:
        """This module's kernel slots from a kernel table (`decode.KernelTable`); a CUDA table also joins the two
        projections (`join`)."""
        self.pool_reduce, self.norm_rope = table["pool"], table["norm_rope_fp8"]
        self.ring_write, self.close_block = table["ring_write"], table["close_block"]
        self.f32 = table["f32"]
        if joins(table):
            self.join()
        else:
            self.joint = None               # the weights stay views of it: the two products apart again

    def join(self) -> None:
        """wkv's and wgate's weights as the halves of one tensor, so that `project` reads both in one launch (each was
        a narrow GEMV of its own, 5-7.5 us for 4-8 MB, plus the zeroing of its split counts: run 69). Both decodes
        call `project`, so they keep taking the same product. A CSA layer joins its two compressors' four weights
        (`Attention.use_kernels`, `join_projections`) before this runs; weights in another format stay apart."""
        if self.joint is None:
            join_projections([self])

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [..., dim] in the model dtype -> C, Z [..., coff*D] fp32: the reference's x.float() @ W^T for wkv and
        wgate. Joined (`join`): one fp32 product (the `f32` slot widens x itself: no cast launch either) whose halves
        are C and Z (views, rows of stride 2*coff*D)."""
        if self.joint is not None and not still_joined(self.joint, [self]):
            self.joint = None               # a weight replaced since the join: its own product, not the stale copy
        if self.joint is not None:
            return self.f32(x, self.joint).chunk(2, -1)
        xf = x.float()
        return self.wkv(xf).float(), self.wgate(xf).float()

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

    def pool(self, kv: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """The rings [.., S, W] -> the pooled c [.., D] fp32: the open block's rows (CSA: the previous block's series
        a, the current block's series b; HCA: the rows as they are) softmax-weighted per feature with the position
        bias (ape, on the logits only)."""
        lead = kv.shape[:-2]
        c = self.pool_reduce(kv.reshape(-1, *kv.shape[-2:]), gate.reshape(-1, *gate.shape[-2:]), self.ape, self.m,
                             self.overlap)
        return c.view(*lead, self.D)

    def finish(self, c: torch.Tensor, cs_start: torch.Tensor, post) -> torch.Tensor:
        """Pooled c [.., D] -> the entry: RMSNorm, RoPE by the rows cs_start of the table at each block's first
        position (cs[block_start]), then `post`."""
        return post(self.norm_rope(c, self.norm.weight, self.norm.eps, cs_start, self.rd, self.entries.dtype))

    def step(self, C: torch.Tensor, Z: torch.Tensor, pos: int, cs: torch.Tensor, post) -> None:
        """Decode: fold token `pos`, its products C, Z [B,1,coff*D] (`project`), into the partial block; emit an
        entry when the block closes."""
        m = self.m
        C, Z = C[:, 0], Z[:, 0]
        slot = (m if self.overlap else 0) + pos % m
        self.kv_state[:, slot] = C
        self.gate_state[:, slot] = Z
        if (pos + 1) % m:
            return
        c = self.pool(self.kv_state, self.gate_state)                            # [B, D] fp32
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
        C, Z = (t.reshape(B, nb, m, -1) for t in self.project(x[:, : nb * m]))
        if self.overlap:
            prevC = torch.cat([C.new_zeros(B, 1, m, 2 * D), C[:, :-1]], 1)
            prevZ = torch.cat([Z.new_full((B, 1, m, 2 * D), float("-inf")), Z[:, :-1]], 1)
            C, Z = torch.cat([prevC, C], 2), torch.cat([prevZ, Z], 2)
        c = self.pool(C, Z)                                                     # [B, nb, D]
        starts = torch.arange(nb, device=x.device) * m
        return self.finish(c, cs[starts], post)


def joins(table) -> bool:
    """Whether a kernel table (`decode.KernelTable`) joins the compressors' projections: CUDA kernels with a kernel in
    the f32 slot. Its reference (no CUDA extension) would widen a copy of the whole joined weight every call, where
    each Linear's GEMV reads its weight as stored."""
    return table.cuda and table["f32"] is not f32_linear_ref


def join_projections(comps: list[Compressor]) -> torch.Tensor | None:
    """The compressors' wkv and wgate weights, in that order, as row blocks of one tensor [sum 2*coff*D, dim]
    (`linear.join_weights`): each compressor's `joint` becomes its two blocks and each weight a view of its own (no
    second copy; the state dict unchanged). None, changing nothing, where one of them is not a plain weight of the
    others' dtype (or not loaded)."""
    linears = _linears(comps)
    joint = join_weights(linears) if all(lin.fmt == "plain" for lin in linears) else None
    if joint is None:
        return None
    at = 0
    for c in comps:
        n = c.wkv.out_features + c.wgate.out_features
        c.joint = joint.data[at:at + n]
        at += n
    return joint.data


def still_joined(joint: torch.Tensor, comps: list[Compressor]) -> bool:
    """Whether the compressors' weights are still the views `join_projections` made of `joint`, in order
    (`linear.still_joined`: a weight replaced since is read as it now is, never from the joined copy)."""
    return weights_joined(QWeight("plain", joint), _linears(comps))


def _linears(comps: list[Compressor]) -> list[Linear]:
    return [lin for c in comps for lin in (c.wkv, c.wgate)]
