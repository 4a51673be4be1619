"""graphcheck capture targets, one per kernel: `graphcheck capture dsv4_kernels.targets:compressor_reduce_csa`.

Each step runs the kernel (or its reference without a GPU) on fresh inputs; the capture layer checks that it
records into the graph (no stream-0 launch) and that replay on new data matches eager bit for bit.

A package in the record form keeps its targets in its own `target.py` and names them in its `KERNEL` record; this
module serves them under the same `dsv4_kernels.targets:NAME` (`__getattr__` below), so the capture commands and
the tests find a new kernel's targets without an edit here.
"""
from __future__ import annotations

import torch

from graphcheck.target import Target


def __getattr__(name: str):
    """A target a package's record names, from that package's target.py."""
    import importlib

    from ._select import PACKAGES
    for pkg, rec in PACKAGES.items():
        if any(name in op.targets for op in rec.ops):
            mod = importlib.import_module(f"{__package__}.{pkg}.target")
            if hasattr(mod, name):
                return getattr(mod, name)
            raise AttributeError(f"dsv4_kernels.{pkg}'s KERNEL record names the capture target {name!r}, "
                                 f"but dsv4_kernels/{pkg}/target.py does not define it")
    raise AttributeError(f"module 'dsv4_kernels.targets' has no capture target {name!r}")


def names() -> list[str]:
    """Every capture target the records name, in package order."""
    from ._select import PACKAGES
    return [t for rec in PACKAGES.values() for op in rec.ops for t in op.targets]


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


def fp4_gemv(batch: int = 1, n: int = 2048, k: int = 2048, fmt: str = "nvfp4") -> Target:
    from .moe_gemv import fp4_gemv as fn
    from .moe_gemv.reference import random_weight
    dev = _dev()
    w = random_weight(fmt, n, k, generator=_gen(-1), device=dev)
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def inputs(i):
        return torch.randn(batch, k, generator=_gen(i)).to(dev, dt)

    return Target(step=lambda x: fn(x, w), make_inputs=inputs, state=dict, name=f"fp4_gemv[{fmt}, b={batch}]", device=dev)


def routed_experts(tokens: int = 4, experts: int = 16, topk: int = 6, dim: int = 512, inter: int = 256,
                   fmt: str = "mxfp4") -> Target:
    """Expert ids and routing weights are fresh device tensors each step: replay must follow them."""
    from .moe_gemv import routed_experts as fn
    from .moe_gemv.reference import random_weight
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


def _rows_target(name: str, fn, rows: int, k: int, scale: float) -> Target:
    dev = _dev()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def inputs(i):
        return (torch.randn(rows, k, generator=_gen(i)) * scale).to(dev, dt)

    return Target(step=fn, make_inputs=inputs, state=dict, name=name, device=dev)


def fp8_fake_quant(rows: int = 8, k: int = 4096, block: int = 128) -> Target:
    from .act_quant import fp8_fake_quant as fn
    return _rows_target(f"fp8_fake_quant[{rows}x{k}/{block}]", lambda x: fn(x, block), rows, k, 3.0)


def fp4_fake_quant(rows: int = 64, k: int = 128) -> Target:
    from .act_quant import fp4_fake_quant as fn
    return _rows_target(f"fp4_fake_quant[{rows}x{k}]", lambda x: fn(x, 32), rows, k, 3.0)


def rms_norm(rows: int = 8, n: int = 4096) -> Target:
    from .rms_norm import rms_norm as fn
    weight = (torch.rand(n, generator=_gen(-1)) + 0.5).to(_dev())
    return _rows_target(f"rms_norm[{rows}x{n}]", lambda x: fn(x, weight, 1e-6), rows, n, 2.0)


def rope_tail(rows: int = 8, heads: int = 64, d: int = 512, rd: int = 64, inverse: bool = False) -> Target:
    """The decode's q rotation: x [rows, 1, heads, d] with a fresh per-row table [rows, 1, 1, rd/2, 2] each step."""
    from .rope import rope_tail as fn
    dev = _dev()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def inputs(i):
        g = _gen(i)
        ang = torch.rand(rows, 1, 1, rd // 2, generator=g) * 100
        return (torch.randn(rows, 1, heads, d, generator=g) * 2).to(dev, dt), torch.stack([ang.cos(), ang.sin()], -1).to(dev)

    return Target(step=lambda a: fn(a[0], a[1], rd, inverse), make_inputs=inputs, state=dict,
                  name=f"rope_tail[{rows}x{heads}x{d}/{rd}{', inverse' if inverse else ''}]", device=dev)


def _mhc_inputs(rows: int, hc: int, d: int, width: int):
    dev = _dev()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def inputs(i):
        g = _gen(i)
        return ((torch.randn(rows, 1, hc, d, generator=g) * 2).to(dev, dt),
                (torch.randn(rows, 1, width, generator=g) * 30).to(dev))
    return dev, inputs


def mhc_pre(rows: int = 8, hc: int = 4, d: int = 4096) -> Target:
    """X and the matmul's mix fresh each step; scale and base fixed (weights)."""
    from .mhc import mhc_pre as fn
    width = (2 + hc) * hc
    dev, inputs = _mhc_inputs(rows, hc, d, width)
    scale, base = (torch.rand(3, generator=_gen(-1)) + 0.5).to(dev), torch.randn(width, generator=_gen(-2)).to(dev)
    return Target(step=lambda a: fn(a[0], a[1], scale, base, 1e-6, 1e-6), make_inputs=inputs, state=dict,
                  name=f"mhc_pre[{rows}x{hc}x{d}]", device=dev)


def mhc_head(rows: int = 8, hc: int = 4, d: int = 4096) -> Target:
    from .mhc import mhc_head as fn
    dev, inputs = _mhc_inputs(rows, hc, d, hc)
    scale, base = (torch.rand(1, generator=_gen(-1)) + 0.5).to(dev), torch.randn(hc, generator=_gen(-2)).to(dev)
    return Target(step=lambda a: fn(a[0], a[1], scale, base, 1e-6, 1e-6), make_inputs=inputs, state=dict,
                  name=f"mhc_head[{rows}x{hc}x{d}]", device=dev)


def mhc_post(rows: int = 8, hc: int = 4, d: int = 4096) -> Target:
    """y, X, post and comb fresh each step."""
    from .mhc import mhc_post as fn
    dev = _dev()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def inputs(i):
        g = _gen(i)
        return (torch.randn(rows, 1, d, generator=g).to(dev, dt), torch.randn(rows, 1, hc, d, generator=g).to(dev, dt),
                (torch.rand(rows, 1, hc, generator=g) * 2).to(dev), torch.rand(rows, 1, hc, hc, generator=g).to(dev))

    return Target(step=lambda a: fn(*a), make_inputs=inputs, state=dict, name=f"mhc_post[{rows}x{hc}x{d}]", device=dev)


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


def decode_attention(rows: int = 8, heads: int = 64, d: int = 512, keys: int = 640) -> Target:
    """Fresh queries, keys (a window plus picked entries: Flash's CSA), masks and sinks each step."""
    from . import decode_attention as fn
    dev = _dev()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def inputs(i):
        g = _gen(i)
        q, K = torch.randn(rows, 1, heads, d, generator=g), torch.randn(rows, 1, keys, d, generator=g)
        mask = torch.rand(rows, 1, keys, generator=g) > 0.3
        return q.to(dev, dt), K.to(dev, dt), mask.to(dev), torch.randn(heads, generator=g).to(dev)

    return Target(step=lambda a: fn(*a, d ** -0.5), make_inputs=inputs, state=dict,
                  name=f"decode_attention[{rows}x{heads}x{d}, {keys} keys]", device=dev)


def index_scores(rows: int = 8, heads: int = 64, d: int = 128, keys: int = 1024) -> Target:
    """Fresh index queries, compressed keys (Flash: 64 heads of 128, 1024 blocks at 4096 tokens) and weights."""
    from . import index_scores as fn
    dev = _dev()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def inputs(i):
        g = _gen(i)
        q, k = torch.randn(rows, 1, heads, d, generator=g), torch.randn(rows, keys, d, generator=g)
        return q.to(dev, dt), k.to(dev, dt), torch.randn(rows, 1, heads, generator=g).to(dev)

    return Target(step=lambda a: fn(*a), make_inputs=inputs, state=dict,
                  name=f"index_scores[{rows}x{heads}x{d}, {keys} keys]", device=dev)


def topk_blocks(rows: int = 8, blocks: int = 1024, k: int = 512) -> Target:
    """Fresh indexer scores with ties (a ReLU's zeros) and masked slots (-inf) each step."""
    from . import topk_blocks as fn
    dev = _dev()

    def inputs(i):
        g = _gen(i)
        s = torch.randn(rows, blocks, generator=g).relu()
        s[:, blocks - blocks // (i + 2):] = float("-inf")
        return s.to(dev)

    return Target(step=lambda s: fn(s, k), make_inputs=inputs, state=dict, name=f"topk_blocks[{rows}x{blocks}, k={k}]",
                  device=dev)
