"""What the kernel packages' capture targets (each package's target.py) share: the device a target runs on and
its per-step input generator. Imports nothing of dsv4_kernels."""
from __future__ import annotations

import torch

from graphcheck.target import Target


def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def generator(k: int) -> torch.Generator:
    """Step k's inputs (k < 0: the target's fixed weights), the same on every run."""
    return torch.Generator().manual_seed(7000 + k)


def rows_target(name: str, fn, rows: int, k: int, scale: float) -> Target:
    dev = device()
    dt = torch.bfloat16 if dev == "cuda" else torch.float32

    def inputs(i):
        return (torch.randn(rows, k, generator=generator(i)) * scale).to(dev, dt)

    return Target(step=fn, make_inputs=inputs, state=dict, name=name, device=dev)
