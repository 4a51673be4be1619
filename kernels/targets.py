"""graphcheck capture targets, one per kernel: `graphcheck capture dsv4_kernels.targets:compressor_reduce_csa`.

Each step runs the kernel (or its reference without a GPU) on fresh inputs; the capture layer checks that it
records into the graph (no stream-0 launch) and that replay on new data matches eager bit for bit.
"""
from __future__ import annotations

import torch

from graphcheck.target import Target


def _dev() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _gen(k: int) -> torch.Generator:
    return torch.Generator().manual_seed(7000 + k)


def _compressor(slots: int, n: int = 64, d: int = 512) -> Target:
    from . import compressor_reduce
    dev = _dev()
    bias = torch.randn(slots, d, generator=_gen(-1)).to(dev)

    def inputs(k):
        g = _gen(k)
        return torch.randn(n, slots, d, generator=g).to(dev), torch.randn(n, slots, d, generator=g).to(dev)

    return Target(step=lambda kg: compressor_reduce(kg[0], kg[1], bias), make_inputs=inputs, state=dict,
                  name=f"compressor_reduce[{slots} slots]", device=dev)


def compressor_reduce_csa() -> Target:
    return _compressor(8)


def compressor_reduce_hca() -> Target:
    return _compressor(128, n=8)


def nvfp4_kvcache(M: int = 256, N: int = 512) -> Target:
    from . import dequantize_nvfp4_kvcache
    dev = _dev()

    def inputs(k):
        g = _gen(k)
        fp4 = torch.randint(0, 256, (M, N // 2), generator=g, dtype=torch.uint8)
        sf = (torch.rand(M, N // 16, generator=g) * 4).to(torch.float8_e4m3fn)
        gs = torch.rand(M, generator=g) + 0.5
        return fp4.to(dev), sf.to(dev), gs.to(dev)

    return Target(step=lambda a: dequantize_nvfp4_kvcache(*a, M, N), make_inputs=inputs, state=dict,
                  name="nvfp4_kvcache", device=dev)


def fused_swiglu(rows: int = 8, inter: int = 1024, layout: str = "split") -> Target:
    from . import fused_swiglu as fn
    dev = _dev()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def inputs(k):
        return (torch.randn(rows, 2 * inter, generator=_gen(k)) * 8).to(dev, dt)

    return Target(step=lambda h: fn(h, 10.0, layout), make_inputs=inputs, state=dict, name=f"fused_swiglu[{layout}]", device=dev)


def nvfp4_gemv(batch: int = 1, n: int = 2048, k: int = 2048) -> Target:
    from dsv4_model.quant import quantize_nvfp4_weight
    from .nvfp4_gemv import nvfp4_gemv as fn
    dev = _dev()
    q = {name: t.to(dev) for name, t in quantize_nvfp4_weight(torch.randn(n, k, generator=_gen(-1))).items()}
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def inputs(i):
        return torch.randn(batch, k, generator=_gen(i)).to(dev, dt)

    return Target(step=lambda x: fn(x, q["weight"], q["weight_scale"], q["weight_scale_2"]), make_inputs=inputs, state=dict,
                  name=f"nvfp4_gemv[b={batch}]", device=dev)
