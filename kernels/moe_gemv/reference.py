"""PyTorch references of the FP4 GEMVs: what CPU runs, and the parity oracle of the Triton kernels.

A weight is a tuple ``(fmt, data, scale, scale2, input_scale)`` (CONTRACTS §2, without importing dsv4_model):
- ``"mxfp4"``: data uint8/int8 [.., N, K/2] (low nibble = element 2j), scale e8m0 bytes [.., N, K/32];
- ``"nvfp4"``: data uint8 [.., N, K/2], scale float8_e4m3fn [.., N, K/16], scale2 fp32 [..] (one per expert);
- ``"plain"``: data [.., N, K] in any float dtype (no scales).
Leading dim E when it is a stack of experts. ``input_scale`` is carried but unused: these GEMVs are
weight-only (W4A16); the activation simulation of a stored format is the caller's (dsv4_model.quant.act_sim).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
FP4_FORMATS = ("mxfp4", "nvfp4")
GROUP = {"mxfp4": 32, "nvfp4": 16}


def check_weight(w, name: str, n: int | None = None, k: int | None = None, stacked: bool = False) -> None:
    """One-line errors naming the culprit before any kernel reads past a buffer."""
    if not (isinstance(w, tuple) and len(w) == 5):
        raise TypeError(f"{name}: expected (fmt, data, scale, scale2, input_scale), found {type(w).__name__}")
    fmt, data, scale, scale2, _ = w
    if fmt not in FP4_FORMATS + ("plain",):
        raise ValueError(f"{name}: format {fmt!r} is not one of mxfp4, nvfp4, plain")
    lead = data.dim() - 2
    if lead != int(stacked):
        raise ValueError(f"{name}: data has shape {tuple(data.shape)}, expected {'[E, N, K/2]' if stacked else '[N, K/2]'}")
    kk = data.shape[-1] * (2 if fmt in FP4_FORMATS else 1)
    if n is not None and data.shape[-2] != n:
        raise ValueError(f"{name}: {data.shape[-2]} output rows, expected {n}")
    if k is not None and kk != k:
        raise ValueError(f"{name}: holds {kk} input features, expected {k}")
    if fmt in FP4_FORMATS:
        g = GROUP[fmt]
        want = (*data.shape[:-1], kk // g)
        if kk % g or scale is None or tuple(scale.shape) != want:
            raise ValueError(f"{name}: {fmt} scale has shape {None if scale is None else tuple(scale.shape)}, "
                             f"expected {want} for data {tuple(data.shape)} (K={kk} must be a multiple of {g})")
        if data.dtype not in (torch.uint8, torch.int8):
            raise TypeError(f"{name}: {fmt} data must be uint8/int8 packed e2m1, found {data.dtype}")
    if fmt == "nvfp4":
        if scale.dtype != torch.float8_e4m3fn:
            raise TypeError(f"{name}: nvfp4 scale must be float8_e4m3fn, found {scale.dtype}")
        if scale2 is None or scale2.numel() != (data.shape[0] if stacked else 1):
            raise ValueError(f"{name}: nvfp4 needs scale2 with one value per {'expert' if stacked else 'matrix'}, "
                             f"found {None if scale2 is None else tuple(scale2.shape)}")


def _e8m0(s: torch.Tensor) -> torch.Tensor:
    if s.dtype == torch.float8_e8m0fnu:
        return s.float()
    return torch.exp2(s.view(torch.uint8).float() - 127)


def dequant(w, index: torch.Tensor | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Weight tuple -> dense [.., N, K]; ``index`` (device tensor) gathers experts from a stack at fixed shape."""
    fmt, data, scale, scale2, _ = w
    if index is not None:
        data = data[index]
        scale = scale[index] if scale is not None else None
        scale2 = scale2.reshape(-1)[index] if scale2 is not None else None
    if fmt == "plain":
        return data.to(dtype)
    b = data.view(torch.uint8)
    table = torch.tensor(E2M1, device=b.device)          # graphcheck: ignore[GC402] -- the reference, not the hot path
    vals = torch.stack([table[(b & 0xF).long()], table[(b >> 4).long()]], -1).flatten(-2)   # [.., N, K]
    g = GROUP[fmt]
    s = _e8m0(scale) if fmt == "mxfp4" else scale.float()
    w = (vals.unflatten(-1, (-1, g)) * s.unsqueeze(-1)).flatten(-2)
    if fmt == "nvfp4":
        s2 = scale2.float().reshape(-1)
        w = w * (s2.view(-1, 1, 1) if w.dim() == 3 else s2[0])
    return w.to(dtype)


def swiglu(g: torch.Tensor, u: torch.Tensor, limit: float | None) -> torch.Tensor:
    """silu(clamp(gate, max=L)) * clamp(up, -L, L), fp32; the raw gate is clamped before SiLU. None: no clamp."""
    g, u = g.float(), u.float()
    if limit is not None:
        g, u = g.clamp(max=limit), u.clamp(-limit, limit)
    return F.silu(g) * u


def fp4_gemv_ref(x: torch.Tensor, w) -> torch.Tensor:
    """y [B, N] (x.dtype) = x [B, K] @ W^T, fp32 accumulate."""
    return (x.float() @ dequant(w).T).to(x.dtype)


def routed_experts_ref(x: torch.Tensor, idx: torch.Tensor, wts: torch.Tensor, w1, w3, w2, limit: float | None) -> torch.Tensor:
    """y [T, dim] fp32 = sum_j w2[idx_j]( wts_j * swiglu(w1[idx_j] x, w3[idx_j] x) ), at fixed shape: gather the
    T*k experts' weights by device index, then bmm. The weighted hidden is rounded to x.dtype before w2, as the
    reference expert does (`(weight * h).to(bf16) @ w2.T`)."""
    T, k = idx.shape
    flat = idx.reshape(-1)
    xr = x.float().unsqueeze(1).expand(T, k, x.shape[-1]).reshape(T * k, -1, 1)              # [P, dim, 1]
    g = torch.bmm(dequant(w1, flat), xr)[..., 0]                                             # [P, inter]
    u = torch.bmm(dequant(w3, flat), xr)[..., 0]
    h = (wts.reshape(-1, 1).float() * swiglu(g, u, limit)).to(x.dtype)
    y = torch.bmm(dequant(w2, flat), h.float().unsqueeze(-1))[..., 0]                        # [P, dim]
    return y.view(T, k, -1).sum(1)
