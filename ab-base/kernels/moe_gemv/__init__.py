"""moe_gemv: FP4 weight-only GEMVs for decode — the routed experts of a MoE layer, and single projections.

    routed_experts(x, idx, wts, w1, w3, w2, limit, act_sim=None) -> y [T, dim] fp32
    fp4_gemv(x, w) -> y [B, N] in x.dtype
    weight_gemv(x, w) -> y [B, N] in x.dtype       (any stored format: fp8 block-128, mxfp4, nvfp4, plain)
    f32_linear(x, w) -> x @ w^T in fp32            (fp32 x of 1..8 rows, fp32 or bf16 weight [N, K])

x [T, dim] bf16 or fp32; idx [T, k] device int (expert ids); wts [T, k] fp32 routing weights; each w a tuple
(fmt, data, scale, scale2, input_scale), what `dsv4_model.quant.QWeight.astuple` gives (stacked [E, ...] for the
experts). limit None means no clamp. y = sum_j w2[idx_j]( wts_j * swiglu(w1[idx_j] x, w3[idx_j] x, limit) ); each
projection's output and the weighted hidden are rounded to x.dtype, as the reference expert's bf16 linears do.
These are the kernel entry points; `routed_experts_ref` and `fp4_gemv_ref` are the PyTorch references beside them.
`dsv4_kernels.select` picks one of the two once, at load.

Two implementations of the kernel, chosen by measurement (BENCHMARKS.md, `benchmarks/kernels.py`): the CUDA C++
one (cuda_kernel.cu: CUDA-core decode and FMA, 16-byte weight loads; mma_kernel.cu: the same decode feeding
mma.sync, taken for bf16 x where K is a multiple of 128) where it builds and the shapes fit (K a multiple of 32),
else the Triton one (triton_kernel.py: tensor-core dots on decoded tiles). Inputs neither
covers (non-FP4 formats, mixed formats, a device other than CUDA, more than MAX_PAIRS token-expert pairs) take
the reference, which is also fixed-shape and capture-safe. A third, in CuTeDSL (cutedsl_kernel.py: MXFP4 only, the
SwiGLU epilogue fused into the gate/up launch), is compiled per bucket at load through `dsv4_kernels.compiled(
"routed_experts", ..., backend="cutedsl")`; it is not the default until an A/B on the GPU shows it faster.
"""
from __future__ import annotations

import torch

from .._record import Kernel, Op
from .reference import (FP4_FORMATS, check_weight, f32_linear_ref, fp4_gemv_ref, fp8_gemv_ref,  # noqa: F401
                        routed_experts_ref)

MAX_PAIRS = 256   # decode batches (T * k); the kernel's pair bookkeeping is O(P) per program


def _kernel_input(x: torch.Tensor) -> bool:
    """An activation the kernels take: on CUDA, bf16 or fp32."""
    return x.is_cuda and x.dtype in (torch.bfloat16, torch.float32)


def _cuda_takes(K: int, *ws) -> bool:
    """The CUDA C++ kernel built here and takes these weights at this K (else the Triton kernel runs)."""
    from . import cuda_kernel
    return cuda_kernel.build()[0] and cuda_kernel.fits(K, *ws)


def _check_routed(x, idx, wts, w1, w3, w2) -> None:
    if x.dim() != 2 or idx.dim() != 2 or tuple(wts.shape) != tuple(idx.shape) or idx.shape[0] != x.shape[0]:
        raise ValueError(f"routed_experts: x {tuple(x.shape)}, idx {tuple(idx.shape)}, wts {tuple(wts.shape)}: "
                         "expected x [T, dim], idx and wts [T, k]")
    dim = x.shape[1]
    check_weight(w1, "routed_experts w1", k=dim, stacked=True)
    inter = w1[1].shape[1]
    check_weight(w3, "routed_experts w3", n=inter, k=dim, stacked=True)
    check_weight(w2, "routed_experts w2", n=dim, k=inter, stacked=True)


def routed_experts(x, idx, wts, w1, w3, w2, limit: float | None, act_sim=None) -> torch.Tensor:
    """The kernel path (CUDA); what it cannot take goes to the reference (see the module docstring).
    act_sim: None (weight-only, W4A16) or the stored format's activation simulation `act_sim(x, fmt, input_scale)`
    (pass dsv4_model.quant.act_sim), applied to x and to the weighted hidden, per pair, in PyTorch around the
    two kernel launches."""
    _check_routed(x, idx, wts, w1, w3, w2)
    fmts = {w1[0], w3[0], w2[0]}
    if _kernel_input(x) and len(fmts) == 1 and fmts <= set(FP4_FORMATS) and idx.numel() <= MAX_PAIRS:
        if _cuda_takes(x.shape[1], w1, w3) and _cuda_takes(w2[1].shape[-1] * 2, w2):
            from .cuda_kernel import routed_experts_cuda
            return routed_experts_cuda(x.contiguous(), idx, wts, w1, w3, w2, limit, act_sim=act_sim)
        from .triton_kernel import routed_experts_triton
        return routed_experts_triton(x.contiguous(), idx.contiguous(), wts.float().contiguous(), w1, w3, w2, limit,
                                     act_sim=act_sim)
    return routed_experts_ref(x, idx, wts, w1, w3, w2, limit, act_sim)


def fp4_gemv(x: torch.Tensor, w) -> torch.Tensor:
    """y = x @ W^T for an FP4 weight tuple; x [B, K]. Kernel on CUDA for FP4, the reference otherwise."""
    check_weight(w, "fp4_gemv", k=x.shape[-1])
    if _kernel_input(x) and w[0] in FP4_FORMATS and x.dim() == 2:
        if _cuda_takes(x.shape[-1], w):
            from .cuda_kernel import fp4_gemv_cuda
            return fp4_gemv_cuda(x.contiguous(), w)
        from .triton_kernel import fp4_gemv_triton
        return fp4_gemv_triton(x.contiguous(), w)
    return fp4_gemv_ref(x, w)


def weight_gemv(x: torch.Tensor, w) -> torch.Tensor:
    """y = x @ W^T at decode sizes for a weight in its stored format, weight-only (the caller simulates the
    activation format): FP4 as `fp4_gemv`; FP8 (e4m3 + 128x128 fp32 block scales) through the CUDA kernel where it
    builds and fits, else dequantised; plain fp32 or bf16 weights with fp32 x through `f32_linear`, other plain weights
    through F.linear. x [B, K] bf16/fp32."""
    fmt = w[0]
    if fmt in FP4_FORMATS:
        return fp4_gemv(x, w)
    if fmt == "fp8":
        if _kernel_input(x) and x.dim() == 2 and _cuda_takes(x.shape[-1], w):
            from .cuda_kernel import fp4_gemv_cuda
            return fp4_gemv_cuda(x.contiguous(), w)
        return fp8_gemv_ref(x, w)
    if x.dtype == torch.float32 and w[1].dtype in (torch.float32, torch.bfloat16):
        return f32_linear(x, w[1])
    return torch.nn.functional.linear(x, w[1].to(x.dtype))


def f32_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """y = x @ w^T for fp32 x [..., K] and an fp32 weight [N, K]: the CUDA fp32 rows kernel (K split for narrow
    matrices) where it builds and takes them (1..8 rows on CUDA), else `f32_linear_ref`. The reference keeps these
    in fp32: the LM head, the compressor's projections, the mHC mixes and the router; at 8 rows cuBLAS ran them at
    a fraction of the copy bandwidth (4-20 us each plus split-K reduces, with the attention's fp32 products ~0.5 ms
    of the Flash B=8 step on the H200). A bf16 weight (the head, router and compressor as the checkpoint stores
    them) goes to `bf16_linear`: the same fp32 product, reading half the bytes."""
    if w.dtype == torch.bfloat16 and x.dtype == torch.float32:
        from ..bf16_gemv import bf16_linear
        return bf16_linear(x, w)
    K = x.shape[-1]
    if (_kernel_input(x) and x.dtype == torch.float32 and w.dtype == torch.float32 and K
            and 1 <= x.numel() // K <= 8):
        from . import cuda_kernel
        xc = x.reshape(-1, K).contiguous()
        if cuda_kernel.build()[0] and cuda_kernel.f32_fits(xc, w):
            return cuda_kernel.f32_gemv_cuda(xc, w).view(*x.shape[:-1], w.shape[0])
    return f32_linear_ref(x, w)


# the Triton kernels convert e4m3 (FP8 activations, NVFP4 scales); the CUDA C++ build decides for itself (`build`)
KERNEL = Kernel(capability=(8, 9), ops=(
    Op("routed_experts", routed_experts, routed_experts_ref, targets=("routed_experts", "routed_experts_cutedsl"),
       parity=("test_routed_experts_parity", "test_routed_experts_cutedsl_parity"), cutedsl=True),
    Op("fp4_gemv", fp4_gemv, fp4_gemv_ref, targets=("fp4_gemv",), parity=("test_fp4_gemv_parity",)),
))
