"""Partial interleaved RoPE on the trailing `rope_head_dim` dims. Two tables: main (no YaRN) for SWA-only
layers; compress (theta 160000 + YaRN, no mscale) for everything in CSA/HCA layers. `apply_rope` / `rope_tail` are
the references in `dsv4_kernels.rope` (the modules hold `rope_tail` or its one-launch kernel as `.rope`)."""
from __future__ import annotations

import math

import torch

from dsv4_kernels.rope.reference import apply_rope_ref as apply_rope  # noqa: F401  (beside the kernel)
from dsv4_kernels.rope.reference import rope_tail_ref as rope_tail  # noqa: F401

from .config import ModelArgs


def rope_freqs(rd: int, theta: float, yarn: tuple[float, int, float, float] | None) -> torch.Tensor:
    """The rotation frequencies [rd/2] in fp32, as the official `precompute_freqs_cis` computes them (the same fp32
    operations: the table the release rotates by)."""
    freqs = 1.0 / (theta ** (torch.arange(0, rd, 2, dtype=torch.float32) / rd))
    if yarn is not None and yarn[1] > 0:           # original_seq_len 0 = no YaRN, as the reference
        factor, orig, beta_fast, beta_slow = yarn
        low = math.floor(rd * math.log(orig / (beta_fast * 2 * math.pi)) / (2 * math.log(theta)))
        high = math.ceil(rd * math.log(orig / (beta_slow * 2 * math.pi)) / (2 * math.log(theta)))
        low, high = max(low, 0), min(high, rd - 1)
        if low == high:
            high += 0.001
        smooth = 1 - ((torch.arange(rd // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
        freqs = freqs / factor * (1 - smooth) + freqs * smooth
    return freqs


def rope_table(args: ModelArgs, compressed: bool, length: int) -> torch.Tensor:
    """cos/sin table [length, rd/2, 2] (float32) for positions 0..length-1: fp32 angles and torch.polar, as the
    official table."""
    if compressed:
        f = rope_freqs(args.rope_head_dim, args.compress_rope_theta,
                       (args.rope_factor, args.original_seq_len, args.beta_fast, args.beta_slow))
    else:
        f = rope_freqs(args.rope_head_dim, args.rope_theta, None)
    ang = torch.outer(torch.arange(length, dtype=torch.float32), f)
    return torch.view_as_real(torch.polar(torch.ones_like(ang), ang)).contiguous()
