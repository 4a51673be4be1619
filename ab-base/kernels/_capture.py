"""What the kernel packages' capture targets (each package's target.py) share: the device a target runs on and
its per-step input generator, and the CuTeDSL implementation compiled for a target (or the reference where
CuTeDSL cannot run). Imports nothing of dsv4_kernels at module level (the kernel packages' target.py import it)."""
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


def cutedsl_or_reference(name: str, shape: tuple, prepare: dict, reference):
    """The CuTeDSL kernel compiled here, at target build (load), for the one bucket the target runs; the
    reference where CuTeDSL cannot run (no cutlass, no sm_90 device), so the target still audits on CPU."""
    from ._cutedsl import available
    if device() == "cuda" and available()[0]:
        from ._select import compiled
        return compiled(name, "cuda", shape, prepare, backend="cutedsl")
    return reference
