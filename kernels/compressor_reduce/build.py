"""Host side of the CUDA compressor_reduce: JIT build on first use, fp32 contiguous inputs, current stream."""
from __future__ import annotations

from pathlib import Path

import torch

from .._build import extension


def cuda_compressor_reduce(kv: torch.Tensor, gate: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    mod = extension("compressor_reduce", str(Path(__file__).with_name("kernel.cu")))
    return mod.compressor_reduce(kv.float().contiguous(), gate.float().contiguous(), bias.float().contiguous())
