"""Kernel or reference, decided once: `select(name, device, force_reference=False)` at model load.

Every kernel here can run where the device is CUDA and Triton imports (the FP4/FP8 GEMVs prefer their CUDA C++
build, `moe_gemv/cuda_kernel.py`, and fall back to Triton when it does not build). CPU always gets the PyTorch
reference. No environment variable and no per-step choice: the caller holds the returned function. An op whose
record says `cutedsl` also has a CuTeDSL implementation, which `compiled(..., backend="cutedsl")` builds at load.

What there is to select is discovered, not listed: every subpackage of dsv4_kernels declares its `KERNEL` record
(`_record.py`), the way every rule module of graphcheck declares its `RULE`.
"""
from __future__ import annotations

import importlib
import os
import pkgutil
from typing import Callable

import torch

from ._record import Kernel, Op


def min_capability(name: str) -> tuple[int, int]:
    return _record(name, "dsv4_kernels.min_capability").capability


def available(name: str) -> tuple[bool, str]:
    """(usable, reason) for the kernel `name` on this machine's CUDA device. Cached: decided once per process."""
    return _record(name, "dsv4_kernels").available()


def _record(name: str, who: str) -> Kernel:
    if name not in KERNELS:
        raise KeyError(f"{who}: no kernel named {name!r}; known: {', '.join(KERNELS)}")
    return PACKAGES[PACKAGE_OF[name]]


def _discover() -> dict[str, Kernel]:
    """package name -> its record, in name order. A package without a record, or an op name two packages claim,
    is an import error naming it: the alternative is a kernel the decode silently never uses."""
    out: dict[str, Kernel] = {}
    for info in sorted(pkgutil.iter_modules([os.path.dirname(__file__)]), key=lambda m: m.name):
        if not info.ispkg:
            continue
        mod = importlib.import_module(f"{__package__}.{info.name}")
        rec = getattr(mod, "KERNEL", None)
        if not isinstance(rec, Kernel):
            raise ImportError(f"dsv4_kernels.{info.name}: a kernel package must declare `KERNEL = Kernel(...)` in its "
                              f"__init__.py (dsv4_kernels/_record.py), found {type(rec).__name__}")
        out[info.name] = rec
    return out


KERNELS: dict[str, Op] = {}             # op name -> op (filled below, in package order)
PACKAGE_OF: dict[str, str] = {}         # op name -> its package
PACKAGES: dict[str, Kernel] = _discover()
for _pkg, _rec in PACKAGES.items():
    for _op in _rec.ops:
        if _op.name in KERNELS:
            raise ImportError(f"kernel op {_op.name!r} is declared by two packages ({PACKAGE_OF[_op.name]}, {_pkg})")
        KERNELS[_op.name], PACKAGE_OF[_op.name] = _op, _pkg
# The ops whose package also has a CuTeDSL implementation (op name -> package), and those of them the decode takes in
# CuTeDSL by default (`compiled`): both read from the records' `cutedsl` and `cutedsl_by_default`.
CUTEDSL: dict[str, str] = {name: PACKAGE_OF[name] for name, op in KERNELS.items() if op.cutedsl}
CUTEDSL_BY_DEFAULT: frozenset[str] = frozenset(name for name, op in KERNELS.items() if op.cutedsl_by_default)


def _cutedsl_runs(device: torch.device | str) -> tuple[bool, str]:
    """(whether CuTeDSL kernels run on `device`, why not)."""
    if torch.device(device).type != "cuda":
        return False, f"device {device!s} is not CUDA"
    from ._cutedsl import available
    return available()


def compiled(name: str, device: torch.device | str, shape: tuple = (), prepare: dict | None = None,
             backend: str | None = None) -> Callable:
    """`select(name, device)`, or for backend "cutedsl" (default: whether `name` is in CUTEDSL_BY_DEFAULT) the
    CuTeDSL kernel `CompiledKernels(*shape).prepare(**prepare)`, compiled here for every bucket so that no step
    compiles. Asking for CuTeDSL (backend="cutedsl") where it cannot run is an error that says why; a kernel that
    is CuTeDSL by default falls back to `select` there."""
    if backend is None:        # CuTeDSL by default where it runs; the default kernel elsewhere
        backend = "cutedsl" if name in CUTEDSL_BY_DEFAULT and _cutedsl_runs(device)[0] else "default"
    if backend == "default":
        return select(name, device)
    if backend != "cutedsl":
        raise ValueError(f"dsv4_kernels.compiled({name!r}): backend must be 'default' or 'cutedsl', found {backend!r}")
    if name not in CUTEDSL:
        raise KeyError(f"dsv4_kernels.compiled: {name!r} has no CuTeDSL kernel; those that do: {', '.join(CUTEDSL)}")
    ok, reason = _cutedsl_runs(device)
    if not ok:
        raise RuntimeError(f"dsv4_kernels.compiled({name!r}, {device!s}, backend='cutedsl'): cannot run: {reason}")
    mod = importlib.import_module(f"{__package__}.{CUTEDSL[name]}.cutedsl_kernel")
    return mod.CompiledKernels(*shape).prepare(**(prepare or {}))


def select(name: str, device: torch.device | str, force_reference: bool = False) -> Callable:
    """The function to call for `name` on `device`: the kernel on CUDA, the reference on CPU or when forced.
    Asking for the kernel on a CUDA device where it cannot run is an error that says why (not a silent fallback)."""
    rec = _record(name, "dsv4_kernels.select")
    op = KERNELS[name]
    if force_reference or torch.device(device).type != "cuda":
        return op.reference
    ok, reason = rec.available()
    if not ok:
        raise RuntimeError(f"dsv4_kernels.select({name!r}, {device!s}): the kernel cannot run: {reason} "
                           "(pass force_reference=True for the PyTorch reference)")
    return op.kernel
