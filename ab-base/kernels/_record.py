"""The record every kernel package declares: ``KERNEL = Kernel(...)`` at the end of its ``__init__.py``.

A record names what the rest of the tree used to wire by hand in about eight places: each selectable op with its
kernel entry and its PyTorch reference (and whether the package has a CuTeDSL implementation of it), the compute capability its Triton code needs (the selection rule), the
graphcheck capture targets (factories in the package's ``target.py``), the GPU parity tests that hold the kernel
to its reference (in ``tests/kernels/test_kernels.py``), and the decode's small-op slot where the graph-safe decode
plugs it in. ``dsv4_kernels._select`` discovers the records the way ``graphcheck.rules`` discovers rule modules,
and ``select``, ``available``, ``dsv4_kernels.targets``, the kernel tests and the decode's small-op table are all
derived from them: a package that forgets its record fails at import, one that forgets a target or a parity test
fails ``tests/kernels/test_kernels.py``.

This module imports nothing of the project (the packages import it; the discovery in ``_select`` imports them).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import torch


@dataclass(frozen=True)
class Op:
    """One selectable function of a kernel package: ``select(name, device)`` returns ``kernel`` on a CUDA device
    where the package's kernels run, ``reference`` elsewhere or when forced."""
    name: str
    kernel: Callable            # checks its inputs, then launches (no fallback: `select` already decided)
    reference: Callable         # the PyTorch reference, capture-safe and the parity tests' oracle
    targets: tuple[str, ...]    # capture-target factories in the package's target.py (`dsv4_kernels.targets:NAME`)
    parity: tuple[str, ...]     # GPU parity tests in tests/kernels/test_kernels.py, kernel against `reference`
    decode: tuple[str, str] | None = None   # (slot in the graph-safe decode's small-op table, name in its log note)
    # the public function that checks, then picks kernel or reference per call (exported as dsv4_kernels.<its name>);
    # None where that is `kernel` itself
    entry: Callable | None = None
    # a second implementation in CuTeDSL: the package's cutedsl_kernel.py, class CompiledKernels (built for the
    # model's shapes, compiled for every bucket at load), which `compiled(name, ..., backend="cutedsl")` returns.
    # Its capture targets and parity tests are listed in `targets` and `parity` with the others'.
    cutedsl: bool = False
    # the decode takes the CuTeDSL one by default: only once an A/B on the GPU (benchmarks/cutedsl.py) shows it faster
    cutedsl_by_default: bool = False

    @property
    def public(self) -> Callable:
        return self.entry or self.kernel


@dataclass(frozen=True)
class Kernel:
    """A kernel package's record: its ops and the selection rule they share."""
    ops: tuple[Op, ...]
    # (8, 9) where the Triton code converts to or from e4m3 (`tl.float8e4nv`: Ada, Hopper), else bf16's (8, 0)
    capability: tuple[int, int] = (8, 0)

    def available(self) -> tuple[bool, str]:
        """(usable, reason) for this package's kernels on this machine's CUDA device; decided once per process."""
        return usable(self.capability)


@functools.lru_cache(maxsize=None)
def usable(capability: tuple[int, int]) -> tuple[bool, str]:
    """(usable, reason) for kernels needing `capability` on this machine's CUDA device."""
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    try:
        import triton  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means no Triton
        return False, f"triton not importable ({e.__class__.__name__}: {e})"
    cap = torch.cuda.get_device_capability()
    if cap < capability:
        why = "e4m3 conversions" if capability >= (8, 9) else "bf16"
        return False, f"compute capability {cap[0]}.{cap[1]} < {capability[0]}.{capability[1]} ({why})"
    return True, "ok"
