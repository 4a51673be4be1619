"""Capture targets of dsv4_kernels.moe_route, named by its KERNEL record:
`graphcheck capture dsv4_kernels.targets:moe_route`."""
from __future__ import annotations

import torch

from graphcheck.target import Target

from .._capture import device as _dev, generator as _gen


def moe_route(rows: int = 8, experts: int = 256, k: int = 6) -> Target:
    """A V4-Flash router row set: fresh fp32 logits each step, the fixed selection bias."""
    from . import moe_route as fn
    dev = _dev()
    bias = (torch.randn(experts, generator=_gen(-1)) * 0.1).to(dev)

    def inputs(i):
        return (torch.randn(rows, experts, generator=_gen(i)) * 2).to(dev)

    return Target(step=lambda x: fn(x, k, 1.5, "sqrtsoftplus", bias), make_inputs=inputs, state=dict,
                  name=f"moe_route[{rows}x{experts}/{k}]", device=dev)


def moe_route_hash(rows: int = 8, experts: int = 256, k: int = 6, vocab: int = 1000) -> Target:
    """A hash layer's router: fresh logits and token ids each step, the fixed tid2eid table (distinct picks)."""
    from . import moe_route as fn
    dev = _dev()
    table = torch.stack([torch.randperm(experts, generator=_gen(-1 - v))[:k] for v in range(vocab)]).to(dev)

    def inputs(i):
        g = _gen(i)
        return (torch.randn(rows, experts, generator=g) * 2).to(dev), torch.randint(0, vocab, (rows,), generator=g).to(dev)

    return Target(step=lambda a: fn(a[0], k, 1.5, "sqrtsoftplus", None, table, a[1]), make_inputs=inputs,
                  state=dict, name=f"moe_route_hash[{rows}x{experts}/{k}]", device=dev)
