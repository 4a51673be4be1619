"""PyTorch reference of the fused SwiGLU over an expert GEMM output: silu(clamp(gate, max=L)) * clamp(up, -L, L).

The raw gate is clamped *before* SiLU (clamping silu(gate) instead is the known wrong order). fp32 math.
Layouts: "split" = [gate | up] halves of the last dim; "interleaved" = gate at even, up at odd columns.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def split_gate_up(h: torch.Tensor, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    if layout == "split":
        return h.chunk(2, dim=-1)
    if layout == "interleaved":
        return h[..., 0::2], h[..., 1::2]
    raise ValueError(f"fused_swiglu: layout must be 'split' or 'interleaved', found {layout!r}")


def swiglu_ref(gate: torch.Tensor, up: torch.Tensor, limit: float | None) -> torch.Tensor:
    """limit None: no clamp (the official shared expert)."""
    g, u = gate.float(), up.float()
    if limit is not None:
        g, u = g.clamp(max=limit), u.clamp(-limit, limit)
    return F.silu(g) * u


def fused_swiglu_ref(h: torch.Tensor, limit: float | None, layout: str = "split") -> torch.Tensor:
    g, u = split_gate_up(h, layout)
    return swiglu_ref(g, u, limit).to(h.dtype)
