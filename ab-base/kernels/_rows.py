"""The row view the row kernels launch over: t [..., inner] as [R, inner] with the inner block unit-stride."""
from __future__ import annotations

import torch


def rows(t: torch.Tensor, inner: int | None = None) -> torch.Tensor:
    """t as [R, inner] rows (inner: the last dim by default, or the product of the last few): a view where reshape
    gives one, a copy only where the inner block is strided. The kernels index row r at `r * stride(0) + c`, so the
    rows may be spaced (a slice of a wider buffer) but not their elements; one element a row has no inner stride."""
    t2 = t.reshape(-1, t.shape[-1] if inner is None else inner)
    return t2 if t2.stride(-1) == 1 or t2.shape[1] == 1 else t2.contiguous()
