"""What the CuTeDSL kernels (`*/cutedsl_kernel.py`) share: whether they can run here, torch -> CuTeDSL dtypes, and
the current stream as a launch argument.

CuTeDSL is the `gpu` extra (nvidia-cutlass-dsl); nothing imports it unless `available()` says it is there, so the
package imports without it (CPU CI). The kernels are built for sm_90 (Hopper) and need a CUDA device to run. Which
implementation the decode uses is chosen once, at load (`_select.compiled(..., backend=...)`; an op has a CuTeDSL one
where its record says `cutedsl=True`): the Triton/CUDA C++ kernels stay the default until an A/B on the GPU
(`benchmarks/cutedsl.py`) shows a CuTeDSL kernel faster.
"""
from __future__ import annotations

import functools
import importlib.util

import torch


@functools.lru_cache(maxsize=None)
def available() -> tuple[bool, str]:
    """(usable, reason): a CUDA device of compute capability >= 9.0 and an importable CuTeDSL. Decided once."""
    if importlib.util.find_spec("cutlass") is None:
        return False, "nvidia-cutlass-dsl is not installed (the gpu extra)"
    try:
        import cutlass.cute  # noqa: F401
    except Exception as e:  # noqa: BLE001 - a broken install is "not available", with its reason
        return False, f"cutlass.cute does not import ({e.__class__.__name__}: {e})"
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    cap = torch.cuda.get_device_capability()
    if cap < (9, 0):
        return False, f"compute capability {cap[0]}.{cap[1]} < 9.0 (the CuTeDSL kernels are built for sm_90)"
    return True, "ok"


def _dtypes() -> dict:
    import cutlass
    return {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16, torch.float32: cutlass.Float32,
            torch.int64: cutlass.Int64, torch.int32: cutlass.Int32, torch.uint8: cutlass.Uint8}


class _LazyDtypes(dict):
    def __missing__(self, key):
        self.update(_dtypes())
        if key not in self:
            raise KeyError(f"no CuTeDSL element type for {key}; expected one of {', '.join(map(str, self))}")
        return self[key]


CUTE_DTYPES = _LazyDtypes()


def row_major(dtype: torch.dtype, shape: tuple[int, ...]):
    """The compile-time stand-in of a contiguous torch tensor [shape] of `dtype`. CuTe's compact layout is
    column-major unless told otherwise (`stride_order` (0, 1, ...): the first mode fastest), and a kernel compiled
    on it indexes a torch tensor's rows as columns: the last mode must be the stride-1 one."""
    from cutlass.cute.runtime import make_fake_compact_tensor
    return make_fake_compact_tensor(CUTE_DTYPES[dtype], tuple(shape), stride_order=tuple(range(len(shape) - 1, -1, -1)))


def current_stream():
    """torch's current stream as a CuTeDSL launch argument: under capture, the capturing stream."""
    import cuda.bindings.driver as cuda
    return cuda.CUstream(torch.cuda.current_stream().cuda_stream)
