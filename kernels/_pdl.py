"""Programmatic dependent launch (Hopper and later) for the Triton kernels: a kernel launched with it may be
scheduled while the kernel before it on the stream still runs, and waits (`wait_prior`, griddepcontrol.wait) for
that kernel's completion and memory before its first load or store. Inside a CUDA graph the launch becomes a
programmatic edge: the gap between two dependent launches (about 1 us each in the decode's replay: run 71's
"idle between launches", 32-45 us a layer) overlaps the kernel before. The values cannot change: every kernel waits
before it touches memory, so it reads and writes exactly what it would without (no early trigger is issued).

Off until an A/B on the GPU shows it wins (`benchmarks/decode.py --pdl` turns it on for a run); CPU tensors (the
interpreter) never take it."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

ENABLED = False


@triton.jit
def wait_prior(PDL: tl.constexpr):
    if PDL:
        tl.extra.cuda.gdc_wait()


def pdl(t: torch.Tensor) -> dict:
    """The launch options for a kernel over `t`'s device: the kernel's PDL flag and Triton's launch_pdl, or none
    (off, a CPU tensor, or a target before Hopper: sm_80 has no griddepcontrol, ptxas rejects it)."""
    if ENABLED and t.is_cuda and _hopper():
        return {"PDL": True, "launch_pdl": True}
    return {}


def _hopper() -> bool:
    """Whether the target Triton compiles for is CUDA sm_90 or later."""
    target = triton.runtime.driver.active.get_current_target()
    return target.backend == "cuda" and isinstance(target.arch, int) and target.arch >= 90
