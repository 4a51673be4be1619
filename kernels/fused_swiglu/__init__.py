"""fused_swiglu: CuTeDSL kernel with the PyTorch reference beside it."""
from __future__ import annotations

import torch

from .._select import use_kernel
from .reference import fused_swiglu_ref, swiglu_ref, split_gate_up  # noqa: F401


def fused_swiglu(h: torch.Tensor, limit: float, layout: str = "split") -> torch.Tensor:
    if h.shape[-1] % 2:
        raise ValueError(f"fused_swiglu: last dim must be even (gate and up), found {h.shape[-1]}")
    if use_kernel("fused_swiglu", h) and h.dtype == torch.bfloat16:
        from .cute_kernel import fused_swiglu_cute
        return fused_swiglu_cute(h, limit, layout)
    return fused_swiglu_ref(h, limit, layout)
