"""Device sampler for the graph-safe decode: greedy, temperature, top-k, top-p and Gumbel-max, with per-sequence
settings held in device buffers, so one captured graph serves any mix of settings and changing them needs no
re-capture (a Python float used in a captured step is frozen at capture time).

Randomness is a counter-based hash of (seed, step counter, token id) computed with integer ops on the device: no
generator state to register with the graph, the same stream eagerly and on replay, on CPU and on GPU. The
repetition penalty reads a fixed ring of the last `ring` tokens per sequence, not a growing host list.
"""
from __future__ import annotations

import torch
from torch import nn

from dsv4_kernels.sample_pick.reference import mix32, row_argmax, sample_pick_ref, step_key

# shapes: n rows of the bucket, V vocab, R ring size


def apply_repetition_penalty(logits: torch.Tensor, ring: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """Penalise every token in the ring [n, R] (-1 = empty): positive logits / p, negative ones * p. One copy of
    the logits and ring-sized ops: the penalised values are written at the ring's tokens only. An empty slot
    points at token 0 and writes what token 0 gets anyway (penalised if the ring holds it), so writes that meet
    agree and the scatter stays deterministic."""
    at = ring.clamp(min=0)                                                              # [n, R]
    v = logits.gather(1, at)
    p = penalty[:, None]
    pen = torch.where(v > 0, v / p, v * p)
    holds0 = (ring == 0).any(-1, keepdim=True)                                          # [n, 1]
    return logits.clone().scatter_(1, at, torch.where((ring >= 0) | holds0, pen, v))


def sample(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
           key: torch.Tensor, pick=sample_pick_ref) -> torch.Tensor:
    """logits [n,V] fp32 -> tokens [n]. temperature [n] (0 = greedy), top_k [n] (0 = off), top_p [n] (1 = off),
    key [n] the rows' noise keys for this step (`step_key`). Gumbel-max over the scaled logits, sorted once;
    `pick` is the top-k/top-p/Gumbel pick over the sorted rows (`dsv4_kernels.sample_pick`, chosen at load)."""
    greedy = row_argmax(logits)
    srt, order = (logits / temperature.clamp(min=1e-6)[:, None]).sort(dim=-1, descending=True, stable=True)
    return torch.where(temperature > 0, pick(srt, order, top_k, top_p, key), greedy)


def pick_for(device: torch.device, use_kernels: bool = True):
    """The sampling pick for `device`, decided once at load: the two-launch Triton pick where the device is CUDA
    and it is usable, else the PyTorch reference. Returns (function, note)."""
    if not use_kernels:
        return sample_pick_ref, "sampler: PyTorch reference (kernels switched off)"
    if device.type != "cuda":
        return sample_pick_ref, "sampler: PyTorch reference (no CUDA device)"
    from dsv4_kernels import available, select
    ok, why = available("sample_pick")
    if not ok:
        return sample_pick_ref, f"sampler: PyTorch reference ({why})"
    return select("sample_pick", device), "sampler: two-launch Triton pick"


class Sampler(nn.Module):
    """Per-sequence sampling settings and state for up to `batch` rows, all device buffers written in place."""

    def __init__(self, batch: int, vocab: int, ring: int = 64, device=None, kernels: bool = True):
        super().__init__()
        self.vocab = vocab
        self.pick, self.kernel_note = pick_for(torch.device(device or "cpu"), kernels)   # once, never per step
        f = dict(device=device)
        self.register_buffer("temperature", torch.zeros(batch, **f), persistent=False)
        self.register_buffer("top_k", torch.zeros(batch, dtype=torch.long, **f), persistent=False)
        self.register_buffer("top_p", torch.ones(batch, **f), persistent=False)
        self.register_buffer("penalty", torch.ones(batch, **f), persistent=False)
        # each row's seed as the noise uses it: mixed once here, not on every step (uniform_noise mixes per call)
        self.register_buffer("seed_key", mix32(torch.zeros(batch, dtype=torch.long, **f)), persistent=False)
        self.register_buffer("counter", torch.zeros(batch, dtype=torch.long, **f), persistent=False)
        self.register_buffer("ring", torch.full((batch, ring), -1, dtype=torch.long, **f), persistent=False)
        self.register_buffer("ring_pos", torch.zeros(batch, dtype=torch.long, **f), persistent=False)

    def configure(self, row: int, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                  repetition_penalty: float = 1.0, seed: int = 0) -> None:
        """Host-side, outside any graph: set one row's settings and clear its history."""
        if temperature < 0 or top_k < 0 or not 0 < top_p <= 1 or repetition_penalty <= 0:
            raise ValueError(f"sampler: expected temperature >= 0, top_k >= 0, 0 < top_p <= 1, penalty > 0; found "
                             f"{temperature}, {top_k}, {top_p}, {repetition_penalty}")
        self.temperature[row], self.top_k[row], self.top_p[row] = temperature, top_k, top_p
        self.penalty[row], self.seed_key[row] = repetition_penalty, mix32(torch.tensor(seed))
        self.counter[row], self.ring_pos[row] = 0, 0
        self.ring[row] = -1

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        """logits [n,V] -> tokens [n] for rows [0, n); advances each row's random counter."""
        n = logits.shape[0]
        logits = apply_repetition_penalty(logits, self.ring[:n], self.penalty[:n])
        tok = sample(logits, self.temperature[:n], self.top_k[:n], self.top_p[:n],
                     step_key(self.seed_key[:n], self.counter[:n]), self.pick)
        self.counter[:n] += 1
        return tok

    def observe(self, tokens: torch.Tensor) -> None:
        """Push tokens [n] (what each row fed) into its ring of recent tokens."""
        n = tokens.shape[0]
        ring, at = self.ring[:n], self.ring_pos[:n]
        ring.scatter_(1, (at % ring.shape[1])[:, None], tokens[:, None])
        at += 1
