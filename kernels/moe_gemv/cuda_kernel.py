"""The CUDA C++ FP4 kernel (cuda_kernel.cu): built once per machine by torch's extension loader on first use (about
a minute; cached under TORCH_EXTENSIONS_DIR afterwards), then called like the Triton kernel beside it.

    fp4_gemv_cuda(x, w) -> y [B, N] in x.dtype      (w MXFP4 / NVFP4, or FP8 e4m3 with 128x128 fp32 block scales)
    mma_gemv_cuda(x, w) -> y [B, N] bf16            (the tensor-core GEMV of mma_kernel.cu, where `mma_fits`)
    routed_experts_cuda(x, idx, wts, w1, w3, w2, limit, act_sim=None) -> y [T, dim] fp32

Same semantics and rounding as triton_kernel.py and the references; K a multiple of 32 for FP4, 16 for FP8
(16-byte pieces of codes). `build()` says whether the extension builds here, and why not.

Two kernels: the CUDA-core rows kernel of cuda_kernel.cu (any of its shapes, bf16 or fp32 x) and the tensor-core
kernels of mma_kernel.cu, which `fp4_gemv_cuda` and `routed_experts_cuda` take for bf16 x of 1 to 8 rows with K a
multiple of 128 (every projection of the Flash model): 8 token rows cost about twice what one does, where the rows
kernel's cost grows with each, and one token (its one-column loop) is 1.15-1.2x the rows kernel for the GEMV and
the routed experts (measured on the H200; BENCHMARKS.md). A third, `f32_gemv_cuda`, streams fp32 weights (the LM head, and,
with K split, the narrow fp32 projections: compressor, mHC mixes, router) for 1..8 rows.
"""
from __future__ import annotations

import functools
from pathlib import Path

import torch

from .._pdl import pdl_mode
from .reference import act_inputs, expert_rows
from .triton_kernel import sum_pairs_triton

_FMT = {"mxfp4": 0, "nvfp4": 1, "fp8": 2}
WIDTH = 8          # token columns a gemv program carries (1 when there is one row)


@functools.lru_cache(maxsize=None)
def _ext():
    from torch.utils.cpp_extension import load
    here = Path(__file__).parent
    return load(name="dsv4_fp4_rows", sources=[str(here / "cuda_kernel.cu"), str(here / "mma_kernel.cu")],
                extra_cuda_cflags=["-O3"], verbose=False)


@functools.lru_cache(maxsize=None)
def build() -> tuple[bool, str]:
    """(usable, reason): the extension built and loaded on this machine (decided once per process)."""
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    try:
        _ext()
    except Exception as e:  # noqa: BLE001 - any build failure means the Triton kernel is used instead
        return False, f"the CUDA extension did not build ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})"
    return True, "ok"


def fits(K: int, *ws) -> bool:
    """Inputs this kernel takes: weights of one format it knows, K a multiple of 32 (FP4) or 16 (FP8), data
    16-byte aligned."""
    fmts = {w[0] for w in ws}
    return (len(fmts) == 1 and fmts <= set(_FMT) and K % (16 if "fp8" in fmts else 32) == 0
            and all(w[1].is_contiguous() and w[2].is_contiguous() and w[1].data_ptr() % 16 == 0 for w in ws))


def _parts(w, like: torch.Tensor):
    """(codes, scales, per-matrix global scales) as the kernel reads them: bytes; bytes (FP4) or fp32 (FP8);
    fp32 (empty unless NVFP4)."""
    fmt, data, scale, scale2, _ = w
    g = scale2.reshape(-1).float() if fmt == "nvfp4" else like.new_empty(0, dtype=torch.float32)
    return data.view(torch.uint8), scale.float() if fmt == "fp8" else scale.view(torch.uint8), g


def _rows(x, idx, wts, out, wa, wb, P: int, xdiv: int, N: int, K: int, limit, mode: int, width: int) -> None:
    # every check the C++ side makes, first, as a Python error: a failed TORCH_CHECK in the extension crashed
    # the process on the H200 image (segmentation fault) instead of raising
    for w in (wa,) if wb is None else (wa, wb):
        if not fits(K, w):
            raise ValueError(f"fp4_rows: {w[0]} weight with K={K} is not taken by the CUDA kernel (K must be a multiple "
                             f"of {16 if w[0] == 'fp8' else 32}, codes and scales contiguous, codes 16-byte aligned)")
    if not (x.is_cuda and x.is_contiguous() and x.dtype in (torch.bfloat16, torch.float32)):
        raise ValueError(f"fp4_rows: x must be contiguous bf16/fp32 on CUDA, found {x.dtype} on {x.device}")
    if idx.dtype != torch.long or wts.dtype != torch.float32 or width not in ((1, WIDTH) if mode == 0 else (1,)):
        raise ValueError(f"fp4_rows: idx int64, wts fp32 and a width of 1 (or {WIDTH} for a gemv) expected, found "
                         f"{idx.dtype}, {wts.dtype}, {width}")
    a = _parts(wa, x)
    b = _parts(wb, x) if wb is not None else a
    _ext().fp4_rows(x, idx, wts, out, *a, *b, P, xdiv, N, K, float(limit or 0.0), limit is not None,
                    _FMT[wa[0]], mode, x.dtype == torch.bfloat16, width, pdl_mode(x))


# the tensor-core GEMV stages x in shared memory: B * K * 2 bytes plus 4128 (sums, scales); one FP4 token takes
# 8 warps' slices (33,280 bytes) instead, below this bound for every K it accepts
MMA_SMEM = 200 * 1024
MMA_MAX_K = 8192          # and reads a row of x in at most 4 16-byte loads per thread


def mma_fits(x: torch.Tensor, w) -> bool:
    """Inputs the tensor-core GEMV takes: x contiguous bf16 [B, K] on CUDA with 1 <= B <= 8 and K a multiple of
    128, one FP4/FP8 weight of that K with contiguous 16-byte-aligned codes and 8-byte-aligned scales."""
    if not (x.dim() == 2 and x.dtype == torch.bfloat16 and x.is_contiguous() and 1 <= x.shape[0] <= 8):
        return False
    B, K = x.shape
    return (K % 128 == 0 and K <= MMA_MAX_K and fits(K, w) and w[2].data_ptr() % 8 == 0 and x.data_ptr() % 16 == 0
            and B * K * 2 + 4128 <= MMA_SMEM
            and w[1].shape[-1] * (1 if w[0] == "fp8" else 2) == K and w[1].dim() == 2)


def mma_gemv_cuda(x: torch.Tensor, w) -> torch.Tensor:
    """x [B <= 8, K] bf16, w an FP4 weight tuple [N, K/2] or FP8 [N, K] -> y [B, N] bf16 on the tensor cores."""
    if not (x.is_cuda and mma_fits(x, w)):
        raise ValueError(f"mma_gemv: x {tuple(x.shape)} {x.dtype} with a {w[0]} weight {tuple(w[1].shape)} is not taken "
                         "(bf16 x of 1..8 rows on CUDA, K a multiple of 128, contiguous aligned codes and scales)")
    B, K = x.shape
    N = w[1].shape[0]
    codes, scales, g = _parts(w, x)
    y = torch.empty(B, N, dtype=torch.bfloat16, device=x.device)
    # the 8 warps of a block split K over one 16-row tile (the most blocks, and bytes in flight, per SM) while
    # that leaves each warp at least 4 iterations of 128; short rows (K 1024: 8 iterations) split over 2 warps,
    # 4 tiles a block, so a block's staging of x serves 64 rows, not 16
    iters = K // 128
    _ext().mma_gemv(x, y, codes, scales, g, _FMT[w[0]], 8 if iters >= 32 else 4 if iters >= 16 else 2, pdl_mode(x))
    return y


def fp4_gemv_cuda(x: torch.Tensor, w, path: str = "auto") -> torch.Tensor:
    """x [B, K] bf16/fp32 contiguous, w an FP4 weight tuple [N, K/2] (or FP8 [N, K]) -> y [B, N] in x.dtype.
    path: "auto" (the tensor-core GEMV where `mma_fits`, else the rows kernel), "rows" or "mma"."""
    # measured on the H200 (BENCHMARKS.md): the tensor-core GEMV is 1.7-2.4x the rows kernel at 4 and 8 rows,
    # 1.4-1.8x for one FP8 row and 1.15-1.2x for one FP4 row (its one-column loop)
    if path == "mma" or path == "auto" and x.is_cuda and mma_fits(x, w):
        return mma_gemv_cuda(x, w)
    B, K = x.shape
    N = w[1].shape[-2]
    y = torch.empty(B, N, dtype=x.dtype, device=x.device)
    none = x.new_empty(0, dtype=torch.long)
    _rows(x, none, x.new_empty(0, dtype=torch.float32), y, w, None, B, 1, N, K, None, 0, 1 if B == 1 else WIDTH)
    return y


def f32_fits(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Inputs the fp32 rows kernel takes: x contiguous fp32 or bf16 [1..8, K] on CUDA, w contiguous fp32 [N, K], K a
    multiple of 4, both 16-byte aligned; a matrix it would split over a cluster of blocks only where clusters run
    (without them such a matrix would run in a few blocks: cuBLAS is the better choice there)."""
    return (x.is_cuda and x.dim() == 2 and x.dtype in (torch.float32, torch.bfloat16) and 1 <= x.shape[0] <= 8
            and x.is_contiguous()
            and w.dim() == 2 and w.dtype == torch.float32 and w.is_contiguous() and w.shape[1] == x.shape[1]
            and x.shape[1] % 4 == 0 and x.data_ptr() % 16 == 0 and w.data_ptr() % 16 == 0
            and (f32_cluster(*w.shape) <= 1 or _clusters(x.device.index)))


@functools.lru_cache(maxsize=None)
def _clusters(device: int) -> bool:
    """Thread-block clusters run here: the kernel was compiled for sm_90 or newer and the device is one (once per
    device; an sm_90 device running code JIT-compiled from older PTX has none)."""
    with torch.cuda.device(device):
        return bool(_ext().f32_clusters())


F32_ROW_BLOCKS = 1024    # 16-row blocks that fill the GPU by rows alone (~8 per SM): from there K is not split
F32_MAX_CLUSTER = 8      # the portable thread-block cluster size (mirrors MAX_CLUSTER in cuda_kernel.cu)


def f32_cluster(N: int, K: int) -> int:
    """How the fp32 kernel takes an [N, K] weight: 0, whole rows per warp (the LM head: enough rows to fill the
    GPU); else blocks of 8 warps splitting K for each 4 rows, in clusters of 1..8 blocks splitting it further where
    the rows alone give fewer than 256 blocks, each block at least 256 pieces of 4 floats (one per lane): the mHC
    mixes (24 x 16384) in clusters of 8, the router (256 x 4096) of 4, the CSA compressor (1024 x 4096) alone
    (clusters of 4 ran it at 21 us for 8 rows against 11 us unclustered; H200, 2026-12-04 runs 19-20)."""
    if -(-N // 16) >= F32_ROW_BLOCKS:
        return 0
    if -(-N // 4) >= 256:
        return 1
    return max(1, min(F32_MAX_CLUSTER, K // 4 // 256))


def f32_gemv_cuda(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """y = x @ w^T for fp32 (or bf16, widened) x [1..8, K] and a plain fp32 weight [N, K], fp32 sums in a fixed order
    (deterministic);
    `f32_cluster` picks the kernel's shape."""
    if not f32_fits(x, w):
        raise ValueError(f"f32_rows: x {tuple(x.shape)} {x.dtype} and w {tuple(w.shape)} {w.dtype} are not taken "
                         "(contiguous 16-byte-aligned fp32 weights and fp32 or bf16 x, 1..8 rows of x on CUDA, K a "
                         "multiple of 4)")
    y = torch.empty(x.shape[0], w.shape[0], dtype=torch.float32, device=x.device)
    _ext().f32_rows(x, w, y, f32_cluster(*w.shape), pdl_mode(x))
    return y


# Whether the tensor-core experts kernel takes the pairs as its grid's fastest index (see mma_kernel.cu: pairs routed
# to one expert then read each of its tiles together, from L2 after the first); only the schedule, not the values.
# A/B: benchmarks/decode.py --knob dsv4_kernels.moe_gemv.cuda_kernel.EXPERTS_PAIRS_FIRST=False
EXPERTS_PAIRS_FIRST = True


def _mma_experts_fit(K: int, *ws) -> bool:
    return all(w[0] in ("mxfp4", "nvfp4") and fits(K, w) and K % 128 == 0 and K <= MMA_MAX_K and w[2].data_ptr() % 8 == 0
               for w in ws)


def _experts_mma(x, idx, wts, out, wa, wb, P: int, xdiv: int, N: int, K: int, limit, mode: int) -> None:
    for w in (wa,) if wb is None else (wa, wb):
        if not _mma_experts_fit(K, w):
            raise ValueError(f"mma_experts: {w[0]} experts with K={K} are not taken by the tensor-core kernel (FP4, K a "
                             "multiple of 128, contiguous codes 16-byte and scales 8-byte aligned)")
    if not (x.is_cuda and x.is_contiguous() and x.dtype == torch.bfloat16 and x.data_ptr() % 16 == 0):
        raise ValueError(f"mma_experts: x must be contiguous 16-byte-aligned bf16 on CUDA, found {x.dtype} on {x.device}")
    if EXPERTS_PAIRS_FIRST and -(-N // 16) > 65535:     # the row tiles are the grid's y then (at most 65535)
        raise ValueError(f"mma_experts: {N} rows are more tiles of 16 than a grid's y takes (65535)")
    a = _parts(wa, x)
    b = _parts(wb, x) if wb is not None else a
    _ext().mma_experts(x, idx, wts, out, *a, *b, P, xdiv, N, K, float(limit or 0.0), limit is not None,
                       _FMT[wa[0]], mode, EXPERTS_PAIRS_FIRST, pdl_mode(x))


def routed_experts_cuda(x, idx, wts, w1, w3, w2, limit, act_sim=None, path: str = "auto") -> torch.Tensor:
    """Three launches: w1 and w3 with SwiGLU (clamp before SiLU) times the routing weight -> h [P, inter] in x.dtype;
    w2 -> y2 [P, dim] fp32; then the sum over each token's k pairs in slot order (`sum_pairs_triton`, one launch).
    path: "rows" (the rows kernel), "mma" (the tensor-core kernel: bf16 x, FP4 experts, dim and inter multiples of
    128) or "auto" (mma where it fits, else rows)."""
    T, k = idx.shape
    P, dim, inter = T * k, x.shape[1], w1[1].shape[1]
    flat, wflat = idx.reshape(-1).long().contiguous(), wts.reshape(-1).float().contiguous()
    x, xdiv = expert_rows(x, flat, k, w1, act_sim)
    mma = path == "mma" or (path == "auto" and x.dtype == torch.bfloat16 and _mma_experts_fit(dim, w1, w3)
                            and _mma_experts_fit(inter, w2))
    h = torch.empty(P, inter, dtype=x.dtype, device=x.device)
    if mma:
        _experts_mma(x.contiguous(), flat, wflat, h, w1, w3, P, xdiv, inter, dim, limit, 1)
    else:
        _rows(x, flat, wflat, h, w1, w3, P, xdiv, inter, dim, limit, 1, 1)     # one pair per program (see the .cu)
    if act_sim is not None:
        h = act_inputs(h, flat, w2, act_sim).contiguous()
    y2 = torch.empty(P, dim, dtype=torch.float32, device=x.device)
    if mma:
        _experts_mma(h, flat, wflat, y2, w2, None, P, 1, dim, inter, None, 2)
    else:
        _rows(h, flat, wflat, y2, w2, None, P, 1, dim, inter, None, 2, 1)
    return sum_pairs_triton(y2.view(T, k, dim))
