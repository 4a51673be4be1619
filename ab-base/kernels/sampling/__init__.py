"""The sampler's kernels: Triton on CUDA (``triton_kernel.py``), the PyTorch references (``reference.py``) elsewhere.

    penalize_scale(logits [n,V] fp32, ring [n,R] int64 (-1 = empty), penalty [n], temperature [n])
        -> (penalised / max(temperature, 1e-6) [n,V], greedy token [n])             one launch, bit for bit

    sample_pick(srt [n,V] fp32 sorted descending, order [n,V] int64, top_k [n] int64, top_p [n] fp32,
                seed_key [n] int64, counter [n] int64) -> token ids [n] int64
        the top-k / top-p / Gumbel-max pick over the row-sorted distribution, two launches
"""
from __future__ import annotations

import torch

from .._record import Kernel, Op
from .reference import penalize_scale_ref, sample_pick_ref  # noqa: F401


def penalize_scale(logits: torch.Tensor, ring: torch.Tensor, penalty: torch.Tensor,
                   temperature: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if logits.dtype != torch.float32:
        raise ValueError(f"penalize_scale: logits must be fp32 (the decoder's logits buffer), found {logits.dtype}")
    if logits.dim() != 2 or ring.dim() != 2 or ring.shape[0] != logits.shape[0]:
        raise ValueError(f"penalize_scale: logits must be [n, V] and ring [n, R], found {tuple(logits.shape)} and "
                         f"{tuple(ring.shape)}")
    for name, t in (("penalty", penalty), ("temperature", temperature)):
        if t.shape != logits.shape[:1]:
            raise ValueError(f"penalize_scale: {name} must be [{logits.shape[0]}], found {tuple(t.shape)}")
    if logits.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import penalize_scale_triton
        return penalize_scale_triton(logits, ring, penalty, temperature)
    return penalize_scale_ref(logits, ring, penalty, temperature)


def sample_pick(srt: torch.Tensor, order: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                seed_key: torch.Tensor, counter: torch.Tensor) -> torch.Tensor:
    if srt.dim() != 2 or order.shape != srt.shape:
        raise ValueError(f"sample_pick: srt and order must be [n, V] alike, found {tuple(srt.shape)} and "
                         f"{tuple(order.shape)}")
    for name, t in (("top_k", top_k), ("top_p", top_p), ("seed_key", seed_key), ("counter", counter)):
        if t.shape != srt.shape[:1]:
            raise ValueError(f"sample_pick: {name} must be [{srt.shape[0]}], found {tuple(t.shape)}")
    if srt.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import sample_pick_triton
        return sample_pick_triton(srt, order, top_k, top_p, seed_key, counter)
    return sample_pick_ref(srt, order, top_k, top_p, seed_key, counter)


KERNEL = Kernel(ops=(
    Op("penalize_scale", penalize_scale, penalize_scale_ref, targets=("penalize_scale",),
       parity=("test_penalize_scale_parity",)),
    Op("sample_pick", sample_pick, sample_pick_ref, targets=("sample_pick",), parity=("test_sample_pick_parity",)),
))
