"""Capture targets of dsv4_kernels.moe_gemv, named by its KERNEL record: `graphcheck capture dsv4_kernels.targets:fp4_gemv`."""
from __future__ import annotations

import torch

from graphcheck.target import Target

from .._capture import cutedsl_or_reference, device as _dev, generator as _gen


def fp4_gemv(batch: int = 1, n: int = 2048, k: int = 2048, fmt: str = "nvfp4") -> Target:
    from . import fp4_gemv as fn
    from .reference import random_weight
    dev = _dev()
    w = random_weight(fmt, n, k, generator=_gen(-1), device=dev)
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def inputs(i):
        return torch.randn(batch, k, generator=_gen(i)).to(dev, dt)

    return Target(step=lambda x: fn(x, w), make_inputs=inputs, state=dict, name=f"fp4_gemv[{fmt}, b={batch}]", device=dev)


def routed_experts(tokens: int = 4, experts: int = 16, topk: int = 6, dim: int = 512, inter: int = 256,
                   fmt: str = "mxfp4") -> Target:
    """Expert ids and routing weights are fresh device tensors each step: replay must follow them."""
    from . import routed_experts as fn
    from .reference import random_weight
    dev = _dev()
    g = _gen(-1)
    w1, w3 = (random_weight(fmt, inter, dim, experts, g, dev) for _ in range(2))
    w2 = random_weight(fmt, dim, inter, experts, g, dev)
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def inputs(i):
        gi = _gen(i)
        idx = torch.rand(tokens, experts, generator=gi).argsort(-1)[:, :topk]
        return (torch.randn(tokens, dim, generator=gi).to(dev, dt), idx.to(dev), torch.rand(tokens, topk, generator=gi).to(dev))

    return Target(step=lambda a: fn(a[0], a[1], a[2], w1, w3, w2, 10.0), make_inputs=inputs, state=dict,
                  name=f"routed_experts[{fmt}, T={tokens}]", device=dev)


def routed_experts_cutedsl(tokens: int = 8, experts: int = 16, topk: int = 6, dim: int = 512, inter: int = 256) -> Target:
    """The CuTeDSL routed experts (MXFP4, FP8-simulated activations as the decode feeds them): expert ids and
    weights fresh device tensors each step."""
    from .reference import random_weight, routed_experts_ref

    def fp8_sim(h, fmt, s):          # the MXFP4 activation simulation (dsv4_model.quant.act_sim), block 128
        from ..act_quant import fp8_fake_quant
        return fp8_fake_quant(h, 128 if h.shape[-1] % 128 == 0 else h.shape[-1])

    dev = _dev()
    g = _gen(-1)
    w1, w3 = (random_weight("mxfp4", inter, dim, experts, g, dev) for _ in range(2))
    w2 = random_weight("mxfp4", dim, inter, experts, g, dev)
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    fn = cutedsl_or_reference("routed_experts", (experts, dim, inter, topk),
                              {"buckets": [tokens], "dtypes": (dt,), "sims": (True,)}, routed_experts_ref)

    def inputs(i):
        gi = _gen(i)
        idx = torch.rand(tokens, experts, generator=gi).argsort(-1)[:, :topk]
        return (torch.randn(tokens, dim, generator=gi).to(dev, dt), idx.to(dev), torch.rand(tokens, topk, generator=gi).to(dev))

    return Target(step=lambda a: fn(a[0], a[1], a[2], w1, w3, w2, 10.0, fp8_sim), make_inputs=inputs, state=dict,
                  name=f"routed_experts_cutedsl[mxfp4, T={tokens}]", device=dev)
