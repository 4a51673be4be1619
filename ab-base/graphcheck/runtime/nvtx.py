"""NVTX ranges and marks for profiler timelines: the nvtx package, else torch's, else nothing."""
from __future__ import annotations

import contextlib

try:
    import nvtx as _nvtx  # type: ignore
except ImportError:
    _nvtx = None


def _torch_nvtx():
    import torch
    return torch.cuda.nvtx if torch.cuda.is_available() else None


@contextlib.contextmanager
def range_(name: str):
    if _nvtx is not None:
        with _nvtx.annotate(name, color="blue"):
            yield
        return
    tn = _torch_nvtx()
    if tn is None:
        yield
        return
    tn.range_push(name)
    try:
        yield
    finally:
        tn.range_pop()


def mark(name: str) -> None:
    if _nvtx is not None:
        _nvtx.mark(name, color="red")
        return
    tn = _torch_nvtx()
    if tn is not None:
        tn.mark(name)
