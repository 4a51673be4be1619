"""head_norm_rope: the attention's q path after its up-projection, the per-head norm in the model dtype's own
arithmetic (official) and the partial RoPE, in one Triton launch on CUDA (``triton_kernel.py``; the norm's sum of
squares in another order than torch's, so not bit-exact: see there), the PyTorch reference (``reference.py``: the
two calls it replaces) elsewhere.

    head_norm_rope(x [.., D], cs [.., rd/2, 2] fp32, eps, rd) -> [.., D] x.dtype

cs's leading dims broadcast against x's as `dsv4_kernels.rope_tail`'s. Shapes are checked with host integers only
(capturable).
"""
from __future__ import annotations

import torch

from .._record import Kernel, Op
from ..rope import _check as _check_rope
from .reference import head_norm_rope_ref  # noqa: F401


def head_norm_rope(x: torch.Tensor, cs: torch.Tensor, eps: float, rd: int) -> torch.Tensor:
    _check_rope(x, cs, rd)
    if x.is_cuda and KERNEL.available()[0]:
        from .triton_kernel import head_norm_rope_triton
        return head_norm_rope_triton(x, cs, eps, rd)
    return head_norm_rope_ref(x, cs, eps, rd)


KERNEL = Kernel(ops=(
    Op("head_norm_rope", head_norm_rope, head_norm_rope_ref, targets=("head_norm_rope",),
       parity=("test_head_norm_rope_parity",), decode=("q_norm_rope", "q norm + RoPE")),
))
