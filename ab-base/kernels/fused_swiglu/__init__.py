"""fused_swiglu: silu(clamp(gate, max=L)) * clamp(up, -L, L) over an expert GEMM output, in one Triton kernel
(``triton_kernel.py``) on CUDA, the PyTorch reference (``reference.py``) elsewhere. The routed-expert kernel
(``moe_gemv``) applies the same SwiGLU in its own epilogue; this one serves unfused GEMM outputs."""
from __future__ import annotations

import torch

from .._record import Kernel, Op
from .reference import fused_swiglu_ref, split_gate_up, swiglu_ref  # noqa: F401


def fused_swiglu(h: torch.Tensor, limit: float | None, layout: str = "split") -> torch.Tensor:
    if h.shape[-1] % 2:
        raise ValueError(f"fused_swiglu: last dim must be even (gate and up), found {h.shape[-1]}")
    if h.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import fused_swiglu_triton
        return fused_swiglu_triton(h, limit, layout)
    return fused_swiglu_ref(h, limit, layout)


KERNEL = Kernel(ops=(
    Op("fused_swiglu", fused_swiglu, fused_swiglu_ref, targets=("fused_swiglu",), parity=("test_fused_swiglu_parity",)),
))
