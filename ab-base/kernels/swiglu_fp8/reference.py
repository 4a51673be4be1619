"""PyTorch reference of the shared expert's step between its up-projections and its down-projection: the SwiGLU
in fp32, rounded to the activations' dtype, then the down-projection's FP8 activation simulation: the calls
`Expert.forward` and `Linear.forward` made (`swiglu(g, u, limit).to(dtype)`, then `act_sim` of the FP8 weight), in
that order, so the reference path is unchanged.

    swiglu_fp8_ref(gate [.., I], up [.., I], limit | None, block) -> [.., I] gate.dtype

limit None: no clamp (the official shared expert); else the routed experts' order, clamp(gate, max=L) and
clamp(up, -L, L) before the SiLU (`dsv4_kernels.fused_swiglu.reference.swiglu_ref`).
"""
from __future__ import annotations

import torch

from ..act_quant.reference import fp8_fake_quant_ref
from ..fused_swiglu.reference import swiglu_ref


def swiglu_fp8_ref(gate: torch.Tensor, up: torch.Tensor, limit: float | None, block: int) -> torch.Tensor:
    return fp8_fake_quant_ref(swiglu_ref(gate, up, limit).to(gate.dtype), block)
