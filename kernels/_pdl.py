"""Programmatic dependent launch (PDL, Hopper and later) for every kernel of the tree: the switch, the Triton
kernels' prologue and launch options, and the CUDA C++ ops' mode (their prologue is `moe_gemv/pdl.cuh`).

A decode step at B=1 is a chain of ~46 small kernels per layer, and in graph replay each one pays the launch and
ramp-up of its grid after the one before has drained. With PDL a kernel's grid is launched while the grid before it
still runs: each kernel first lets its dependents launch (`griddepcontrol.launch_dependents`), then waits
(`griddepcontrol.wait`) until every grid it depends on has finished and its writes are visible. Both are the first
instructions of the kernel, so nothing is read or written before the wait: a kernel sees exactly what it sees without
PDL (the same values bit for bit, in any stream or graph), and only the launch latency overlaps the previous grid.
A kernel launched after one that does not trigger (cuBLAS, ATen) is released when that grid ends, as without PDL;
one launched without the attribute (those two) waits for the whole grid before it, as always.

`PDL` is the one switch, off: run 90 (an H100) hit an illegal address in the graph-safe step at Flash's dimensions
with it on, while the tiny preset's 300-step replay equalled the plain launches' bit for bit; `TRITON`, `CPP` and
`PREFETCH` split it for the bisection. A Triton launch site passes `**pdl(t)` with a tensor it launches on, and the
kernel's first statement is `pdl_enter(PDL)`. On CPU tensors (the Triton interpreter) and before Hopper it is off:
the interpreter has no `griddepcontrol`."""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

PDL = False
# for a bisection on the GPU: PDL on the Triton kernels, on the CUDA C++ ones, and their weight prefetch
TRITON, CPP, PREFETCH = True, True, True


def _supported(device: torch.device) -> bool:
    return _hopper(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache
def _hopper(index: int) -> bool:
    return torch.cuda.get_device_capability(index)[0] >= 9


def pdl_on(t: torch.Tensor) -> bool:
    """Whether a kernel launched on `t`'s device takes PDL."""
    return PDL and t.is_cuda and _supported(t.device)


def pdl_mode(t: torch.Tensor) -> int:
    """The CUDA C++ ops' `pdl` argument: 0 plain launches, 1 PDL, 2 PDL with the weight prefetch before the wait."""
    return (2 if PREFETCH else 1) if CPP and pdl_on(t) else 0


def pdl(t: torch.Tensor) -> dict:
    """The launch options for a Triton kernel launched on `t`'s device: its `PDL` constexpr and `launch_pdl`."""
    return {"PDL": True, "launch_pdl": True} if TRITON and pdl_on(t) else {"PDL": False}


@triton.jit
def pdl_enter(ON: tl.constexpr):
    """A kernel's first statement: let the next grid launch, then wait for the grids this one depends on."""
    if ON:
        gdc_launch_dependents()
        gdc_wait()
