"""PyTorch reference of the indexer's rotation with its FP4 simulation: the Hadamard product in fp32, the
1/sqrt(D) after the sums (as the official fast_hadamard_transform scales its fp32 butterflies' result), the cast
back to the input's dtype, then the FP4 fake quant in blocks of 32: the calls `Indexer.rotate` made, in that order,
so the reference path is unchanged.

    hadamard_fp4_ref(x [.., D], hadamard [D, D] fp32 (the +-1 Sylvester matrix), block) -> [.., D] x.dtype
"""
from __future__ import annotations

import torch

from ..act_quant.reference import fp4_fake_quant_ref


def hadamard_ref(x: torch.Tensor, hadamard: torch.Tensor) -> torch.Tensor:
    """The rotation alone: ((x.float() @ H) / sqrt(D)) in x.dtype."""
    return ((x.float() @ hadamard) * hadamard.shape[0] ** -0.5).to(x.dtype)


def hadamard_fp4_ref(x: torch.Tensor, hadamard: torch.Tensor, block: int = 32) -> torch.Tensor:
    return fp4_fake_quant_ref(hadamard_ref(x, hadamard), block)
