"""PyTorch reference of the compressor's softmax-weighted reduction (the CPU path and the parity oracle).

out[n, d] = sum_s softmax_s(gate[n, s, d] + bias[s, d]) * kv[n, s, d]   -- fp32, per feature.
The position bias goes on the softmax logits only, never on the KV content.
"""
from __future__ import annotations

import torch


def compressor_reduce_ref(kv: torch.Tensor, gate: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    w = torch.softmax(gate.float() + bias.float(), dim=-2)
    return (w * kv.float()).sum(-2)
