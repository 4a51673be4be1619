"""Capture targets of dsv4_kernels.compressor_ring, named by its KERNEL record:
`graphcheck capture dsv4_kernels.targets:ring_write`. The rings and the entries are the state the step mutates."""
from __future__ import annotations

import torch

from graphcheck.target import Target

from .._capture import device as _dev, generator as _gen


def _rings(rows: int, slots: int, w: int, dev: str):
    return {"kv_state": torch.zeros(rows, slots, w, device=dev),
            "gate_state": torch.full((rows, slots, w), float("-inf"), device=dev)}


def ring_write(rows: int = 8, m: int = 4, d: int = 512) -> Target:
    """The CSA ring (2m slots of 2d): each step a fresh token per row at a fresh slot."""
    from . import ring_write as fn
    dev = _dev()
    st = _rings(rows, 2 * m, 2 * d, dev)
    ar = torch.arange(rows, device=dev)

    def inputs(i):
        g = _gen(i)
        return (torch.randn(rows, 2 * d, generator=g).to(dev), torch.randn(rows, 2 * d, generator=g).to(dev),
                torch.randint(m, 2 * m, (rows,), generator=g).to(dev))

    return Target(step=lambda a: fn(st["kv_state"], st["gate_state"], a[0], a[1], ar, a[2]), make_inputs=inputs,
                  state=lambda: st, name=f"ring_write[{rows}x{2 * m}x{2 * d}]", device=dev)


def close_block(rows: int = 8, m: int = 4, d: int = 512, blocks: int = 64) -> Target:
    """A CSA close: fresh entries, block indices and closing rows each step, the rings shifted where they close."""
    from . import close_block as fn
    dev = _dev()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    st = {**_rings(rows, 2 * m, 2 * d, dev), "entries": torch.zeros(rows, blocks, d, dtype=dt, device=dev)}
    st["kv_state"].copy_(torch.randn(rows, 2 * m, 2 * d, generator=_gen(-1)).to(dev))
    ar = torch.arange(rows, device=dev)

    def inputs(i):
        g = _gen(i)
        return (torch.randint(0, blocks, (rows,), generator=g).to(dev), (torch.rand(rows, 1, generator=g) < 0.5).to(dev),
                torch.randn(rows, d, generator=g).to(dev, dt))

    return Target(step=lambda a: fn(st["entries"], ar, a[0], a[1], a[2], st["kv_state"], st["gate_state"], m, True),
                  make_inputs=inputs, state=lambda: st, name=f"close_block[{rows}x{blocks}x{d}]", device=dev)
