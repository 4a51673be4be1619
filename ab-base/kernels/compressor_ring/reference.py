"""PyTorch references of the graph-safe decode's compressor state writes (`dsv4_model.decode.compressor_fold`): the
ops it ran, so the decode's state is unchanged. Pure copies: no arithmetic.

    ring_write_ref(kv_state [n, S, W], gate_state [n, S, W], C [n, W], Z [n, W], rows [n], slot [n])
        each row's token into its open block's slot (in place)
    close_block_ref(entries [n, N, D], rows [n], b [n], closes [n, 1] bool, c [n, D], kv_state, gate_state, m, overlap)
        c into entry b of each row whose block closes; with overlap (CSA) that row's current block [m, 2m) becomes
        "previous" [0, m) in both states (in place)
"""
from __future__ import annotations

import torch


def ring_write_ref(kv_state: torch.Tensor, gate_state: torch.Tensor, C: torch.Tensor, Z: torch.Tensor,
                   rows: torch.Tensor, slot: torch.Tensor) -> None:
    kv_state.index_put_((rows, slot), C)
    gate_state.index_put_((rows, slot), Z)


def close_block_ref(entries: torch.Tensor, rows: torch.Tensor, b: torch.Tensor, closes: torch.Tensor, c: torch.Tensor,
                    kv_state: torch.Tensor, gate_state: torch.Tensor, m: int, overlap: bool) -> None:
    entries.index_put_((rows, b), torch.where(closes, c, entries[rows, b]))       # masked write
    if overlap:  # a closed block becomes "previous" (only its rows are ever read again)
        closes = closes.unsqueeze(-1)
        for state in (kv_state, gate_state):    # in place (out= the slice it keeps): one kernel, not a where and a copy
            torch.where(closes, state[:, m:], state[:, :m], out=state[:, :m])
