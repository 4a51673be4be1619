"""The bf16-weight product in Triton: y [B, N] fp32 = x [B, K] fp32 @ w [N, K]^T, w read as stored (bf16, 2 bytes a
weight), widened in registers and multiplied in fp32 on the CUDA cores (no tensor cores: a bf16 MMA would round x).

A program owns BN weight rows and BB rows of x (BB * BN = 32 (b, n) pairs, so one tile shape serves 1 to 8 rows),
and a slice of K: it accumulates x * w elementwise into a [BB, BN, BK] register tile along its slice and reduces
the BK lanes once at the end. Programs of one weight tile for different 8-row blocks of x are adjacent in the grid
(axis 0), so past 8 rows the weight comes from L2, not again from memory. Narrow matrices (the router's 256 rows,
the compressors' 256-1024) give too few programs to fill the GPU: K is then split over up to `split` programs,
each writing its partial sums; the last of a tile's programs to finish (an atomic count per tile) adds them one
after another in slice order and writes y: the same order whichever program comes last (deterministic, no
atomics in the sums), in the same launch where a reduction over the split axis took another (five a CSA layer,
run 61). The counts start at zero in a buffer zeroed per call: `torch.zeros`, itself a fill kernel (run 65: it took
the sum kernel's place one for one); a buffer each tile's last slice sets back to zero would drop it (branch
bf16-counts, not yet run on a GPU). An unsplit call needs no counts. Launched on torch's current stream (capturable).
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from .._pdl import pdl, pdl_enter

BK = 256          # a program's K step: 256 bf16 (512 bytes) per weight row per iteration
PAIRS = 32        # BB * BN: the (x row, weight row) pairs a program carries
WAVES = 4         # programs per SM the split aims at
# the launch shape (bk, waves, pairs, warps) by BB, the x rows a program carries (1, 2, 4 or 8): the constants above
# for every BB unless set here. `benchmarks/decode.py --bf16-shape` sets it in its own process to time another.
SHAPES: dict[int, tuple[int, int, int, int]] = {}


@triton.jit
def _bf16_rows_kernel(x_ptr, w_ptr, part_ptr, y_ptr, count_ptr, B, N, K, k_per_split, x_row, w_row,
                      SPLIT: tl.constexpr, BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    b = tl.program_id(0) * BB + tl.arange(0, BB)
    n = tl.program_id(1) * BN + tl.arange(0, BN)
    s = tl.program_id(2)
    kk = tl.arange(0, BK)
    bm, nm = b < B, n < N
    k0 = s * k_per_split
    k1 = tl.minimum(K, k0 + k_per_split)
    w_rows = w_ptr + n.to(tl.int64)[:, None] * w_row
    x_rows = x_ptr + b.to(tl.int64)[:, None] * x_row
    acc = tl.zeros((BB, BN, BK), dtype=tl.float32)
    for k in range(k0, k1, BK):
        km = (k + kk) < k1
        w = tl.load(w_rows + (k + kk)[None, :], mask=nm[:, None] & km[None, :], other=0.0).to(tl.float32)
        x = tl.load(x_rows + (k + kk)[None, :], mask=bm[:, None] & km[None, :], other=0.0).to(tl.float32)
        acc += x[:, None, :] * w[None, :, :]
    y = tl.sum(acc, axis=2)
    at = b.to(tl.int64)[:, None] * N + n[None, :]
    inside = bm[:, None] & nm[None, :]
    if SPLIT == 1:
        tl.store(y_ptr + at, y, mask=inside)
    else:
        tl.store(part_ptr + s.to(tl.int64) * B * N + at, y, mask=inside)
        # every thread's partial stored before the count is released (the CUDA threadfence-reduction pattern);
        # the program that takes the count to SPLIT - 1 sees every other slice's partial through the L2 (.cg)
        tl.debug_barrier()
        done = tl.atomic_add(count_ptr + tl.program_id(0) * tl.num_programs(1) + tl.program_id(1), 1,
                             sem="acq_rel")
        if done == SPLIT - 1:
            tot = tl.load(part_ptr + at, mask=inside, other=0.0, cache_modifier=".cg")
            for i in tl.range(1, SPLIT):
                tot = tot + tl.load(part_ptr + i * B * N + at, mask=inside, other=0.0, cache_modifier=".cg")
            tl.store(y_ptr + at, tot, mask=inside)


@functools.lru_cache(maxsize=None)
def _sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 8            # the interpreter (tests): a small "GPU", so narrow test matrices take the split path
    return torch.cuda.get_device_properties(device).multi_processor_count


def rows_per_program(B: int) -> int:
    """BB: the rows of x a program carries for B rows (1, 2, 4 or 8), the key of `SHAPES`."""
    return min(8, triton.next_power_of_2(max(B, 1)))


def shape_for(B: int, N: int, K: int, sms: int, bk: int = BK, waves: int = WAVES,
              pairs: int = PAIRS) -> tuple[int, int, int]:
    """(BB, BN, split): x rows and weight rows per program, and how many programs share one row's K. The split is
    chosen from the weight shape and the rows, so it is fixed for a captured bucket. `bk`, `waves`, `pairs`: the
    module's constants unless a sweep (benchmarks/bf16_sweep.py) tries others."""
    BB = rows_per_program(B)
    BN = max(1, pairs // BB)
    programs = triton.cdiv(B, BB) * triton.cdiv(N, BN)
    iters = triton.cdiv(K, bk)
    split = 1
    if programs < waves * sms:        # each slice at least 2 steps of BK: a shorter one is all launch and reduce
        split = max(1, min(triton.cdiv(waves * sms, programs), iters // 2))
    return BB, BN, split


def bf16_linear_rows(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """`bf16_linear_triton` with each row's bits independent of the row count B (the speculative step's batched
    verify, dsv4_model/rowwise.py): the tile and the K split `shape_for` gives 8 rows, whatever B is (the default
    path chooses both from B); the split sums are added one after another in either. The same products and
    per-slice sums as an 8-row call."""
    return bf16_linear_triton(x, w, rows_block=8)


def bf16_linear_triton(x: torch.Tensor, w: torch.Tensor, split: int | None = None,
                       rows_block: int | None = None, bk: int | None = None, waves: int | None = None,
                       pairs: int | None = None, warps: int | None = None) -> torch.Tensor:
    """x [B, K] fp32 (or bf16: widened in the kernel, exactly), w [N, K] bf16 (last dim contiguous) -> y [B, N] fp32. `split`: K slices (None: `shape_for`).
    `rows_block`: the tile and split of a call of that many rows at any B (`bf16_linear_rows`). `bk`, `waves`,
    `pairs`, `warps`: the tile and launch shape (the defaults unless a sweep tries others)."""
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1] or x.dtype not in (torch.float32, torch.bfloat16) \
            or w.dtype != torch.bfloat16:
        raise ValueError(f"bf16_linear_triton: expected x [B, K] fp32 or bf16 and w [N, K] bf16, found x {tuple(x.shape)} "
                         f"{x.dtype} and w {tuple(w.shape)} {w.dtype}")
    x = x if x.stride(-1) == 1 else x.contiguous()
    w = w if w.stride(-1) == 1 else w.contiguous()
    (B, K), N = x.shape, w.shape[0]
    d = SHAPES.get(rows_per_program(rows_block or B), (BK, WAVES, PAIRS, 4))
    bk, waves, pairs, warps = (d[i] if v is None else v for i, v in enumerate((bk, waves, pairs, warps)))
    BB, BN, auto = shape_for(rows_block or B, N, K, _sms(x.device), bk, waves, pairs)
    iters = triton.cdiv(K, bk)
    per = triton.cdiv(iters, max(1, min(split or auto, iters)))      # BK steps per slice; slices cover K exactly
    split = triton.cdiv(iters, per) if K else 1
    y = (torch.empty if K else torch.zeros)(B, N, dtype=torch.float32, device=x.device)
    if B and N and K:
        grid = (triton.cdiv(B, BB), triton.cdiv(N, BN), split)
        part = torch.empty(split, B, N, dtype=torch.float32, device=x.device) if split > 1 else y
        # unsplit: never read (SPLIT == 1 compiles without the count), so no zeroing launch for it
        count = torch.zeros(grid[0] * grid[1], dtype=torch.int32, device=x.device) if split > 1 else y
        _bf16_rows_kernel[grid](x, w, part, y, count, B, N, K, per * bk, x.stride(0), w.stride(0), SPLIT=split,
                                BB=BB, BN=BN, BK=bk, num_warps=warps, **pdl(x))
    return y
