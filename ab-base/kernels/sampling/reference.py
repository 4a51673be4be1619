"""PyTorch references of the sampler's two kernels: the repetition penalty with the temperature scaling
(`penalize_scale_ref`), and the pick over a row-sorted distribution: top-k, top-p and Gumbel-max (`sample_pick_ref`).

Randomness is a counter-based hash of (the row's step key, token id) with integer ops: no generator state, the same
stream eagerly and on replay, on CPU and on GPU, and in the Triton kernel bit for bit (`token_uniform`).

The uniform has 23 bits: (h >> 9 + 0.5) * 2^-23 lies in [2^-24, 1 - 2^-24], exactly representable in fp32, so
-log(u) is never 0. The earlier (h + 0.5) * 2^-32 rounded to 1.0 in fp32 for 128 of the 2^32 hashes: at a vocab of
129,280 about one row-step in 260 held such a token, its exponential was -0.0, and a token outside the top-k/top-p
set scored 0 / -0.0 = NaN, which the argmax takes: a token from anywhere in the vocab.
"""
from __future__ import annotations

import torch

# shapes: n rows, V vocab (sorted by descending logit), C chunks of a row
M32 = 0xFFFFFFFF
GOLDEN = 0x9E3779B9


def mix32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 (C. Wellons): a full-avalanche 32-bit integer hash; int64 holds the 32-bit lanes (products wrap)."""
    x = x & M32
    x = ((x ^ (x >> 16)) * 0x7FEB352D) & M32
    x = ((x ^ (x >> 15)) * 0x846CA68B) & M32
    return x ^ (x >> 16)


def step_key(seed_key: torch.Tensor, counter: torch.Tensor) -> torch.Tensor:
    """[n] -> [n]: the key of one row-step, from the row's mixed seed (`mix32(seed)`) and its step counter."""
    return mix32(seed_key ^ mix32(counter + GOLDEN))


def hash_uniform(h: torch.Tensor) -> torch.Tensor:
    """32-bit hashes (int64) -> fp32 uniforms in [2^-24, 1 - 2^-24], never 0 or 1."""
    return ((h >> 9).float() + 0.5) * 2.0 ** -23


def token_uniform(key: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """key [n], tokens [n, m] (ids < 2^32) -> [n, m] fp32 uniforms: a pure function of (key, token id)."""
    return hash_uniform(mix32(key[:, None] ^ tokens))


def penalize_scale_ref(logits: torch.Tensor, ring: torch.Tensor, penalty: torch.Tensor,
                       temperature: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [n,V] fp32, ring [n,R] recent token ids (-1 = empty), penalty [n], temperature [n] -> (penalised
    logits / max(temperature, 1e-6) [n,V], the greedy token: the first argmax of the penalised logits [n]). Every
    token in the ring: a positive logit / p, a negative one * p. One copy of the logits and ring-sized ops: the
    penalised values are written at the ring's tokens only. An empty slot points at token 0 and writes what token 0
    gets anyway (penalised if the ring holds it), so writes that meet agree and the scatter stays deterministic."""
    at = ring.clamp(min=0)                                                              # [n, R]
    v = logits.gather(1, at)
    p = penalty[:, None]
    pen = torch.where(v > 0, v / p, v * p)
    holds0 = (ring == 0).any(-1, keepdim=True)                                          # [n, 1]
    out = logits.clone().scatter_(1, at, torch.where((ring >= 0) | holds0, pen, v))
    return out / temperature.clamp(min=1e-6)[:, None], row_argmax(out)


def sample_pick_ref(srt: torch.Tensor, order: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                    seed_key: torch.Tensor, counter: torch.Tensor) -> torch.Tensor:
    """srt [n,V] fp32 scaled logits sorted descending (stable), order [n,V] their token ids, top_k [n] (0 = off),
    top_p [n] (1 = off), seed_key [n] each row's mixed seed, counter [n] its step -> the sampled token ids [n]:
    Gumbel-max over the top-k tokens' smallest prefix whose probability reaches top_p, argmax e / Exp(1) with e the
    unnormalised probability and the exponential drawn from token_uniform(step_key(seed_key, counter), id)."""
    V = srt.shape[-1]
    rank = torch.arange(V, device=srt.device)[None, :]
    keep = rank < torch.where(top_k > 0, top_k, V)[:, None]
    # softmax's numerator (the row's max is column 0): the normaliser only enters the top-p test, never the argmax
    e = torch.exp(srt - srt[:, :1]).masked_fill(~keep, 0.0)
    c = row_cumsum(e)
    keep = keep & ((c - e < top_p[:, None] * c[:, -1:]) | (top_p[:, None] >= 1))     # smallest prefix reaching top_p
    expo = -torch.log(token_uniform(step_key(seed_key, counter), order))              # > 0; noise follows the id
    return order.gather(-1, row_argmax(e.masked_fill(~keep, 0.0) / expo)[:, None])[:, 0]


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
