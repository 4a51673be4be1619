"""fused_swiglu in CuTeDSL: one thread per output element, bf16 in/out, fp32 math.

out[r, c] = silu(min(gate, L)) * clamp(up, -L, L), gate/up taken from the split ([gate | up]) or interleaved
(gate at 2c, up at 2c+1) layout of the expert GEMM output. Compiled once per (layout, row width) and launched on
torch's current stream so it captures into CUDA graphs.
"""
from __future__ import annotations

import functools

import torch

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack
import cuda.bindings.driver as cuda

THREADS = 256


@cute.kernel
def _swiglu_kernel(gH: cute.Tensor, gO: cute.Tensor, limit: cutlass.Float32, rows: cutlass.Int32, inter: cutlass.Int32,
                   interleaved: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = bidx * THREADS + tidx
    if i < rows * inter:
        r = i // inter
        c = i - r * inter
        if cutlass.const_expr(interleaved):
            g = gH[r, 2 * c].to(cutlass.Float32)
            u = gH[r, 2 * c + 1].to(cutlass.Float32)
        else:
            g = gH[r, c].to(cutlass.Float32)
            u = gH[r, c + inter].to(cutlass.Float32)
        g = cutlass.min(g, limit)                       # clamp the raw gate before SiLU
        u = cutlass.max(cutlass.min(u, limit), -limit)
        s = g / (cutlass.Float32(1.0) + cute.math.exp(-g))
        gO[r, c] = (s * u).to(cutlass.BFloat16)


@cute.jit
def _launch(mH: cute.Tensor, mO: cute.Tensor, limit: cutlass.Float32, rows: cutlass.Int32, inter: cutlass.Int32,
            stream: cuda.CUstream, interleaved: cutlass.Constexpr):
    n = rows * inter
    _swiglu_kernel(mH, mO, limit, rows, inter, interleaved).launch(
        grid=[(n + THREADS - 1) // THREADS, 1, 1], block=[THREADS, 1, 1], stream=stream)


def _dl(t: torch.Tensor):
    return from_dlpack(t, assumed_align=2).mark_layout_dynamic(leading_dim=1)


@functools.lru_cache(maxsize=None)
def _compiled(interleaved: bool, width: int):
    h = torch.empty(1, width, dtype=torch.bfloat16, device="cuda")
    o = torch.empty(1, width // 2, dtype=torch.bfloat16, device="cuda")
    return cute.compile(_launch, _dl(h), _dl(o), cutlass.Float32(1.0), cutlass.Int32(1), cutlass.Int32(width // 2),
                        cuda.CUstream(torch.cuda.current_stream().cuda_stream), interleaved)


def compile_for(width: int, layout: str = "split") -> None:
    """Build ahead of capture (compiling inside a captured region is GC802)."""
    _compiled(layout == "interleaved", width)


def fused_swiglu_cute(h: torch.Tensor, limit: float, layout: str = "split") -> torch.Tensor:
    if layout not in ("split", "interleaved"):
        raise ValueError(f"fused_swiglu: layout must be 'split' or 'interleaved', found {layout!r}")
    shape = h.shape
    h2 = h.reshape(-1, shape[-1]).contiguous()
    rows, width = h2.shape
    out = torch.empty(rows, width // 2, dtype=torch.bfloat16, device=h.device)
    if rows:
        fn = _compiled(layout == "interleaved", width)   # cached per shape class: compiled at warm-up, before capture
        fn(_dl(h2), _dl(out), cutlass.Float32(limit), cutlass.Int32(rows), cutlass.Int32(width // 2),
           cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return out.view(*shape[:-1], width // 2)
