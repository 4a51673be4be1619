"""sample_pick: the sampler's top-k / top-p / Gumbel-max pick over a row-sorted distribution, in two Triton launches
on CUDA (``triton_kernel.py``), the PyTorch reference (``reference.py``) elsewhere.

    sample_pick(srt [n,V] fp32 sorted descending, order [n,V] int64, top_k [n] int64, top_p [n] fp32, key [n] int64)
        -> token ids [n] int64
"""
from __future__ import annotations

import torch

from .._select import available
from .reference import sample_pick_ref  # noqa: F401


def sample_pick(srt: torch.Tensor, order: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                key: torch.Tensor) -> torch.Tensor:
    if srt.dim() != 2 or order.shape != srt.shape:
        raise ValueError(f"sample_pick: srt and order must be [n, V] alike, found {tuple(srt.shape)} and "
                         f"{tuple(order.shape)}")
    for name, t in (("top_k", top_k), ("top_p", top_p), ("key", key)):
        if t.shape != srt.shape[:1]:
            raise ValueError(f"sample_pick: {name} must be [{srt.shape[0]}], found {tuple(t.shape)}")
    if srt.is_cuda and available("sample_pick")[0]:
        from .triton_kernel import sample_pick_triton
        return sample_pick_triton(srt, order, top_k, top_p, key)
    return sample_pick_ref(srt, order, top_k, top_p, key)
