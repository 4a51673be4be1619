"""PyTorch references of the FP4 GEMVs: what CPU runs, and the parity oracle of the Triton kernels.

A weight is a tuple ``(fmt, data, scale, scale2, input_scale)`` (`dsv4_model.quant.QWeight.astuple`, without importing dsv4_model):
- ``"mxfp4"``: data uint8/int8 [.., N, K/2] (low nibble = element 2j), scale e8m0 bytes [.., N, K/32];
- ``"nvfp4"``: data uint8 [.., N, K/2], scale float8_e4m3fn [.., N, K/16], scale2 fp32 [..] (one per expert);
- ``"plain"``: data [.., N, K] in any float dtype (no scales).
Leading dim E when it is a stack of experts. ``input_scale`` is carried but unused: these GEMVs are
weight-only (W4A16); the activation simulation of a stored format is the caller's (dsv4_model.quant.act_sim).
"""
from __future__ import annotations

import torch

from ..fused_swiglu.reference import swiglu_ref as swiglu

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


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """[.., n/2] bytes -> [.., n] fp32 values; low nibble = element 2j. Decoded arithmetically (no table tensor to
    move to the device)."""
    b = packed.view(torch.uint8)
    codes = torch.stack([b & 0xF, b >> 4], -1).flatten(-2).to(torch.int32)
    e, m = (codes >> 1) & 3, codes & 1
    mag = torch.where(e == 0, m.float() * 0.5, (1.0 + 0.5 * m.float()) * torch.exp2((e - 1).float()))
    return torch.where(codes >= 8, -mag, mag)


def take(t: torch.Tensor, index) -> torch.Tensor:
    """t[index] for any dtype: 1-byte floats are gathered as their bytes (torch 2.8 has no CPU gather for
    float8_e4m3fn / e8m0)."""
    if t.element_size() == 1 and t.is_floating_point():
        return t.view(torch.uint8)[index].view(t.dtype)
    return t[index]


def expert_rows(x: torch.Tensor, idx_flat: torch.Tensor, k: int, w, act_sim) -> tuple[torch.Tensor, int]:
    """The activation rows the first expert projection reads, and how many pairs share a row: x [T, dim] itself
    (each token's row serves its k pairs) for a weight-only GEMM, or one simulated row per pair [T*k, dim] when the
    stored format's activation simulation applies (NVFP4's input_scale is per expert)."""
    if act_sim is None:
        return x, k
    T, dim = x.shape
    return act_inputs(x.unsqueeze(1).expand(T, k, dim).reshape(T * k, dim), idx_flat, w, act_sim).contiguous(), 1


def _e8m0(s: torch.Tensor) -> torch.Tensor:
    if s.dtype == torch.float8_e8m0fnu:
        return s.float()
    return torch.exp2(s.view(torch.uint8).float() - 127)


def dequant(w, index: torch.Tensor | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Weight tuple -> dense [.., N, K]; ``index`` (device tensor) gathers experts from a stack at fixed shape."""
    fmt, data, scale, scale2, _ = w
    if index is not None:
        data = take(data, index)
        scale = take(scale, index) if scale is not None else None
        scale2 = scale2.reshape(-1)[index] if scale2 is not None else None
    if fmt == "plain":
        return data.to(dtype)
    vals = unpack_e2m1(data)                                                                # [.., N, K]
    g = GROUP[fmt]
    s = _e8m0(scale) if fmt == "mxfp4" else scale.float()
    w = (vals.unflatten(-1, (-1, g)) * s.unsqueeze(-1)).flatten(-2)
    if fmt == "nvfp4":
        s2 = scale2.float().reshape(-1)
        w = w * (s2.view(-1, 1, 1) if w.dim() == 3 else s2[0])
    return w.to(dtype)


def fp4_gemv_ref(x: torch.Tensor, w) -> torch.Tensor:
    """y [B, N] (x.dtype) = x [B, K] @ W^T, fp32 accumulate."""
    return (x.float() @ dequant(w).T).to(x.dtype)


def f32_linear_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """y = x @ w^T in fp32, written as the reference model writes its fp32 products (mHC mixes, the router). A bf16
    weight (the router as stored) is widened for this product only: exact, so the same values as an fp32-held one."""
    return x @ w.to(x.dtype).T


def fp8_gemv_ref(x: torch.Tensor, w) -> torch.Tensor:
    """y [B, N] (x.dtype) = x [B, K] @ W^T for an FP8 weight: e4m3 data [N, K] times fp32 scales per 128x128 block."""
    _, data, scale, _, _ = w
    N, K = data.shape
    s = scale.float().repeat_interleave(128, 0)[:N].repeat_interleave(128, 1)[:, :K]
    return (x.float() @ (data.float() * s).T).to(x.dtype)


def act_inputs(x: torch.Tensor, idx_flat: torch.Tensor, w, act_sim) -> torch.Tensor:
    """The activation rows a projection of the chosen experts reads: x [P, in] (one row per token-expert pair),
    passed through the caller's `act_sim(x, fmt, input_scale)` (dsv4_model.quant.act_sim) with each pair's
    expert input_scale [P, 1] when the format has one. Identity when act_sim is None."""
    if act_sim is None:
        return x
    s = None if w[4] is None else w[4].reshape(-1)[idx_flat].reshape(-1, 1)
    return act_sim(x, w[0], s)


def sum_pairs(y: torch.Tensor) -> torch.Tensor:
    """y [T, k, dim] fp32, each token's k expert outputs -> [T, dim], summed one after another in slot order: the
    rounding of the reference dispatch's `y[rows] += expert(x[rows])` over the experts in id order when the caller
    sorted each token's picks. A reduction kernel (`.sum(1)`) pairs them in a tree instead, another rounding."""
    out = y[:, 0]
    for j in range(1, y.shape[1]):
        out = out + y[:, j]
    return out


def routed_experts_ref(x: torch.Tensor, idx: torch.Tensor, wts: torch.Tensor, w1, w3, w2, limit: float | None,
                       act_sim=None) -> torch.Tensor:
    """y [T, dim] fp32 = sum_j w2[idx_j]( wts_j * swiglu(w1[idx_j] x, w3[idx_j] x) ), at fixed shape: gather the
    T*k experts' weights by device index, then bmm. As the reference expert does, each projection's output is
    rounded to x.dtype, and the weighted hidden too (`(weight * h).to(bf16) @ w2.T`). `act_sim`: see act_inputs
    (w1 and w3 share their input_scale, as ModelOpt writes them)."""
    T, k = idx.shape
    flat = idx.reshape(-1)
    rnd = lambda t: t.to(x.dtype).float()  # noqa: E731
    xr, xdiv = expert_rows(x, flat, k, w1, act_sim)
    xr = xr.float().repeat_interleave(xdiv, 0).unsqueeze(-1)                                # [P, dim, 1]
    g = rnd(torch.bmm(dequant(w1, flat), xr)[..., 0])                                       # [P, inter]
    u = rnd(torch.bmm(dequant(w3, flat), xr)[..., 0])
    h = act_inputs((wts.reshape(-1, 1).float() * swiglu(g, u, limit)).to(x.dtype), flat, w2, act_sim)
    y = rnd(torch.bmm(dequant(w2, flat), h.float().unsqueeze(-1))[..., 0])                  # [P, dim]
    return sum_pairs(y.view(T, k, -1))


def random_weight(fmt: str, n: int, k: int, experts: int | None = None, generator: torch.Generator | None = None,
                  device: str | torch.device = "cpu"):
    """A random FP4 weight tuple (packed codes and scales drawn directly, every code value present), for tests,
    benchmarks and capture targets: drawn on `generator`'s device, then moved. Scales keep entries near unit
    size: dequantised |w| <= 6 * 2^-5."""
    lead = () if experts is None else (experts,)
    g = GROUP[fmt]
    on = generator.device if generator is not None else torch.device(device)
    data = torch.randint(0, 256, (*lead, n, k // 2), generator=generator, dtype=torch.uint8, device=on)
    if fmt == "mxfp4":
        scale = torch.randint(118, 123, (*lead, n, k // g), generator=generator, dtype=torch.uint8, device=on)
        scale2 = None
    else:
        scale = (torch.rand(*lead, n, k // g, generator=generator, device=on) * 400 + 8).to(torch.float8_e4m3fn)
        scale2 = torch.rand(lead, generator=generator, device=on) * 1e-4 + 5e-5
    t = lambda a: None if a is None else a.to(device)  # noqa: E731
    return fmt, t(data), t(scale), t(scale2), None
