"""The routed experts in CuTeDSL, for the hit experts only: MXFP4 weights, bf16/fp32 activations (the FP8
activation simulation of MXFP4, `act_sim`, applied in PyTorch around the two launches, as the CUDA C++ kernel does),
device expert ids, fixed shapes. Same contract as `routed_experts` (``__init__.py``):

    y [T, dim] fp32 = sum_j round(w2[idx_j] @ round(wts_j * silu(clamp(g, max=L)) * clamp(u, -L, L)))
    with g = round(w1[idx_j] @ x), u = round(w3[idx_j] @ x), round = to x.dtype

Two launches, one warp per output row and token-expert pair (P = T*k pairs): (1) gate and up of a row together,
then the SwiGLU epilogue with the clamp on the raw gate *before* SiLU; (2) the down projection. Each lane reads one
32-bit word (8 e2m1 codes, all in one 32-wide scale group) per step; the e2m1 value and the e8m0 scale are decoded
with integer arithmetic, the dot products accumulate in fp32 and reduce across the warp.

Compiled ahead of capture: `CompiledKernels(...).prepare(buckets)` compiles one pair of kernels per (token bucket,
dtype) before any step runs, and a call whose key was not prepared is an error, never a compile (graphcheck GC802).
Launches go to `torch.cuda.current_stream()`, passed explicitly. Imports CuTeDSL: load it only through
`dsv4_kernels._cutedsl.available()`.
"""
from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import make_fake_stream

from .._cutedsl import current_stream, row_major

WARPS = 4                   # rows per CTA: one warp each
WORD = 8                    # e2m1 codes per 32-bit word; K must be a multiple of it


def _e2m1(code):
    """e2m1 code (0..15) -> its value, branch-free: magnitude c = code & 7 is lo/2 for c < 4, and
    (2 + (lo & 1)) << (lo >> 1) for c >= 4 (2, 3, 4, 6), sign from bit 3."""
    c = code & 7
    hi = c >> 2
    lo = c & 3
    twice = lo * (1 - hi) + hi * ((2 + (lo & 1)) << ((lo >> 1) + 1))
    sign = 1 - 2 * (code >> 3)
    return cutlass.Float32(twice * sign) * cutlass.Float32(0.5)


def _e8m0(s):
    """e8m0 byte -> 2^(s-127) as fp32 bits: s << 23, and 2^-127 (the subnormal 0x400000) for s = 0."""
    si = cutlass.Int32(s)
    bits = (si << 23) + (1 - ((si + 255) >> 8)) * 0x400000
    return cutlass.Int32(bits).bitcast(cutlass.Float32)


@cute.jit
def _row_dot(xs: cute.Tensor, xrow, d: cute.Tensor, s: cute.Tensor, e, n, lane, words: cutlass.Constexpr):
    """This lane's part of dot(W[e, n, :], xs[xrow, :]) for an MXFP4 row (words 32-bit words of 8 codes)."""
    acc = cutlass.Float32(0.0)
    for j in range(lane, words, 32):
        w = cutlass.Int32(d[e, n, j])
        part = cutlass.Float32(0.0)
        for t in cutlass.range_constexpr(WORD):
            part += _e2m1((w >> (4 * t)) & 0xF) * cutlass.Float32(xs[xrow, j * WORD + t])
        acc += part * _e8m0(s[e, n, j >> 2])
    return acc


@cute.kernel
def _gate_up_kernel(xs: cute.Tensor, idx: cute.Tensor, wts: cute.Tensor, d1: cute.Tensor, s1: cute.Tensor,
                    d3: cute.Tensor, s3: cute.Tensor, h: cute.Tensor, limit: cutlass.Float32,
                    clamp: cutlass.Constexpr, xdiv: cutlass.Constexpr, k: cutlass.Constexpr,
                    words: cutlass.Constexpr, inter: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bx, p, _ = cute.arch.block_idx()
    lane = tidx % 32
    n = bx * WARPS + tidx // 32
    if n < inter:
        e = cutlass.Int32(idx[p // k, p % k])
        xrow = p // xdiv
        g = cute.arch.warp_reduction_sum(_row_dot(xs, xrow, d1, s1, e, n, lane, words))
        u = cute.arch.warp_reduction_sum(_row_dot(xs, xrow, d3, s3, e, n, lane, words))
        if lane == 0:
            g = cutlass.Float32(h.element_type(g))        # each projection's output rounded to x.dtype
            u = cutlass.Float32(h.element_type(u))
            if cutlass.const_expr(clamp):
                g = cute.arch.fmin(g, limit)                                                     # <- clamp-order
                u = cute.arch.fmax(cute.arch.fmin(u, limit), -limit)
            silu = g / (cutlass.Float32(1.0) + cute.arch.exp(-g))
            h[p, n] = h.element_type(cutlass.Float32(wts[p // k, p % k]) * (silu * u))


@cute.kernel
def _down_kernel(hs: cute.Tensor, idx: cute.Tensor, d2: cute.Tensor, s2: cute.Tensor, y: cute.Tensor,
                 k: cutlass.Constexpr, words: cutlass.Constexpr, dim: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bx, p, _ = cute.arch.block_idx()
    lane = tidx % 32
    m = bx * WARPS + tidx // 32
    if m < dim:
        e = cutlass.Int32(idx[p // k, p % k])
        acc = cute.arch.warp_reduction_sum(_row_dot(hs, p, d2, s2, e, m, lane, words))
        if lane == 0:
            y[p, m] = y.element_type(acc)


@cute.jit
def _gate_up(xs: cute.Tensor, idx: cute.Tensor, wts: cute.Tensor, d1: cute.Tensor, s1: cute.Tensor,
             d3: cute.Tensor, s3: cute.Tensor, h: cute.Tensor, limit: cutlass.Float32, stream: cuda.CUstream,
             clamp: cutlass.Constexpr, xdiv: cutlass.Constexpr):
    P, inter = h.shape
    k = idx.shape[1]
    _gate_up_kernel(xs, idx, wts, d1, s1, d3, s3, h, limit, clamp, xdiv, k, d1.shape[2], inter).launch(
        grid=[(inter + WARPS - 1) // WARPS, P, 1], block=[32 * WARPS, 1, 1], stream=stream)


@cute.jit
def _down(hs: cute.Tensor, idx: cute.Tensor, d2: cute.Tensor, s2: cute.Tensor, y: cute.Tensor,
          stream: cuda.CUstream):
    P, dim = y.shape
    _down_kernel(hs, idx, d2, s2, y, idx.shape[1], d2.shape[2], dim).launch(
        grid=[(dim + WARPS - 1) // WARPS, P, 1], block=[32 * WARPS, 1, 1], stream=stream)


class CompiledKernels:
    """The routed experts of one MoE shape (E experts, dim, inter, top-k; MXFP4), compiled per (token bucket,
    activation dtype, activation simulation on/off, clamp on/off) by `prepare`, before capture."""

    def __init__(self, experts: int, dim: int, inter: int, topk: int):
        if dim % 32 or inter % 32:      # MXFP4 scale groups of 32: a lane's 8-code word never straddles two
            raise ValueError(f"routed_experts (CuTeDSL): dim {dim} and inter {inter} must be multiples of 32 (MXFP4)")
        self.E, self.dim, self.inter, self.k = experts, dim, inter, topk
        self.compiled: dict[tuple, tuple] = {}

    def prepare(self, buckets, dtypes=(torch.bfloat16,), sims=(False, True), clamps=(True,)) -> "CompiledKernels":
        """Compile every (T, dtype, act-sim, clamp) the runner will call with. Seconds; at load, never in a step."""
        E, dim, inter, k = self.E, self.dim, self.inter, self.k
        for T in buckets:
            P = T * k
            for dt in dtypes:
                for sim in sims:
                    for clamp in clamps:
                        key = (T, dt, sim, clamp)
                        if key in self.compiled:
                            continue
                        rows = P if sim else T
                        up = cute.compile(
                            _gate_up, row_major(dt, (rows, dim)), row_major(torch.int64, (T, k)),
                            row_major(torch.float32, (T, k)),
                            row_major(torch.int32, (E, inter, dim // WORD)), row_major(torch.uint8, (E, inter, dim // 32)),
                            row_major(torch.int32, (E, inter, dim // WORD)), row_major(torch.uint8, (E, inter, dim // 32)),
                            row_major(dt, (P, inter)), 1.0, make_fake_stream(), clamp, 1 if sim else k)
                        down = cute.compile(
                            _down, row_major(dt, (P, inter)), row_major(torch.int64, (T, k)),
                            row_major(torch.int32, (E, dim, inter // WORD)), row_major(torch.uint8, (E, dim, inter // 32)),
                            row_major(dt, (P, dim)), make_fake_stream())
                        self.compiled[key] = (up, down)
        return self

    def __call__(self, x, idx, wts, w1, w3, w2, limit: float | None, act_sim=None) -> torch.Tensor:
        from . import _check_routed
        _check_routed(x, idx, wts, w1, w3, w2)
        # the compiled kernels index with the shapes they were built for: anything else would read out of bounds
        if (x.shape[1], w1[1].shape[0], w1[1].shape[1], idx.shape[1]) != (self.dim, self.E, self.inter, self.k):
            raise ValueError(f"routed_experts (CuTeDSL): built for dim {self.dim}, {self.E} experts, inter "
                             f"{self.inter}, top-{self.k}; found x {tuple(x.shape)}, w1 {tuple(w1[1].shape)}, "
                             f"idx {tuple(idx.shape)}")
        T, k = idx.shape
        key = (T, x.dtype, act_sim is not None, limit is not None)
        fns = self.compiled.get(key)
        if fns is None:
            raise KeyError(f"routed_experts (CuTeDSL): no kernel prepared for (tokens, dtype, act_sim, clamp) = {key}; "
                           f"prepared: {sorted(self.compiled, key=str)} (prepare every bucket at load)")
        up, down = fns
        from .reference import act_inputs, expert_rows
        from .triton_kernel import sum_pairs_triton
        flat = idx.reshape(-1)
        xr, _ = expert_rows(x, flat, k, w1, act_sim)
        stream = current_stream()
        h = torch.empty(T * k, self.inter, device=x.device, dtype=x.dtype)
        up(xr.contiguous(), idx.contiguous(), wts.float().contiguous(), *_words(w1), *_words(w3), h,
           0.0 if limit is None else float(limit), stream=stream)
        h = act_inputs(h, flat, w2, act_sim).contiguous()
        y = torch.empty(T * k, self.dim, device=x.device, dtype=x.dtype)
        down(h, idx.contiguous(), *_words(w2), y, stream=stream)
        return sum_pairs_triton(y.float().view(T, k, self.dim))


def _words(w) -> tuple[torch.Tensor, torch.Tensor]:
    """An MXFP4 stack as the kernels read it: packed codes as 32-bit words [E, N, K/8], e8m0 scale bytes."""
    fmt, data, scale = w[0], w[1], w[2]
    if fmt != "mxfp4":
        raise ValueError(f"routed_experts (CuTeDSL): takes mxfp4 weights, found {fmt!r}")
    return data.contiguous().view(torch.uint8).view(torch.int32), scale.contiguous().view(torch.uint8)
