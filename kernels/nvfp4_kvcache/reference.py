"""PyTorch reference of the compressed-KV NVFP4 dequant: row m of N values, per-16 e4m3 scales, per-row global."""
from __future__ import annotations

import torch

_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def dequantize_nvfp4_kvcache_ref(fp4: torch.Tensor, sf: torch.Tensor, global_scale: torch.Tensor, M: int, N: int,
                                 out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    b = fp4.reshape(-1)[: M * N // 2].view(M, N // 2)
    table = torch.tensor(_E2M1, device=fp4.device)
    vals = torch.stack([table[(b & 0xF).long()], table[(b >> 4).long()]], -1).reshape(M, N)
    s = sf.reshape(-1)[: M * (N // 16)].view(M, N // 16).float().repeat_interleave(16, 1)
    return (vals * s * global_scale.float().view(M, 1)).to(out_dtype)
