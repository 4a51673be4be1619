"""Sampling on the device: greedy, temperature, top-k, top-p, Gumbel-max, and a repetition penalty kept in a
fixed [B, vocab] device buffer, so the per-token work never reads back to the host (only the stop check does)."""
from __future__ import annotations

from typing import Callable

import torch


def sample(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
           generator: torch.Generator | None = None) -> torch.Tensor:
    """logits [B, V] fp32 -> token ids [B] (greedy when temperature == 0)."""
    if temperature <= 0:
        return logits.argmax(-1)
    logits = logits / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, -1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        srt, order = logits.sort(-1, descending=True)
        cum = srt.softmax(-1).cumsum(-1)
        drop = cum - srt.softmax(-1) > top_p          # keep the smallest prefix whose mass reaches top_p
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    probs = logits.softmax(-1)
    noise = torch.empty_like(probs).exponential_(1, generator=generator)
    return (probs / noise).argmax(-1)                 # Gumbel-max, as the reference's generate.py


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    if penalty == 1.0:
        return logits
    pen = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, pen, logits)


def generate(model, prompt: list[int], max_new_tokens: int = 32, temperature: float = 1.0, top_k: int = 0,
             top_p: float = 1.0, repetition_penalty: float = 1.0, seed: int = 0, eos_id: int | None = None,
             on_token: Callable[[int], None] | None = None) -> list[int]:
    """Decode token by token from a fresh cache; returns the new tokens (stops at EOS)."""
    if not prompt:
        raise ValueError("generate: the prompt is empty (it needs at least the BOS token)")
    args = model.args
    if len(prompt) + max_new_tokens > args.max_seq_len:
        raise ValueError(f"generate: prompt {len(prompt)} + max_new_tokens {max_new_tokens} exceeds max_seq_len={args.max_seq_len}")
    dev = model.embed.weight.device
    eos = args.eos_token_id if eos_id is None else eos_id
    gen = torch.Generator(device=dev).manual_seed(seed)
    seen = torch.zeros(model.batch, args.vocab_size, dtype=torch.bool, device=dev)
    model.reset()
    ids = torch.tensor(prompt, dtype=torch.long, device=dev)
    seen[:, ids] = True
    logits = None
    for i in range(ids.numel()):
        logits = model.decode_step(ids[i:i + 1].expand(model.batch))
    out: list[int] = []
    for _ in range(max_new_tokens):
        nxt = sample(apply_repetition_penalty(logits, seen, repetition_penalty), temperature, top_k, top_p, gen)
        seen.scatter_(1, nxt[:, None], True)
        tok = int(nxt[0])
        out.append(tok)
        if on_token:
            on_token(tok)
        if tok == eos:
            break
        logits = model.decode_step(nxt)
    return out


def generate_batch(model, prompts: list[list[int]], max_new_tokens: int = 32, temperature: float = 1.0, top_k: int = 0,
                   top_p: float = 1.0, repetition_penalty: float = 1.0, seed: int = 0, eos_id: int | None = None,
                   graphs: bool = True, check: bool = False, on_token: Callable[[int, int], None] | None = None,
                   log: Callable[[str], None] | None = None, kernels: bool = True) -> list[list[int]]:
    """Several prompts at once through the graph-safe runner (CUDA graphs on a GPU, eager otherwise).

    Rows run at their own positions; the device feeds each prompt token by token and then the sampled tokens.
    The host loop only reads the sampled tokens of each step for the stop check and streaming (on_token(row, tok)).
    Returns the new tokens of each prompt (each stops at EOS or max_new_tokens). `kernels`: the decode kernels
    (True) or the PyTorch references (False), put on `model` once, when the decoder is built
    (`GraphSafeDecoder(model, kernels=...)`): the model keeps them, and its reference decode runs them too.
    """
    from .decode import GraphSafeDecoder
    from .runner import BUCKETS, Runner
    from .sampler import Sampler
    if not prompts or any(not p for p in prompts):
        raise ValueError("generate: every prompt needs at least one token (the BOS token)")
    if len(prompts) > BUCKETS[-1]:
        raise ValueError(f"generate: {len(prompts)} prompts exceed the largest batch bucket {BUCKETS[-1]}")
    cap = model.args.max_seq_len
    for p in prompts:
        if len(p) + max_new_tokens > cap:
            raise ValueError(f"generate: prompt {len(p)} + max_new_tokens {max_new_tokens} exceeds max_seq_len={cap}")
    eos = model.args.eos_token_id if eos_id is None else eos_id
    n = len(prompts)
    dec = GraphSafeDecoder(model, batch=Runner.bucket_for(n), kernels=kernels)
    runner = Runner(dec, Sampler(dec.batch, model.args.vocab_size, device=dec.tokens.device, kernels=kernels),
                    graphs=graphs, check=check, log=log)
    for r, p in enumerate(prompts):
        runner.start(r, p, temperature=temperature, top_k=top_k, top_p=top_p, repetition_penalty=repetition_penalty,
                     seed=seed + r)
    pos = [0] * n                                              # host mirror of each row's position
    out: list[list[int]] = [[] for _ in range(n)]
    done = [False] * n
    while not all(done):
        live = max(r for r in range(n) if not done[r]) + 1   # finished rows at the end shrink the bucket
        toks = runner.step(live).tolist()                     # the one read per step: outside the graph
        for r in range(live):
            pos[r] += 1
            if done[r] or pos[r] < len(prompts[r]):
                continue
            out[r].append(toks[r])
            if on_token:
                on_token(r, toks[r])
            done[r] = toks[r] == eos or len(out[r]) >= max_new_tokens
    return out
