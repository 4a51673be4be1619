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

# shapes: n rows of the bucket, V vocab, R ring size
_M32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 (C. Wellons): a full-avalanche 32-bit integer hash; int64 holds the 32-bit lanes (products wrap)."""
    x = x & _M32
    x = ((x ^ (x >> 16)) * 0x7FEB352D) & _M32
    x = ((x ^ (x >> 15)) * 0x846CA68B) & _M32
    return x ^ (x >> 16)


def uniform_noise(seed: torch.Tensor, counter: torch.Tensor, vocab: int) -> torch.Tensor:
    """[n, V] float32 in (0, 1), a pure function of seed [n], counter [n] and the token id."""
    return keyed_noise(_mix32(seed), counter, vocab)


def keyed_noise(seed_key: torch.Tensor, counter: torch.Tensor, vocab: int) -> torch.Tensor:
    """uniform_noise with the seed already mixed (`_mix32(seed)`, once per sequence instead of every step)."""
    key = _mix32(seed_key ^ _mix32(counter + 0x9E3779B9))                               # [n]
    h = _mix32(key[:, None] ^ torch.arange(vocab, device=seed_key.device)[None, :])
    return ((h.double() + 0.5) * 2.0 ** -32).float()


def apply_repetition_penalty(logits: torch.Tensor, ring: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """Penalise every token in the ring [n, R] (-1 = empty): positive logits / p, negative ones * p."""
    n, V = logits.shape
    seen = torch.zeros(n, V + 1, dtype=torch.bool, device=logits.device)
    seen.scatter_(1, torch.where(ring < 0, V, ring), True)                              # empty slots hit column V
    p = penalty[:, None]
    pen = torch.where(logits > 0, logits / p, logits * p)
    return torch.where(seen[:, :V], pen, logits)


def row_cumsum(x: torch.Tensor, chunk: int = 128) -> torch.Tensor:
    """x [n, V] -> its inclusive cumulative sum along V, in two levels (within chunks of `chunk`, then over the
    chunks' totals). ATen scans a row's innermost dimension in one block: on the H200 one cumsum over 8 x 129,280
    fp32 took 0.17 ms of a 4.4 ms Flash step (BENCHMARKS, run 11); as 8,080 rows of 128 it spreads over the GPU."""
    n, V = x.shape
    pad = -V % chunk
    c = (torch.nn.functional.pad(x, (0, pad)) if pad else x).view(n, -1, chunk).cumsum(-1)     # [n, V/chunk, chunk]
    tot = c[..., -1]
    return (c + (tot.cumsum(-1) - tot)[..., None]).view(n, -1)[:, :V]


def row_argmax(x: torch.Tensor, chunk: int = 128) -> torch.Tensor:
    """x [n, V] -> the index of each row's first largest value [n], as x.argmax(-1) (NaN counts as largest), in
    two levels for long rows: the max of each chunk of `chunk`, then the first chunk holding the row's max. ATen
    reduces one row with few blocks: on the H200 an argmax over one 129,280-wide row took 27 us (BENCHMARKS,
    2026-12-04 run 3), two per sampler step. Rows shorter than 16 chunks stay one ATen argmax."""
    n, V = x.shape
    if V < 16 * chunk:
        return x.argmax(-1)
    pad = -V % chunk
    if pad:   # a pad of the row's own first value never comes before it, so it cannot win a tie
        x = torch.cat([x, x[:, :1].expand(n, pad)], 1)
    val, at = x.view(n, -1, chunk).max(-1)                                            # [n, V/chunk] each
    j = val.argmax(-1, keepdim=True)                                                   # first chunk with the max
    return (at.gather(-1, j) + j * chunk)[:, 0]


def sample(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
           noise: torch.Tensor) -> torch.Tensor:
    """logits [n,V] fp32 -> tokens [n]. temperature [n] (0 = greedy), top_k [n] (0 = off), top_p [n] (1 = off),
    noise [n,V] uniform. Gumbel-max: argmax p / Exp(1), the exponential drawn by inverse CDF from the noise."""
    V = logits.shape[-1]
    greedy = row_argmax(logits)
    srt, order = (logits / temperature.clamp(min=1e-6)[:, None]).sort(dim=-1, descending=True, stable=True)
    rank = torch.arange(V, device=logits.device)[None, :]
    keep = rank < torch.where(top_k > 0, top_k, V)[:, None]
    # unnormalised probabilities of the top-k (sorted, so the row's max is column 0): softmax's numerator. The
    # normaliser only enters the top-p test and never the argmax, and a softmax over one 129k row is a single
    # CUDA block (tens of us), where these are a few wide elementwise kernels and one scan
    e = torch.exp(srt - srt[:, :1]).masked_fill(~keep, 0.0)
    c = row_cumsum(e)
    keep = keep & ((c - e < top_p[:, None] * c[:, -1:]) | (top_p[:, None] >= 1))     # smallest prefix reaching top_p
    expo = -torch.log(noise.gather(-1, order))                                         # noise follows the token id
    pick = order.gather(-1, row_argmax(e.masked_fill(~keep, 0.0) / expo)[:, None])[:, 0]
    return torch.where(temperature > 0, pick, greedy)


class Sampler(nn.Module):
    """Per-sequence sampling settings and state for up to `batch` rows, all device buffers written in place."""

    def __init__(self, batch: int, vocab: int, ring: int = 64, device=None):
        super().__init__()
        self.vocab = vocab
        f = dict(device=device)
        self.register_buffer("temperature", torch.zeros(batch, **f), persistent=False)
        self.register_buffer("top_k", torch.zeros(batch, dtype=torch.long, **f), persistent=False)
        self.register_buffer("top_p", torch.ones(batch, **f), persistent=False)
        self.register_buffer("penalty", torch.ones(batch, **f), persistent=False)
        # each row's seed as the noise uses it: mixed once here, not on every step (uniform_noise mixes per call)
        self.register_buffer("seed_key", _mix32(torch.zeros(batch, dtype=torch.long, **f)), persistent=False)
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
        self.penalty[row], self.seed_key[row] = repetition_penalty, _mix32(torch.tensor(seed))
        self.counter[row], self.ring_pos[row] = 0, 0
        self.ring[row] = -1

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        """logits [n,V] -> tokens [n] for rows [0, n); advances each row's random counter."""
        n = logits.shape[0]
        logits = apply_repetition_penalty(logits, self.ring[:n], self.penalty[:n])
        tok = sample(logits, self.temperature[:n], self.top_k[:n], self.top_p[:n],
                     keyed_noise(self.seed_key[:n], self.counter[:n], logits.shape[-1]))
        self.counter[:n] += 1
        return tok

    def observe(self, tokens: torch.Tensor) -> None:
        """Push tokens [n] (what each row fed) into its ring of recent tokens."""
        n = tokens.shape[0]
        ring, at = self.ring[:n], self.ring_pos[:n]
        ring.scatter_(1, (at % ring.shape[1])[:, None], tokens[:, None])
        at += 1
