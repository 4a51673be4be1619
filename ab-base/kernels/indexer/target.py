"""Capture targets of dsv4_kernels.indexer, named by its KERNEL record: `graphcheck capture dsv4_kernels.targets:index_scores`."""
from __future__ import annotations

import torch

from graphcheck.target import Target

from .._capture import cutedsl_or_reference, device as _dev, generator as _gen


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


def gather_picks_cutedsl(rows: int = 8, slots: int = 1024, k: int = 512, d: int = 512) -> Target:
    """The CSA gather of the indexer's k picks (Flash: 512 of 1024 compressed entries of 512), fresh each step."""
    from .reference import gather_picks_ref
    dev = _dev()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    fn = cutedsl_or_reference("gather_picks", (), {"keys": [(rows, slots, k, d, dt)]}, gather_picks_ref)

    def inputs(i):
        g = _gen(i)
        return (torch.randn(rows, slots, d, generator=g).to(dev, dt),
                torch.rand(rows, slots, generator=g).argsort(-1)[:, :k].to(dev))

    return Target(step=lambda a: fn(*a), make_inputs=inputs, state=dict,
                  name=f"gather_picks_cutedsl[{rows}x{slots}x{d}, k={k}]", device=dev)
