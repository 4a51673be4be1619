"""PyTorch references of the activation fake-quants (the reference model's QAT simulation), moved here from
`dsv4_model/quant.py` without numerical change; `dsv4_model.quant` imports them from here.

    fp8_fake_quant_ref(x [.., K], block) -> [.., K] x.dtype   e4m3 quant->dequant, one ue8m0 scale per `block`
    fp4_fake_quant_ref(x [.., K], block) -> [.., K] x.dtype   e2m1 quant->dequant, one power-of-two scale per `block`

The scale is 2^ceil(log2(amax / qmax)) with amax clamped below (1e-4 for FP8, 6 * 2^-126 for FP4), as the
official `act_quant(x, block, "ue8m0")` / `fp4_act_quant` do.

On CUDA, torch computes `amax / qmax` (a tensor over a Python scalar) as `amax * fp32(1 / qmax)`; on CPU as a true
division. The two differ by one ulp for some amax, which moves the ceil(log2) only when amax / qmax lies within an
ulp of a power of two. The Triton kernel (`triton_kernel.py`) follows the CUDA form: it is bit-exact with this
reference run on CUDA.
"""
from __future__ import annotations

import torch

FP8_MAX = 448.0
FP4_MAX = 6.0
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])
_E2M1_ON: dict[torch.device, torch.Tensor] = {}


def e2m1_table(device: torch.device) -> torch.Tensor:
    """The code->value table on `device`, copied there once: a per-call `.to(device)` is a pageable host-to-device
    copy (a sync, and a capture failure) on every decode step."""
    t = _E2M1_ON.get(device)
    if t is None:
        t = _E2M1_ON[device] = E2M1.to(device)  # graphcheck: ignore[GC402] -- once per device, during warm-up
    return t


def quantize_e2m1(x: torch.Tensor) -> torch.Tensor:
    """Round float values (already scaled into [-6, 6]) to e2m1 codes: nearest, ties to the even mantissa
    (the hardware cvt the reference's kernels use). Midpoints 0.25, 1.25, 2.5, 5 round down; 0.75, 1.75, 3.5 up."""
    ax = x.abs().clamp(max=FP4_MAX)
    idx = ((ax > 0.25).long() + (ax >= 0.75).long() + (ax > 1.25).long() + (ax >= 1.75).long()
           + (ax > 2.5).long() + (ax >= 3.5).long() + (ax > 5.0).long())
    return (idx | ((x < 0).long() << 3)).to(torch.uint8)


def _pow2_scale(amax: torch.Tensor, qmax: float) -> torch.Tensor:
    return torch.exp2(torch.ceil(torch.log2(amax.clamp(min=1e-4) / qmax)))


def fp8_fake_quant_ref(x: torch.Tensor, block: int) -> torch.Tensor:
    """e4m3 quant->dequant in blocks along the last dim, power-of-two (ue8m0) scales."""
    shape = x.shape
    xf = x.float().reshape(*shape[:-1], shape[-1] // block, block)
    s = _pow2_scale(xf.abs().amax(-1, keepdim=True), FP8_MAX)
    return ((xf / s).to(torch.float8_e4m3fn).float() * s).reshape(shape).to(x.dtype)


def fp4_fake_quant_ref(x: torch.Tensor, block: int = 32) -> torch.Tensor:
    """e2m1 quant->dequant in blocks of 32, scale 2^ceil(log2(amax/6)) (amax >= 6 * 2^-126, as the reference)."""
    shape = x.shape
    xf = x.float().reshape(*shape[:-1], shape[-1] // block, block)
    s = torch.exp2(torch.ceil(torch.log2(xf.abs().amax(-1, keepdim=True).clamp(min=6 * 2.0 ** -126) / FP4_MAX)))
    q = e2m1_table(x.device)[quantize_e2m1(xf / s).long()]
    return (q * s).reshape(shape).to(x.dtype)
