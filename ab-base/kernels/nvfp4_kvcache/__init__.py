"""dequantize_nvfp4_kvcache: the KV-path NVFP4 dequant (not for weights: those use dequant_nvfp4_weight at load).

Not on the decode's hot path: the graph-safe decode keeps its KV window and compressed entries in the compute
dtype (the reference's FP8 simulation, dequantised at write time), so nothing reads an NVFP4 KV cache per step.
It stays for NVFP4 KV caches written by other engines (Triton kernel on CUDA, reference elsewhere).

The host wrapper checks contiguity, sizes, dtypes and device before any kernel runs, and names the sizes.
Nothing here assumes N = 512.
"""
from __future__ import annotations

import torch

from .._record import Kernel, Op
from .reference import dequantize_nvfp4_kvcache_ref


def check_kvcache_args(fp4: torch.Tensor, sf: torch.Tensor, global_scale: torch.Tensor, M: int, N: int) -> None:
    if M <= 0 or N <= 0 or N % 16:
        raise ValueError(f"dequantize_nvfp4_kvcache: need M > 0 and N a positive multiple of 16, got M={M}, N={N}")
    if fp4.dtype != torch.uint8:
        raise TypeError(f"dequantize_nvfp4_kvcache: fp4 must be uint8 (two e2m1 codes per byte), found {fp4.dtype}")
    if sf.dtype != torch.float8_e4m3fn:
        raise TypeError(f"dequantize_nvfp4_kvcache: sf must be float8_e4m3fn, found {sf.dtype}")
    if global_scale.dtype != torch.float32:
        raise TypeError(f"dequantize_nvfp4_kvcache: global_scale must be float32, found {global_scale.dtype}")
    for name, t in (("fp4", fp4), ("sf", sf), ("global_scale", global_scale)):
        if not t.is_contiguous():
            raise ValueError(f"dequantize_nvfp4_kvcache: {name} must be contiguous row-major, found strides {t.stride()}")
        if t.device != fp4.device:
            raise ValueError(f"dequantize_nvfp4_kvcache: {name} is on {t.device}, fp4 is on {fp4.device}")
    if fp4.numel() < M * (N // 2):
        raise ValueError(f"dequantize_nvfp4_kvcache: fp4.numel()={fp4.numel()} < M*(N/2)={M * (N // 2)} (M={M}, N={N})")
    if sf.numel() < M * (N // 16):
        raise ValueError(f"dequantize_nvfp4_kvcache: sf.numel()={sf.numel()} < M*(N/16)={M * (N // 16)} (M={M}, N={N})")
    if global_scale.numel() < M:
        raise ValueError(f"dequantize_nvfp4_kvcache: global_scale.numel()={global_scale.numel()} < M={M}")


def dequantize_nvfp4_kvcache_kernel(fp4: torch.Tensor, sf: torch.Tensor, global_scale: torch.Tensor, M: int, N: int,
                                    out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    check_kvcache_args(fp4, sf, global_scale, M, N)
    from .triton_kernel import dequantize_nvfp4_kvcache_triton
    return dequantize_nvfp4_kvcache_triton(fp4, sf, global_scale, M, N, out_dtype)


def dequantize_nvfp4_kvcache(fp4: torch.Tensor, sf: torch.Tensor, global_scale: torch.Tensor, M: int, N: int,
                             out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    check_kvcache_args(fp4, sf, global_scale, M, N)
    if fp4.is_cuda and KERNEL.available()[0]:
        return dequantize_nvfp4_kvcache_kernel(fp4, sf, global_scale, M, N, out_dtype)
    return dequantize_nvfp4_kvcache_ref(fp4, sf, global_scale, M, N, out_dtype)


KERNEL = Kernel(capability=(8, 9), ops=(
    Op("nvfp4_kvcache", dequantize_nvfp4_kvcache_kernel, dequantize_nvfp4_kvcache_ref, entry=dequantize_nvfp4_kvcache,
       targets=("nvfp4_kvcache",), parity=("test_kvcache_parity",)),
))
