"""Lightning indexer (CSA layers): scores completed compressed blocks for the query and keeps the top-k.

I[t, b] = sum_h w_h * ReLU(q_h . k_b), q and k Hadamard-rotated and FP4-simulated (the QAT-trained path); the
chain in the model dtype as the official release computes it (`index_scores_ref`), the top-k ties to the lower
index in every path (`topk_blocks_ref`).
"""
from __future__ import annotations

import torch
from torch import nn

from dsv4_kernels.hadamard_fp4.reference import hadamard_fp4_ref, hadamard_ref
from dsv4_kernels.indexer.reference import index_scores_ref, topk_blocks_ref

from .compressor import Compressor
from .linear import Linear
from .rope import rope_tail


def hadamard_matrix(n: int) -> torch.Tensor:
    """The +-1 Sylvester matrix; the 1/sqrt(n) goes on after the sums, as the official fast_hadamard_transform
    scales its fp32 butterflies' result."""
    h = torch.ones(1, 1)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


class Indexer(nn.Module):
    def __init__(self, args, dtype, batch: int):
        super().__init__()
        self.Hi, self.Di, self.topk, self.rd = args.index_n_heads, args.index_head_dim, args.index_topk, args.rope_head_dim
        self.wq_b = Linear(args.q_lora_rank, self.Hi * self.Di, dtype)
        self.weights_proj = Linear(args.dim, self.Hi, dtype)
        self.compressor = Compressor(args.dim, self.Di, 4, self.rd, args.norm_eps, dtype, batch, args.max_seq_len)
        self.fp4_sim = True
        # the rotation with its FP4 sim, the RoPE, the scores and their top-k (`select`: ties to the lower index,
        # section 10.10, so every path picks the same blocks): the references, or one-launch kernels (`use_kernels`)
        self.hadamard_fp4, self.rope, self.score, self.select = hadamard_fp4_ref, rope_tail, index_scores_ref, topk_blocks_ref
        self.init_state()

    def use_kernels(self, table) -> None:
        """This module's kernel slots from a kernel table (`decode.KernelTable`)."""
        self.hadamard_fp4, self.rope, self.score, self.select = (table["hadamard_fp4"], table["rope"], table["score"],
                                                                 table["select"])

    def init_state(self, device=None) -> None:
        self.register_buffer("hadamard", hadamard_matrix(self.Di).to(device), persistent=False)

    def rotate(self, t: torch.Tensor) -> torch.Tensor:
        """The Hadamard rotation (fp32 sums, 1/sqrt(Di) after them, back to t's dtype), then the FP4 sim in blocks
        of 32 (`hadamard_fp4`: the reference calls, or one launch)."""
        return self.hadamard_fp4(t, self.hadamard, 32) if self.fp4_sim else hadamard_ref(t, self.hadamard)

    def query(self, qr: torch.Tensor, cs_q: torch.Tensor, simulated: bool = False) -> torch.Tensor:
        """`simulated`: qr carries wq_b's FP8 simulation already (`Attention.qr_simulated`)."""
        q = self.wq_b(qr, simulated=simulated).unflatten(-1, (-1, self.Di))  # [B,T,Hi,Di] (a TP rank's: its heads)
        return self.rotate(self.rope(q, cs_q, self.rd))

    def weights(self, x: torch.Tensor) -> torch.Tensor:
        """x [B,T,d] -> the weight projection [B,T,Hi] in the model dtype; the score applies `w_scale` (an fp32
        product rounded back to that dtype, as the official score chain: index_scores' `scale`)."""
        return self.weights_proj(x)

    @property
    def w_scale(self) -> float:
        return self.Di ** -0.5 * self.Hi ** -0.5

    def scores(self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
        """-> [B,T,n]; w: `weights(x)` when the caller has it already (the graph-safe step projects every position
        at once)."""
        return self.score(q, k, self.weights(x) if w is None else w, self.w_scale)

    def step(self, cz: tuple[torch.Tensor, torch.Tensor], x: torch.Tensor, qr: torch.Tensor, pos: int, cs: torch.Tensor,
             simulated: bool = False) -> torch.Tensor | None:
        """Decode: run the private compressor on its products cz (`Attention.compressor_products`), then top-k over
        the completed blocks; None when there are none."""
        self.compressor.step(*cz, pos, cs, self.rotate)
        n = (pos + 1) // 4
        if n == 0:
            return None
        q = self.query(qr, cs[pos].view(1, 1, 1, -1, 2), simulated)
        scores = self.scores(x, q, self.compressor.entries[:, :n])[:, 0]               # [B, n]
        return self.select(scores, min(self.topk, n))

    def prefill(self, x: torch.Tensor, qr: torch.Tensor, cs: torch.Tensor, simulated: bool = False) -> torch.Tensor | None:
        """Top-k block indices per query [B,T,k]; picks of blocks not yet closed at t are -1."""
        B, T, _ = x.shape
        k = self.compressor.compress_all(x, cs, self.rotate)
        nb = k.shape[1]
        if nb == 0:
            return None
        q = self.query(qr, cs[:T].view(1, T, 1, -1, 2), simulated)
        scores = self.scores(x, q, k)
        t = torch.arange(T, device=x.device)
        visible = torch.arange(nb, device=x.device)[None, :] < ((t + 1) // 4)[:, None]  # [T, nb]
        scores = scores.masked_fill(~visible, float("-inf"))
        idx = self.select(scores, min(self.topk, nb))
        return torch.where(torch.gather(visible.expand(B, T, nb), 2, idx), idx, -1)
