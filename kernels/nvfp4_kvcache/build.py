"""Host side of the CUDA NVFP4 KV-cache dequant (the Python wrapper has already checked every size)."""
from __future__ import annotations

from pathlib import Path

import torch

from .._build import extension


def cuda_dequantize_nvfp4_kvcache(fp4, sf, global_scale, M: int, N: int, out_dtype=torch.bfloat16) -> torch.Tensor:
    if out_dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"dequantize_nvfp4_kvcache: out_dtype must be bfloat16 or float32, found {out_dtype}")
    mod = extension("nvfp4_kvcache", str(Path(__file__).with_name("kernel.cu")))
    return mod.dequantize(fp4, sf.view(torch.uint8), global_scale, M, N, out_dtype == torch.bfloat16)
