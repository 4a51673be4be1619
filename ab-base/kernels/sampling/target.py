"""Capture targets of dsv4_kernels.sampling, named by its KERNEL record: `graphcheck capture dsv4_kernels.targets:sample_pick`."""
from __future__ import annotations

import torch

from graphcheck.target import Target

from .._capture import device as _dev, generator as _gen


def sample_pick(rows: int = 8, vocab: int = 129280) -> Target:
    """Fresh scaled logits (sorted), settings and keys each step: greedy-free rows with top-k, top-p, both, none."""
    from . import sample_pick as fn
    dev = _dev()

    def inputs(i):
        g = _gen(i)
        srt, order = (torch.randn(rows, vocab, generator=g) * 2).sort(dim=-1, descending=True, stable=True)
        k = torch.tensor([0, 50, 0, 7] * (rows // 4) + [0] * (rows % 4))
        p = torch.tensor([1.0, 1.0, 0.9, 0.5] * (rows // 4) + [1.0] * (rows % 4))
        seed_key, counter = torch.randint(0, 2**32, (rows,), generator=g), torch.full((rows,), i)
        return tuple(t.to(dev) for t in (srt, order, k, p, seed_key, counter))

    return Target(step=lambda a: fn(*a), make_inputs=inputs, state=dict, name=f"sample_pick[{rows}x{vocab}]", device=dev)


def penalize_scale(rows: int = 8, vocab: int = 129280, ring: int = 64) -> Target:
    """Fresh logits, rings (with empty slots) and settings each step."""
    from . import penalize_scale as fn
    dev = _dev()

    def inputs(i):
        g = _gen(i)
        r = torch.randint(-1, vocab, (rows, ring), generator=g)
        return tuple(t.to(dev) for t in (torch.randn(rows, vocab, generator=g) * 4, r,
                                         torch.rand(rows, generator=g) + 0.5, torch.rand(rows, generator=g)))

    return Target(step=lambda a: fn(*a), make_inputs=inputs, state=dict, name=f"penalize_scale[{rows}x{vocab}]",
                  device=dev)
