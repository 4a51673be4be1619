"""The indexer's fixed-k gather in CuTeDSL: the CSA attention's picked compressed entries,

    gather_picks(ent [B, N, D], sel [B, k] int64) -> [B, k, D] = ent[b, sel[b, j], :]

bit for bit `gather_picks_ref` (a copy: any dtype, moved as 64-bit words where a row's bytes allow, else 32-bit).
One CTA per (pick, sequence), its threads striding over the row's words. Every pick is an index the top-k returned,
so in [0, N): padded picks are masked by the caller, never skipped here (fixed shapes).

Compiled ahead of capture: `CompiledKernels().prepare(keys)` compiles one kernel per (B bucket, N, k, D, dtype)
before any step runs; a call whose key was not prepared is an error, never a compile (graphcheck GC802). Launches go
to `torch.cuda.current_stream()`, passed explicitly. Imports CuTeDSL: load it only through
`dsv4_kernels._cutedsl.available()`.
"""
from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import make_fake_stream

from .._cutedsl import current_stream, row_major

MAX_THREADS = 128


@cute.kernel
def _gather_kernel(ent: cute.Tensor, sel: cute.Tensor, out: cute.Tensor, words: cutlass.Constexpr,
                   threads: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    j, b, _ = cute.arch.block_idx()
    src = cutlass.Int32(sel[b, j])
    for w in range(tidx, words, threads):
        out[b, j, w] = ent[b, src, w]


@cute.jit
def _gather(ent: cute.Tensor, sel: cute.Tensor, out: cute.Tensor, stream: cuda.CUstream):
    B, k, words = out.shape
    threads = min(MAX_THREADS, ((words + 31) // 32) * 32)
    _gather_kernel(ent, sel, out, words, threads).launch(grid=[k, B, 1], block=[threads, 1, 1], stream=stream)


def _word(row_bytes: int) -> torch.dtype:
    if row_bytes % 8 == 0:
        return torch.int64
    if row_bytes % 4 == 0:
        return torch.int32
    raise ValueError(f"gather_picks (CuTeDSL): a row of {row_bytes} bytes is not a multiple of 4")


class CompiledKernels:
    """The gather compiled per (B, N, k, D, dtype) by `prepare`, before capture."""

    def __init__(self):
        self.compiled: dict[tuple, object] = {}

    def prepare(self, keys) -> "CompiledKernels":
        """keys: (B, N, k, D, dtype) tuples, one per bucket the runner uses."""
        for key in keys:
            if key in self.compiled:
                continue
            B, N, k, D, dt = key
            wd = _word(D * torch.empty((), dtype=dt).element_size())
            words = D * torch.empty((), dtype=dt).element_size() // torch.empty((), dtype=wd).element_size()
            self.compiled[key] = cute.compile(
                _gather, row_major(wd, (B, N, words)), row_major(torch.int64, (B, k)), row_major(wd, (B, k, words)),
                make_fake_stream())
        return self

    def __call__(self, ent: torch.Tensor, sel: torch.Tensor) -> torch.Tensor:
        B, N, D = ent.shape
        k = sel.shape[1]
        key = (B, N, k, D, ent.dtype)
        fn = self.compiled.get(key)
        if fn is None:
            raise KeyError(f"gather_picks (CuTeDSL): no kernel prepared for (B, N, k, D, dtype) = {key}; prepared: "
                           f"{sorted(self.compiled, key=str)} (prepare every bucket at load)")
        if sel.dtype != torch.int64:
            raise TypeError(f"gather_picks (CuTeDSL): expected int64 picks (the top-k's), found sel {sel.dtype}")
        if not ent.is_contiguous():
            raise ValueError(f"gather_picks (CuTeDSL): expected contiguous ent, found strides {ent.stride()}")
        sel = sel.contiguous()        # the top-k's first k columns are a strided view: k indices per row, copied
        wd = _word(D * ent.element_size())
        out = torch.empty(B, k, D, device=ent.device, dtype=ent.dtype)
        fn(ent.view(wd), sel, out.view(wd), stream=current_stream())
        return out
