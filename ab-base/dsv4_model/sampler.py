"""Device sampler for the graph-safe decode: greedy, temperature, top-k, top-p and Gumbel-max, with per-sequence
settings held in device buffers, so one captured graph serves any mix of settings and changing them needs no
re-capture (a Python float used in a captured step is frozen at capture time).

Randomness is a counter-based hash of (seed, step counter, token id) computed with integer ops on the device: no
generator state to register with the graph, the same stream eagerly and on replay, on CPU and on GPU. The
repetition penalty reads a fixed ring of the last `ring` tokens per sequence, not a growing host list.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from dsv4_kernels.sampling.reference import mix32, penalize_scale_ref, sample_pick_ref

# shapes: n rows of the bucket, V vocab, R ring size


def sample(scaled: torch.Tensor, greedy: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
           top_p: torch.Tensor, seed_key: torch.Tensor, counter: torch.Tensor, pick=sample_pick_ref) -> torch.Tensor:
    """scaled [n,V] = penalised logits / max(temperature, 1e-6) and greedy [n] their rows' first argmax (what
    `penalize_scale` gives) -> tokens [n]. temperature [n] (0 = greedy), top_k [n] (0 = off), top_p [n] (1 = off),
    seed_key [n] and counter [n] the rows' noise streams and steps. Gumbel-max over the scaled logits, sorted once;
    `pick` is the top-k/top-p/Gumbel pick over the sorted rows (`dsv4_kernels.sampling.sample_pick`, chosen at
    load)."""
    srt, order = scaled.sort(dim=-1, descending=True, stable=True)
    return torch.where(temperature > 0, pick(srt, order, top_k, top_p, seed_key, counter), greedy)


def sampler_kernels(device: torch.device, use_kernels: bool = True):
    """The sampler's penalty-and-scale and pick for `device`, decided once at load: the Triton kernels
    (`dsv4_kernels.sampling`) where the device is CUDA and they are usable, else the PyTorch references.
    Returns (penalize_scale, pick, note)."""
    if not use_kernels:
        return penalize_scale_ref, sample_pick_ref, "sampler: PyTorch references (kernels switched off)"
    if device.type != "cuda":
        return penalize_scale_ref, sample_pick_ref, "sampler: PyTorch references (no CUDA device)"
    from dsv4_kernels import available, select
    for name in ("penalize_scale", "sample_pick"):
        ok, why = available(name)
        if not ok:
            return penalize_scale_ref, sample_pick_ref, f"sampler: PyTorch references ({name}: {why})"
    return (select("penalize_scale", device), select("sample_pick", device),
            "sampler: Triton penalty and scaling (one launch) and pick (two)")


class Sampler(nn.Module):
    """Per-sequence sampling settings and state for up to `batch` rows, all device buffers written in place."""

    def __init__(self, batch: int, vocab: int, ring: int = 64, device=None, kernels: bool = True):
        super().__init__()
        self.vocab = vocab
        # once, never per step
        self.penalize_scale, self.pick, self.kernel_note = sampler_kernels(torch.device(device or "cpu"), kernels)
        f = dict(device=device)
        self.register_buffer("temperature", torch.zeros(batch, **f), persistent=False)
        self.register_buffer("top_k", torch.zeros(batch, dtype=torch.long, **f), persistent=False)
        self.register_buffer("top_p", torch.ones(batch, **f), persistent=False)
        self.register_buffer("penalty", torch.ones(batch, **f), persistent=False)
        # each row's seed as the noise uses it: mixed once here, not on every step (the pick mixes in the counter)
        self.register_buffer("seed_key", mix32(torch.zeros(batch, dtype=torch.long, **f)), persistent=False)
        self.register_buffer("counter", torch.zeros(batch, dtype=torch.long, **f), persistent=False)
        self.register_buffer("ring", torch.full((batch, ring), -1, dtype=torch.long, **f), persistent=False)
        self.register_buffer("ring_pos", torch.zeros(batch, dtype=torch.long, **f), persistent=False)

    def configure(self, row: int, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                  repetition_penalty: float = 1.0, seed: int = 0) -> None:
        """Host-side, outside any graph: set one row's settings and clear its history."""
        finite = all(map(math.isfinite, (temperature, top_p, repetition_penalty)))   # NaN fails no `<` test
        if not finite or temperature < 0 or top_k < 0 or not 0 < top_p <= 1 or repetition_penalty <= 0:
            raise ValueError(f"sampler: expected finite temperature >= 0, top_k >= 0, 0 < top_p <= 1, penalty > 0; "
                             f"found {temperature}, {top_k}, {top_p}, {repetition_penalty}")
        self.temperature[row], self.top_k[row], self.top_p[row] = temperature, top_k, top_p
        self.penalty[row], self.seed_key[row] = repetition_penalty, mix32(torch.tensor(seed))
        self.counter[row], self.ring_pos[row] = 0, 0
        self.ring[row] = -1

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        """logits [n,V] -> tokens [n] for rows [0, n); advances each row's random counter."""
        n = logits.shape[0]
        scaled, greedy = self.penalize_scale(logits, self.ring[:n], self.penalty[:n], self.temperature[:n])
        tok = sample(scaled, greedy, self.temperature[:n], self.top_k[:n], self.top_p[:n], self.seed_key[:n],
                     self.counter[:n], self.pick)
        self.counter[:n] += 1
        return tok

    def observe(self, tokens: torch.Tensor) -> None:
        """Push tokens [n] (what each row fed) into its ring of recent tokens."""
        n = tokens.shape[0]
        ring, at = self.ring[:n], self.ring_pos[:n]
        ring.scatter_(1, (at % ring.shape[1])[:, None], tokens[:, None])
        at += 1
