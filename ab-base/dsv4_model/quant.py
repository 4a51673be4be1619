"""Number formats and their semantics, shared by every path that computes with stored weights.

A weight is held as a `QWeight` in the format the checkpoint stores, and each projection computes
`F.linear(act_sim(x, fmt, input_scale), dequant(qw))`. What each format mirrors in the official reference
(`inference/model.py` `linear()`, `inference/kernel.py`, DeepSeek-V4-Flash):

- ``plain`` (bf16/fp32 weights): `linear()`'s `F.linear(x, weight)` branch. No activation simulation.
- ``fp8`` (float8_e4m3fn weight + 128x128 block scales, e8m0 on disk): `linear()`'s fp8 branch,
  `act_quant(x, 128, "ue8m0")` (1x128 blocks along K, scale 2^ceil(log2(amax/448)), amax >= 1e-4) then
  `fp8_gemm` = (x_q * s_x) @ (w * s_w)^T.
- ``mxfp4`` (routed experts, e2m1 pairs + one e8m0 scale per 32 along K): `linear()`'s
  float4_e2m1fn_x2 branch, the same FP8 `act_quant` on the activation then `fp4_gemm`.
- ``nvfp4`` (ModelOpt, routed experts only): not in the DeepSeek reference; W4A4 as ModelOpt/vLLM deploy it:
  per-16 e4m3 block scales relative to the checkpoint's per-tensor `input_scale` (dynamic per-token when a
  deployment format is simulated on plain weights and no input_scale exists).
- KV FP8 sim (`act_quant(kv[..., :-rd], 64, "ue8m0", inplace=True)`) and the indexer's FP4 sim
  (`fp4_act_quant(x, 32, True)`, scale 2^ceil(log2(amax/6))) are `fp8_fake_quant` / `fp4_fake_quant`.

When K is not a multiple of 128 (tiny test shapes only; the reference asserts), the FP8 activation block is
the whole row.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

# the activation fake-quants and the e2m1 rounding live beside their Triton kernel; the names here are the model's
from dsv4_kernels.act_quant.reference import (E2M1, FP4_MAX, FP8_MAX, _pow2_scale, e2m1_table,  # noqa: F401
                                              fp4_fake_quant_ref as fp4_fake_quant,
                                              fp8_fake_quant_ref as fp8_fake_quant, quantize_e2m1)
from dsv4_kernels.moe_gemv.reference import take

FORMATS = ("plain", "fp8", "mxfp4", "nvfp4")


@dataclass
class QWeight:
    """One projection [out, in], or a stack of E experts [E, out, in], in its stored format.

    plain: data [..,out,in] bf16/fp32.  fp8: data float8_e4m3fn [..,out,in], scale fp32 [..,ceil(out/128),ceil(in/128)].
    mxfp4: data uint8 [..,out,in/2] (low nibble = element 2j, high = 2j+1), scale uint8 e8m0 bytes [..,out,in/32].
    nvfp4: data uint8 [..,out,in/2], scale float8_e4m3fn [..,out,in/16], scale2 fp32 [..], input_scale fp32 [..] or None.
    """
    fmt: str
    data: torch.Tensor
    scale: torch.Tensor | None = None
    scale2: torch.Tensor | None = None
    input_scale: torch.Tensor | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        """Logical shape [.., out, in]."""
        s = tuple(self.data.shape)
        return s[:-1] + (s[-1] * 2,) if self.fmt in ("mxfp4", "nvfp4") else s

    def astuple(self) -> tuple:
        """(fmt, data, scale, scale2, input_scale): the form the kernels package takes."""
        return (self.fmt, self.data, self.scale, self.scale2, self.input_scale)

    def select(self, index) -> "QWeight":
        """Experts `index` (an int, or a device index tensor: fixed shape, no host read) of a stack."""
        pick = (lambda t: None if t is None else take(t, index))
        return QWeight(self.fmt, pick(self.data), pick(self.scale), pick(self.scale2), pick(self.input_scale))

    def to(self, device) -> "QWeight":
        mv = (lambda t: None if t is None else t.to(device))
        return QWeight(self.fmt, self.data.to(device), mv(self.scale), mv(self.scale2), mv(self.input_scale))

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.data, self.scale, self.scale2, self.input_scale) if t is not None)


def dequant(qw: QWeight, index=None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The weight values [.., out, in] in `dtype`. `index` selects experts of a stack first (int or device tensor)."""
    if index is not None:
        qw = qw.select(index)
    if qw.fmt == "plain":
        return qw.data.to(dtype)
    if qw.fmt == "fp8":
        out, k = qw.data.shape[-2:]
        s = qw.scale.float().repeat_interleave(128, -2)[..., :out, :].repeat_interleave(128, -1)[..., :k]
        return (qw.data.float() * s).to(dtype)
    if qw.fmt == "mxfp4":
        vals = unpack_e2m1(qw.data)
        k = vals.shape[-1]
        vals = vals.unflatten(-1, (k // 32, 32)) * e8m0_to_float(qw.scale).unsqueeze(-1)
        return vals.flatten(-2).to(dtype)
    if qw.fmt == "nvfp4":
        vals = unpack_e2m1(qw.data)
        k = vals.shape[-1]
        vals = vals.unflatten(-1, (k // 16, 16)) * qw.scale.float().unsqueeze(-1)
        return (vals.flatten(-2) * qw.scale2.float()[..., None, None]).to(dtype)
    raise ValueError(f"unknown weight format {qw.fmt!r}; expected one of {', '.join(FORMATS)}")


def fp8_block(k: int) -> int:
    """The block of the FP8 activation simulation of a k-wide input: 128 (the reference's), or the whole row
    where 128 does not divide it."""
    return 128 if k % 128 == 0 else k


def act_sim(x: torch.Tensor, fmt: str, input_scale: torch.Tensor | None = None, fp8=fp8_fake_quant) -> torch.Tensor:
    """The activation simulation the reference applies before a GEMM with weights stored in `fmt`. `fp8`: the
    e4m3 fake quant to use, `fp8(x, block)` (the reference, or its one-launch kernel chosen at load)."""
    if fmt == "plain":
        return x
    if fmt in ("fp8", "mxfp4"):
        return fp8(x, fp8_block(x.shape[-1]))
    if fmt == "nvfp4":
        return nvfp4_act_fake_quant(x, input_scale)
    raise ValueError(f"unknown weight format {fmt!r}; expected one of {', '.join(FORMATS)}")


def quantize(w: torch.Tensor, fmt: str, input_scale: torch.Tensor | None = None) -> QWeight:
    """Put a float weight [.., out, in] (or a stack) into `fmt` (for simulating a deployment format)."""
    if fmt == "plain":
        return QWeight("plain", w)
    lead = w.shape[:-2]
    flat = w.reshape(-1, *w.shape[-2:]).float()
    parts = []
    for i in range(flat.shape[0]):
        if fmt == "fp8":
            d, s = quantize_fp8_block(flat[i])
            parts.append((d, e8m0_to_float(s)))
        elif fmt == "mxfp4":
            d, s = quantize_mxfp4(flat[i])
            parts.append((d.view(torch.uint8), s.view(torch.uint8)))
        elif fmt == "nvfp4":
            q = quantize_nvfp4_weight(flat[i])
            parts.append((q["weight"], q["weight_scale"], q["weight_scale_2"]))
        else:
            raise ValueError(f"unknown weight format {fmt!r}; expected one of {', '.join(FORMATS)}")
    cols = [torch.stack(c).reshape((*lead, *c[0].shape)) for c in zip(*parts)]
    return QWeight(fmt, cols[0], cols[1], cols[2] if len(cols) > 2 else None, input_scale if fmt == "nvfp4" else None)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """[.., n/2] bytes -> [.., n] float32; low nibble = element 2j, high nibble = 2j+1."""
    b = packed.view(torch.uint8) if packed.dtype == torch.int8 else packed
    lo, hi = (b & 0xF).long(), (b >> 4).long()
    table = e2m1_table(packed.device)
    return torch.stack([table[lo], table[hi]], dim=-1).flatten(-2)


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)


# -- NVFP4 (ModelOpt layout) ----------------------------------------------------------------------------
def quantize_nvfp4_weight(w: torch.Tensor) -> dict[str, torch.Tensor]:
    """Weight [out, in] -> {weight uint8 [out,in/2], weight_scale e4m3 [out,in/16], weight_scale_2 fp32 []}."""
    out, k = w.shape
    if k % 16:
        raise ValueError(f"NVFP4 needs in_features divisible by 16, found {k}")
    w = w.float()
    amax = w.abs().amax().clamp(min=1e-12)
    scale_2 = amax / (FP4_MAX * FP8_MAX)
    blocks = w.view(out, k // 16, 16)
    bscale = (blocks.abs().amax(-1) / FP4_MAX / scale_2).clamp(max=FP8_MAX).to(torch.float8_e4m3fn)
    denom = (bscale.float() * scale_2).clamp(min=1e-30).unsqueeze(-1)
    codes = quantize_e2m1((blocks / denom).view(out, k))
    return {"weight": pack_e2m1(codes), "weight_scale": bscale, "weight_scale_2": scale_2.reshape(())}


def dequant_nvfp4_weight(weight: torch.Tensor, weight_scale: torch.Tensor, weight_scale_2: torch.Tensor,
                         dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """W[o,i] = E2M1[code] * weight_scale[o, i//16] * weight_scale_2. Pure PyTorch, at load time."""
    out = weight.shape[0]
    k = weight.shape[1] * 2
    if weight_scale.shape != (out, k // 16):
        raise ValueError(f"NVFP4 weight_scale has shape {tuple(weight_scale.shape)}, expected {(out, k // 16)} for weight {tuple(weight.shape)}")
    vals = unpack_e2m1(weight).view(out, k // 16, 16)
    w = vals * weight_scale.float().unsqueeze(-1) * weight_scale_2.float()
    return w.view(out, k).to(dtype)


def dequantize_nvfp4_kvcache(fp4: torch.Tensor, sf: torch.Tensor, global_scale: torch.Tensor, M: int, N: int,
                             out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Compressed-KV dequant: fp4 [M, N/2] uint8, sf [M, N/16] e4m3 (row-major), global_scale [M] fp32 per row.

    The wrapper checks everything a kernel would otherwise read past, and says what it found.
    """
    from dsv4_kernels.nvfp4_kvcache import check_kvcache_args, dequantize_nvfp4_kvcache as impl
    check_kvcache_args(fp4, sf, global_scale, M, N)
    return impl(fp4, sf, global_scale, M, N, out_dtype)


def nvfp4_act_fake_quant(x: torch.Tensor, input_scale: torch.Tensor | None) -> torch.Tensor:
    """W4A4 sim: per-16 e4m3 block scales relative to the per-tensor input_scale, values rounded to e2m1.
    Without an input_scale the global scale is each token's own amax / (6*448) (dynamic)."""
    shape = x.shape
    xf = x.float().reshape(-1, shape[-1] // 16, 16)
    if input_scale is None:
        s = (xf.abs().amax((-1, -2), keepdim=True) / (FP4_MAX * FP8_MAX)).clamp(min=1e-30)
    else:
        # a per-tensor scale, or one per row of x (experts gathered per token-expert pair): [rows, 1, 1]
        s = input_scale.float().reshape(-1, 1, 1).clamp(min=1e-30)
    blk = (xf.abs().amax(-1, keepdim=True) / FP4_MAX / s).clamp(max=FP8_MAX).to(torch.float8_e4m3fn).float()
    denom = (blk * s).clamp(min=1e-30)
    q = e2m1_table(x.device)[quantize_e2m1(xf / denom).long()]
    return (q * denom).reshape(shape).to(x.dtype)


# -- FP8 block (native) and MXFP4 (native experts) ------------------------------------------------------
def e8m0_to_float(s: torch.Tensor) -> torch.Tensor:
    if s.dtype == torch.float8_e8m0fnu:
        return s.float()
    if s.dtype in (torch.uint8, torch.int8):
        return torch.exp2(s.view(torch.uint8).float() - 127)
    return s.float()


def dequant_fp8_block(w: torch.Tensor, scale: torch.Tensor, block: int = 128, dtype=torch.float32) -> torch.Tensor:
    out, k = w.shape
    exp = ((out + block - 1) // block, (k + block - 1) // block)
    if tuple(scale.shape) != exp:
        raise ValueError(f"FP8 block scale has shape {tuple(scale.shape)}, expected {exp} for weight {(out, k)}")
    s = e8m0_to_float(scale).repeat_interleave(block, 0)[:out].repeat_interleave(block, 1)[:, :k]
    return (w.float() * s).to(dtype)


def quantize_fp8_block(w: torch.Tensor, block: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    out, k = w.shape
    ro, rk = (out + block - 1) // block, (k + block - 1) // block
    pad = torch.zeros(ro * block, rk * block)
    pad[:out, :k] = w.float()
    amax = pad.view(ro, block, rk, block).abs().amax((1, 3)).clamp(min=1e-4)
    e = torch.ceil(torch.log2(amax / FP8_MAX))
    s = torch.exp2(e)
    q = (pad.view(ro, block, rk, block) / s[:, None, :, None]).view(ro * block, rk * block)[:out, :k]
    return q.to(torch.float8_e4m3fn), s.to(torch.float8_e8m0fnu)


def dequant_mxfp4(w: torch.Tensor, scale: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    out = w.shape[0]
    k = w.shape[1] * 2
    if tuple(scale.shape) != (out, k // 32):
        raise ValueError(f"MXFP4 scale has shape {tuple(scale.shape)}, expected {(out, k // 32)} for weight {tuple(w.shape)}")
    vals = unpack_e2m1(w).view(out, k // 32, 32)
    return (vals * e8m0_to_float(scale).unsqueeze(-1)).view(out, k).to(dtype)


def quantize_mxfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    out, k = w.shape
    blocks = w.float().view(out, k // 32, 32)
    e = torch.ceil(torch.log2(blocks.abs().amax(-1).clamp(min=1e-30) / FP4_MAX)).clamp(-127, 127)
    codes = quantize_e2m1((blocks / torch.exp2(e).unsqueeze(-1)).view(out, k))
    return pack_e2m1(codes).view(torch.int8), torch.exp2(e).to(torch.float8_e8m0fnu)
