"""PyTorch reference of the compressor's pooling from its state (`dsv4_model.compressor.Compressor`): the open
block's rows (CSA: the previous block's series a, the current block's series b) and their position bias, gathered
as the model did (`pool_rows_ref`: three cats for CSA, nothing for HCA), then the softmax-weighted reduction
(`compressor_reduce_ref`), so the reference path is unchanged."""
from __future__ import annotations

import torch

from ..compressor_reduce.reference import compressor_reduce_ref


def pool_rows_ref(kv: torch.Tensor, gate: torch.Tensor, ape: torch.Tensor, m: int, overlap: bool):
    """State [.., S, W] and ape [m, W] -> (kv, gate [.., S, D], bias [S, D]): with overlap (CSA: S = 2m, W = 2D) the
    first m rows' first halves and the last m rows' second halves, the bias likewise; without, as they are."""
    if not overlap:
        return kv, gate, ape
    D = ape.shape[-1] // 2
    return (torch.cat([kv[..., :m, :D], kv[..., m:, D:]], -2), torch.cat([gate[..., :m, :D], gate[..., m:, D:]], -2),
            torch.cat([ape[:, :D], ape[:, D:]], 0))


def compressor_pool_ref(kv: torch.Tensor, gate: torch.Tensor, ape: torch.Tensor, m: int, overlap: bool) -> torch.Tensor:
    """kv, gate [N, S, W] fp32 (the rings), ape [m, W] -> the pooled c [N, D] fp32."""
    return compressor_reduce_ref(*pool_rows_ref(kv, gate, ape, m, overlap))
