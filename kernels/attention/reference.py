"""PyTorch reference of the attention core (`dsv4_model.attention.Attention.attend` before the de-rotation), with the
official release's numerics: DeepSeek's `inference/kernel.py` `sparse_attn_kernel` (lines 276-352 at the commit the
oracle cites) runs an online softmax over blocks of 64 gathered keys, in the given key order: per block the scores
q . k (fp32 accumulation of the bf16 inputs) times the scale, the running max over the blocks so far, P = exp(s - max)
in fp32, the row sum from that unrounded P, then P rounded to the keys' dtype (bf16) before P . V; the sink's
exp(sink - max) joins the row sum only after the last block. In fp32 (the debugging dtype) the rounding is a no-op.
Masked keys take no mass and no value; so do the -1 pads of the official index list, so the caller lays the keys
out as the official list does (window first, padded to its W slots, then the compressed picks)."""
from __future__ import annotations

import torch

BLOCK = 64         # official kernel.py: `block = 64` keys per step of the online softmax


def attention_ref(q: torch.Tensor, K: torch.Tensor, mask: torch.Tensor | None, sink: torch.Tensor,
                  scale: float) -> torch.Tensor:
    """q [B,T,H,D], K [B,T|1,N,D] (V = K), mask [B|1,T,N] bool or None, sink [H] -> o [B,T,H,D] fp32 (the caller
    rounds it to the model dtype, as the official kernel stores it)."""
    B, T, H, D = q.shape
    N = K.shape[2]
    # every block a full 64 keys (the official list pads with masked -1): the same product shapes at every length, so a
    # GPU takes the same GEMM for a block whether the caller passed n keys or a fixed capacity with the rest masked
    # (the graph-safe decode); a block with no valid key then adds exactly nothing (alpha 1, P 0)
    if mask is None:
        mask = torch.ones(1, T, N, dtype=torch.bool, device=K.device)
    pad = -N % BLOCK
    if pad:
        K = torch.nn.functional.pad(K, (0, 0, 0, pad))
        mask = torch.nn.functional.pad(mask, (0, pad), value=False)
        N += pad
    qf = q.float()
    m = torch.full((B, T, H), float("-inf"), device=q.device)
    l = torch.zeros(B, T, H, device=q.device)
    acc = torch.zeros(B, T, H, D, device=q.device)
    for j in range(0, N, BLOCK):                       # host-known N: a fixed op sequence per shape
        k = K[:, :, j:j + BLOCK]
        s = torch.einsum("bthd,btnd->bthn", qf, k.float()) * scale
        s = s.masked_fill(~mask[:, :, j:j + BLOCK].unsqueeze(-2), float("-inf"))
        m_new = torch.maximum(m, s.amax(-1))
        # a row with no valid key yet keeps max -inf: exp(-inf - -inf) would be NaN where official reads a 0
        m_use = torch.where(m_new == float("-inf"), 0.0, m_new)
        alpha = torch.exp(m - m_use)
        p = torch.exp(s - m_use.unsqueeze(-1))
        l = l * alpha + p.sum(-1)
        acc = acc * alpha.unsqueeze(-1) + torch.einsum("bthn,btnd->bthd", p.to(K.dtype).float(), k.float())
        m = m_new
    m_use = torch.where(m == float("-inf"), 0.0, m)
    l = l + torch.exp(sink.float().view(1, 1, -1) - m_use)
    return acc / l.unsqueeze(-1)


def attention_ring_ref(q: torch.Tensor, window: torch.Tensor, order: torch.Tensor, win_valid: torch.Tensor,
                       comp: torch.Tensor | None, comp_valid: torch.Tensor | None, sink: torch.Tensor,
                       scale: float, core=attention_ref) -> torch.Tensor:
    """The core over the decode's keys where they lie: the window ring [B,W,D] gathered in order [B,W] (the official
    list's oldest first), masked by win_valid [B,W], then comp [B,M,D] masked by comp_valid [B,M] (or neither),
    q [B,1,H,D] -> o [B,1,H,D] rounded to the keys' dtype (as the official kernel stores it). `core`: the one-list
    core run on the gathered list (`attention_ref`, or the kernel: the chain the ring kernel replaced)."""
    keys = [torch.gather(window, 1, order.unsqueeze(-1).expand(-1, -1, window.shape[-1]))]
    masks = [win_valid]
    if comp is not None:
        keys.append(comp)
        masks.append(comp_valid)
    K, mask = torch.cat(keys, 1).unsqueeze(1), torch.cat(masks, 1).unsqueeze(1)
    return core(q, K, mask, sink, scale).to(window.dtype)


def ring_of(keys: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """The window ring [B,W,D] whose slot order[b, i] holds keys[b, i] ([B,W,D]): what `attention_ring_ref` gathers
    back into the list `keys` (order a permutation of the slots in each row)."""
    return torch.empty_like(keys).scatter_(1, order.unsqueeze(-1).expand(-1, -1, keys.shape[-1]), keys)
