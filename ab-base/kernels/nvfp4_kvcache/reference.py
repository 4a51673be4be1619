"""PyTorch reference of the compressed-KV NVFP4 dequant: row m of N values, per-16 e4m3 scales, per-row global."""
from __future__ import annotations

import torch

from ..moe_gemv.reference import unpack_e2m1


def dequantize_nvfp4_kvcache_ref(fp4: torch.Tensor, sf: torch.Tensor, global_scale: torch.Tensor, M: int, N: int,
                                 out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    vals = unpack_e2m1(fp4.reshape(-1)[: M * N // 2].view(M, N // 2))
    s = sf.reshape(-1)[: M * (N // 16)].view(M, N // 16).float().repeat_interleave(16, 1)
    return (vals * s * global_scale.float().view(M, 1)).to(out_dtype)
