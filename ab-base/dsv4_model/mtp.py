"""The multi-token-prediction (MTP) block of the DSV4 checkpoints (`mtp.{i}.*`; the official `MTPBlock`).

One ordinary block (layer id n_layers + i: its compress_ratios entry, SWA only in the releases; a gate with bias)
whose input mixes the main model's final streams at position j (before its hc head) with the embedding of the
token at j+1: X = e_proj(enorm(embed(t[j+1]))) + h_proj(hnorm(H[j])) (the embedding broadcast over the hc
streams), then the block, then its own hc head and norm into the main model's LM head: logits for t[j+2].
Embedding and LM head are the main model's (the official converter drops any MTP copy). Its attention keeps its
own cache, at the positions j of the streams it reads.
"""
from __future__ import annotations

import torch

from .config import ModelArgs
from .linear import Linear, RMSNorm
from .mhc import HyperHead
from .model import Block


class MTPBlock(Block):
    def __init__(self, args: ModelArgs, layer: int, dtype, batch: int):
        super().__init__(args, layer, dtype, batch)
        d = args.dim
        self.e_proj, self.h_proj = Linear(d, d, dtype), Linear(d, d, dtype)
        self.enorm, self.hnorm, self.norm = (RMSNorm(d, args.norm_eps) for _ in range(3))
        self.hc_head = HyperHead(args.hc_mult, d, args.hc_eps, args.norm_eps)

    def attach(self, model) -> None:
        """The main model whose embedding and LM head this block shares: not a submodule (its weights belong to the
        main model's state dict once), looked up at each call (a tensor-parallel shard replaces those modules)."""
        self.__dict__["main"] = model

    def mix(self, H: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """H [B,S,hc,d] the main model's streams at positions j, ids [B,S] the tokens at j+1 -> the block's input
        streams [B,S,hc,d]."""
        e = self.enorm(self.main.embed(ids))
        return self.e_proj(e).unsqueeze(2) + self.h_proj(self.hnorm(H))

    def logits(self, X: torch.Tensor) -> torch.Tensor:
        """The block's output streams [B,S,hc,d] -> fp32 logits [B,S,V] through its hc head and norm and the main
        model's LM head (fp32, as the reference computes the main logits)."""
        return self.main.head(self.norm(self.hc_head(X)).float()).float()

    def forward(self, H: torch.Tensor, ids: torch.Tensor, cs: torch.Tensor, pos: int | None):
        """H [B,S,hc,d], ids [B,S]; pos: the decode position j (S = 1, the block's own cache), or None for a masked
        prefill from 0. -> (fp32 logits [B,S,V] for the tokens at j+2, the block's output streams [B,S,hc,d], what
        a chained draft feeds back as H)."""
        X = super().forward(self.mix(H, ids), ids, cs, pos)
        return self.logits(X), X
