"""Each kernel vs its PyTorch reference and vs the HBM copy bandwidth measured in the same run, timed eagerly
(one launch per call, CUDA events) and as a captured-graph replay (10 calls in one graph, so launch overhead is
out); the FP4 GEMVs vs BF16 F.linear of the same matrix; the routed experts vs the reference expert loop (bf16
weights dequantised at load, one F.linear per expert hit, tokens grouped per expert as the model does, host-known
groups so no sync is timed) at B = 1, 4, 8 with top-6 of 256 experts at Flash sizes (dim 4096, inter 2048).

    python benchmarks/kernels.py [--json out.json] [--sweep] [--only gemv,fp8,head,bf16,routed,swiglu,compressor,kvcache,sampler,attention,indexer]

%copy = bytes the kernel must move / graph-replay time / copy bandwidth (copy: bytes read + written / time).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _calls(fn) -> list:
    return list(fn) if isinstance(fn, (list, tuple)) else [fn]


def rotation(nbytes: int) -> int:
    """How many input sets a timing rotates among so that one pass over them reads 4x the L2: calls that read again
    and again one buffer that fits the L2 time the cache, not memory (one 34 MB FP8 weight, read 10 times in a row
    under the H200's 50 MB L2, came out at 104 % of copy bandwidth in run 7)."""
    return max(1, -(-4 * torch.cuda.get_device_properties(0).L2_cache_size // max(1, nbytes)))


def routings(B: int, E: int, k: int, per_expert: int, g: torch.Generator) -> list[tuple]:
    """Top-k routings of B tokens over E experts, (idx, weights, sorted experts hit) each, as many as `rotation`
    asks for the experts the first one hits (per_expert bytes each): taken in turn, they read more than the L2."""
    sets: list[tuple] = []
    while not sets or len(sets) < rotation(len(sets[0][2]) * per_expert):
        idx = torch.rand(B, E, device="cuda", generator=g).argsort(-1)[:, :k]
        sets.append((idx, torch.rand(B, k, device="cuda", generator=g), sorted(set(idx.flatten().tolist()))))
    return sets


def timed(fn, iters: int = 20, warmup: int = 3) -> float:
    """Median of 5 batches, mean seconds per call, CUDA events around `iters` eager calls. `fn`: a callable, or a
    list of them over different input sets (see `rotation`), called in turn (`iters` rounded up to whole turns)."""
    fns = _calls(fn)
    seq = fns * -(-iters // len(fns))
    for f in fns * max(1, -(-warmup // len(fns))):
        f()
    torch.cuda.synchronize()
    runs = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for f in seq:
            f()
        b.record()
        torch.cuda.synchronize()
        runs.append(a.elapsed_time(b) / 1e3 / len(seq))
    return sorted(runs)[2]


def graphed(fn, per_graph: int = 10) -> float:
    """Seconds per call when `per_graph` calls (rounded up to whole turns of a list of callables) are captured into
    one CUDA graph and replayed."""
    fns = _calls(fn)
    seq = fns * -(-per_graph // len(fns))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    for f in fns:
        f()
    with torch.cuda.stream(s):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in seq:
            f()
    return timed(g.replay, iters=5, warmup=1) / len(seq)


def copy_bandwidth() -> float:
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    t = timed(lambda: y.copy_(x), iters=10, warmup=3)
    return 2 * x.numel() / t


class Table:
    def __init__(self, bw: float):
        self.bw, self.rows = bw, []

    def add(self, name, kernel, ref=None, nbytes=None, base=None, base_name=None, err=None):
        """kernel/ref/base: (eager s, graph s) or None; err: max |kernel - ref| / max |ref| on the timed data."""
        r = {"kernel": name, "eager_us": kernel[0] * 1e6, "graph_us": kernel[1] * 1e6, "relerr": err}
        if ref:
            r.update(ref_eager_us=ref[0] * 1e6, ref_graph_us=ref[1] * 1e6 if ref[1] else None,
                     x_ref_eager=ref[0] / kernel[0], x_ref_graph=ref[1] / kernel[1] if ref[1] else None)
        if nbytes:
            r.update(bytes=nbytes, pct_copy=100 * nbytes / kernel[1] / self.bw)
        if base:
            r.update(base=base_name, base_eager_us=base[0] * 1e6, base_graph_us=base[1] * 1e6,
                     x_base_eager=base[0] / kernel[0], x_base_graph=base[1] / kernel[1])
        self.rows.append(r)
        f = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
        print(f"{name:62} {r['eager_us']:8.1f} {r['graph_us']:8.1f} {f(r.get('ref_eager_us'), '9.1f'):>9} "
              f"{f(r.get('ref_graph_us'), '9.1f'):>9} {f(r.get('x_ref_graph') or r.get('x_ref_eager'), '6.1f'):>6} "
              f"{f(r.get('pct_copy'), '5.0f'):>5}% {f(r.get('base_graph_us'), '8.1f'):>8} {f(r.get('x_base_graph'), '6.2f'):>6} {f(err, '7.1e'):>7}",
              flush=True)


HEADER = (f"{'kernel':62} {'eager':>8} {'graph':>8} {'ref eag':>9} {'ref grph':>9} {'x ref':>6} {'%copy':>6} "
          f"{'base grph':>8} {'x base':>6} {'relerr':>7}   (us per call; x = base/kernel, graph vs graph)")


def both(fn, iters=20):
    return timed(fn, iters), graphed(fn)


@contextlib.contextmanager
def guard(what: str):
    """One failing variant prints a line and lets the other rows run."""
    try:
        yield
    except Exception as e:  # noqa: BLE001
        print(f"{what}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}", flush=True)


@contextlib.contextmanager
def knobs(module, names: tuple[str, ...], values: tuple):
    """A kernel module's host-side launch constants (read at each call) set to `values` for the block, then restored."""
    saved = tuple(getattr(module, n) for n in names)
    for n, v in zip(names, values):
        setattr(module, n, v)
    try:
        yield
    finally:
        for n, v in zip(names, saved):
            setattr(module, n, v)


def _relerr(got, ref) -> float:
    return ((got.float() - ref.float()).abs().max() / ref.float().abs().max()).item()


def _cuda():
    """The CUDA C++ implementation, built here (the first build takes about a minute)."""
    from dsv4_kernels.moe_gemv import cuda_kernel
    ok, why = cuda_kernel.build()
    if not ok:
        raise RuntimeError(why)
    return cuda_kernel


def bench_gemv(tab, sweep):
    from dsv4_kernels.moe_gemv import triton_kernel as tk
    from dsv4_kernels.moe_gemv.reference import GROUP, fp4_gemv_ref, random_weight
    for fmt in ("mxfp4", "nvfp4"):
        for B, N, K in ((1, 8192, 8192), (8, 8192, 8192)) if sweep else ((1, 8192, 8192), (4, 8192, 8192), (8, 8192, 8192), (1, 4096, 4096)):
            nbytes = N * K // 2 + N * K // GROUP[fmt] + B * (K + N) * 2
            ws = [random_weight(fmt, N, K, device="cuda") for _ in range(rotation(nbytes))]   # each call reads memory
            w = ws[0]
            x = torch.randn(B, K, device="cuda").bfloat16()
            w16s = [torch.randn(N, K, device="cuda").bfloat16() for _ in range(rotation(N * K * 2))]
            base = both([lambda w16=w16: F.linear(x, w16) for w16 in w16s])
            want = fp4_gemv_ref(x, w)
            ref = (timed(lambda: fp4_gemv_ref(x, w), 5, 1), None)
            for cfg in (SWEEP if sweep else [tk.CONFIG["gemv"]]):
                with guard(f"fp4_gemv {fmt} B={B} {cfg}"):
                    err = _relerr(tk.fp4_gemv_triton(x, w, cfg), want)
                    tab.add(f"fp4_gemv {fmt} B={B} {N}x{K} {cfg}", both([lambda w=w: tk.fp4_gemv_triton(x, w, cfg) for w in ws]),
                            ref=ref, nbytes=nbytes, base=base, base_name="bf16 F.linear", err=err)
            for path, label in (("rows", "CUDA C++ rows"), ("mma", "CUDA C++ mma")):
                with guard(f"fp4_gemv cuda {path} {fmt} B={B}"):
                    ck = _cuda()
                    err = _relerr(ck.fp4_gemv_cuda(x, w, path=path), want)
                    tab.add(f"fp4_gemv {fmt} B={B} {N}x{K} {label}", both([lambda w=w: ck.fp4_gemv_cuda(x, w, path=path) for w in ws]),
                            ref=ref, nbytes=nbytes, base=base, base_name="bf16 F.linear", err=err)


def bench_head(tab):
    """fp32 weights against 1..8 fp32 rows, the fp32 rows kernel against F.linear (cuBLAS, also the reference): the
    LM head at Flash size (vocab 129280, dim 4096, K not split) and the narrow fp32 products of the Flash step (K
    split): the mHC mix (24 x 4*4096), the router (256 x 4096) and the CSA compressor projections (1024 x 4096)."""
    for N, K, what, batches in ((129280, 4096, "head", (1, 2, 8)), (24, 16384, "mHC mix", (1, 8)),
                                (256, 4096, "router", (1, 8)), (1024, 4096, "compressor", (1, 8))):
        w = torch.randn(N, K, device="cuda")
        iters = 10 if what == "head" else 50          # the head is 0.5 ms a call, the narrow ones a few us
        for B in batches:
            x = torch.randn(B, K, device="cuda")
            nbytes = N * K * 4 + B * (K + N) * 4
            base = both(lambda: F.linear(x, w), iters=iters)
            with guard(f"f32 {what} B={B}"):
                ck = _cuda()
                err = _relerr(ck.f32_gemv_cuda(x, w), F.linear(x, w))
                tab.add(f"f32_gemv {what} B={B} {N}x{K} CUDA C++ rows", both(lambda: ck.f32_gemv_cuda(x, w), iters=iters),
                        ref=base, nbytes=nbytes, base=base, base_name="fp32 F.linear", err=err)


def bench_bf16(tab):
    """The head, router and compressors as the checkpoint stores them (bf16, `kernels/bf16_gemv`) against what the
    decode ran on their fp32-held copies (the fp32 rows kernel, up to 8 rows) and cuBLAS on the widened weight
    (also the reference); K split as the kernel picks it ("auto") and not at all ("1"): the split costs one more
    launch (the partial sums' reduction), the A/B says whether the narrow matrices earn it. Weights rotate past
    the L2, so each call reads memory."""
    from dsv4_kernels.bf16_gemv.triton_kernel import bf16_linear_triton
    for N, K, what, batches in ((129280, 4096, "head", (1, 8, 32)), (256, 4096, "router", (1, 8)),
                                (1024, 4096, "CSA compressor", (1, 8)), (512, 4096, "HCA compressor", (1, 8))):
        ws = [(torch.randn(N, K, device="cuda") / 64).bfloat16() for _ in range(rotation(N * K * 2))]
        w32s = [w.float() for w in ws[:rotation(N * K * 4)]]
        iters = 10 if what == "head" else 50
        for B in batches:
            x = torch.randn(B, K, device="cuda")
            want = F.linear(x, ws[0].float())
            cublas = both([lambda w=w: F.linear(x, w) for w in w32s], iters=iters)
            base, base_name = cublas, "fp32 F.linear"
            if B <= 8:
                with guard(f"f32 rows {what} B={B}"):
                    ck = _cuda()
                    base, base_name = both([lambda w=w: ck.f32_gemv_cuda(x, w) for w in w32s], iters=iters), "f32 rows"
            for split in (None, 1):
                with guard(f"bf16_linear {what} B={B} split={split}"):
                    err = _relerr(bf16_linear_triton(x, ws[0], split=split), want)
                    tab.add(f"bf16_linear {what} B={B} {N}x{K} split={split or 'auto'}",
                            both([lambda w=w: bf16_linear_triton(x, w, split=split) for w in ws], iters=iters),
                            ref=cublas, nbytes=N * K * 2 + B * (K + N) * 4, base=base, base_name=base_name, err=err)
        del ws, w32s


def bench_fp8(tab):
    """The FP8 projections of the decode (e4m3 + 128x128 fp32 block scales) at Flash attention shapes, against
    the model's reference path (dequantise, then F.linear) and bf16 F.linear of the same matrix."""
    from dsv4_kernels.moe_gemv.reference import fp8_gemv_ref
    for B, N, K in ((1, 32768, 1024), (1, 4096, 8192), (8, 32768, 1024), (8, 4096, 8192)):
        nbytes = N * K + -(-N // 128) * -(-K // 128) * 4 + B * (K + N) * 2
        ws = [("fp8", (torch.randn(N, K, device="cuda") * 40).to(torch.float8_e4m3fn),
               torch.rand((N + 127) // 128, (K + 127) // 128, device="cuda") * 1e-2, None, None)
              for _ in range(rotation(nbytes))]                   # each call reads memory, not the L2
        w = ws[0]
        x = torch.randn(B, K, device="cuda").bfloat16()
        w16s = [torch.randn(N, K, device="cuda").bfloat16() for _ in range(rotation(N * K * 2))]
        ref = both([lambda w=w: fp8_gemv_ref(x, w) for w in ws])
        base = both([lambda w16=w16: F.linear(x, w16) for w16 in w16s])
        for path, label in (("rows", "CUDA C++ rows"), ("mma", "CUDA C++ mma")):
            with guard(f"fp8 gemv {path} B={B}"):
                ck = _cuda()
                err = _relerr(ck.fp4_gemv_cuda(x, w, path=path), fp8_gemv_ref(x, w))
                tab.add(f"fp8_gemv B={B} {N}x{K} {label}", both([lambda w=w: ck.fp4_gemv_cuda(x, w, path=path) for w in ws]),
                        ref=ref, nbytes=nbytes, base=base, base_name="bf16 F.linear", err=err)


def bench_routed(tab, sweep):
    from dsv4_kernels.fused_swiglu.reference import swiglu_ref
    from dsv4_kernels.moe_gemv import triton_kernel as tk
    from dsv4_kernels.moe_gemv.reference import GROUP, dequant, random_weight, routed_experts_ref
    E, dim, inter, k, limit = 256, 4096, 2048, 6, 10.0
    for fmt in ("mxfp4", "nvfp4"):
        w1, w3 = random_weight(fmt, inter, dim, E, device="cuda"), random_weight(fmt, inter, dim, E, device="cuda")
        w2 = random_weight(fmt, dim, inter, E, device="cuda")
        per_expert = 3 * (inter * dim // 2 + inter * dim // GROUP[fmt])
        for B in (1, 4, 8):
            g = torch.Generator(device="cuda").manual_seed(B)
            x = torch.randn(B, dim, device="cuda", generator=g).bfloat16()
            sets = routings(B, E, k, per_expert, g)      # of the same tokens, taken in turn
            # the reference expert loop: bf16 weights dequantised at load, tokens grouped per expert
            one = lambda w, e: dequant((w[0], w[1][e], w[2][e], None if w[3] is None else w[3][e], None), dtype=torch.bfloat16)  # noqa: E731
            W = {e: (one(w1, e), one(w3, e), one(w2, e)) for _, _, hit in sets for e in hit}

            def loop(idx, wts, hit):
                groups = [(e, *(idx == e).nonzero(as_tuple=True)) for e in hit]

                def run():
                    y = torch.zeros(B, dim, device="cuda")
                    for e, rows, slots in groups:
                        xe = x[rows]
                        h = swiglu_ref(F.linear(xe, W[e][0]), F.linear(xe, W[e][1]), limit)
                        h = (wts[rows, slots, None] * h).to(x.dtype)
                        y.index_add_(0, rows, F.linear(h, W[e][2]).float())
                    return y
                return run

            hits = sum(len(hit) for _, _, hit in sets) / len(sets)
            nbytes = round(hits * per_expert)
            name = f"routed {fmt} B={B} top-{k}/{E} ({hits:.0f} hit{f', {len(sets)} routings' if len(sets) > 1 else ''})"
            base = both([loop(*s_) for s_ in sets])
            idx, wts, _ = sets[0]
            want = routed_experts_ref(x, idx, wts, w1, w3, w2, limit)
            ref = (timed([lambda i=i, t=t: routed_experts_ref(x, i, t, w1, w3, w2, limit) for i, t, _ in sets], 2, 1), None)
            for cfg in (SWEEP_ROUTED if sweep else [tk.CONFIG["up"]]):
                runs = [lambda i=i, t=t: tk.routed_experts_triton(x, i, t, w1, w3, w2, limit, cfg, cfg) for i, t, _ in sets]
                with guard(f"routed {fmt} B={B} {cfg}"):
                    err = _relerr(runs[0](), want)
                    tab.add(f"{name} {cfg}", both(runs), ref=ref, nbytes=nbytes, base=base, base_name="expert loop bf16", err=err)
            for path, label in (("rows", "CUDA C++ rows"), ("mma", "CUDA C++ mma")):
                with guard(f"routed cuda {path} {fmt} B={B}"):
                    ck = _cuda()
                    runs = [lambda i=i, t=t: ck.routed_experts_cuda(x, i, t, w1, w3, w2, limit, path=path) for i, t, _ in sets]
                    err = _relerr(runs[0](), want)
                    tab.add(f"{name} {label}", both(runs), ref=ref, nbytes=nbytes, base=base, base_name="expert loop bf16", err=err)


def bench_swiglu(tab):
    from dsv4_kernels.fused_swiglu.reference import fused_swiglu_ref
    from dsv4_kernels.fused_swiglu.triton_kernel import fused_swiglu_triton
    for rows, inter in ((6, 2048), (48, 2048), (64, 4096)):
        h = torch.randn(rows, 2 * inter, device="cuda").bfloat16()
        tab.add(f"fused_swiglu {rows}x2x{inter} bf16", both(lambda: fused_swiglu_triton(h, 10.0)),
                ref=both(lambda: fused_swiglu_ref(h, 10.0)), nbytes=rows * inter * 6)


def bench_compressor(tab):
    from dsv4_kernels.compressor_reduce.reference import compressor_reduce_ref
    from dsv4_kernels.compressor_reduce.triton_kernel import compressor_reduce_triton
    for n, s, d in ((4096, 8, 512), (256, 128, 512), (4, 8, 512)):
        kv, gate = torch.randn(n, s, d, device="cuda"), torch.randn(n, s, d, device="cuda")
        bias = torch.randn(s, d, device="cuda")
        err = _relerr(compressor_reduce_triton(kv, gate, bias), compressor_reduce_ref(kv, gate, bias))
        tab.add(f"compressor_reduce N={n} S={s} D={d}", both(lambda: compressor_reduce_triton(kv, gate, bias)),
                ref=both(lambda: compressor_reduce_ref(kv, gate, bias)), nbytes=(2 * kv.numel() + bias.numel() + n * d) * 4,
                err=err)


def bench_kvcache(tab):
    from dsv4_kernels.nvfp4_kvcache.reference import dequantize_nvfp4_kvcache_ref
    from dsv4_kernels.nvfp4_kvcache.triton_kernel import dequantize_nvfp4_kvcache_triton
    for M, N in ((16384, 512), (65536, 512)):
        fp4 = torch.randint(0, 256, (M, N // 2), dtype=torch.uint8, device="cuda")
        sf = torch.rand(M, N // 16, device="cuda").to(torch.float8_e4m3fn)
        gs = torch.rand(M, device="cuda")
        tab.add(f"nvfp4_kvcache M={M} N={N} -> bf16", both(lambda: dequantize_nvfp4_kvcache_triton(fp4, sf, gs, M, N)),
                ref=both(lambda: dequantize_nvfp4_kvcache_ref(fp4, sf, gs, M, N)), nbytes=M * N // 2 + M * N // 16 + M * 4 + M * N * 2)


def bench_sampler(tab):
    """The sampler's pick after the sort and its penalty-and-scale (Triton vs reference), and the whole
    Sampler.forward with each, at the Flash vocab; the settings of benchmarks/decode.py (temperature 0.8, top-k 50, top-p 0.95) and a repetition ring.
    %copy counts 12 bytes per token (the pick reads sorted logits and ids; the penalty reads the logits, writes
    their scaled copy); the relerr column holds the fraction of rows whose pick differs from the reference's (exp, log and the
    scan round differently), and for the penalty 0 when bit for bit equal, else 1."""
    from dsv4_kernels.sampling.reference import penalize_scale_ref, sample_pick_ref
    from dsv4_kernels.sampling.triton_kernel import penalize_scale_triton, sample_pick_triton
    from dsv4_model.sampler import Sampler
    V = 129280
    for n in (1, 8):
        srt, order = torch.randn(n, V, device="cuda").mul(2).sort(dim=-1, descending=True, stable=True)
        k, p = torch.full((n,), 50, device="cuda"), torch.full((n,), 0.95, device="cuda")
        rows = torch.randint(0, 2**32, (n,), device="cuda"), torch.zeros(n, dtype=torch.long, device="cuda")
        same = (sample_pick_triton(srt, order, k, p, *rows) == sample_pick_ref(srt, order, k, p, *rows)).float().mean()
        tab.add(f"sample_pick B={n} V={V} (top-k 50, top-p 0.95)", both(lambda: sample_pick_triton(srt, order, k, p, *rows)),
                ref=both(lambda: sample_pick_ref(srt, order, k, p, *rows)), nbytes=n * V * 12, err=1 - same.item())
        logits = torch.randn(n, V, device="cuda") * 2
        ring = torch.randint(0, V, (n, 64), device="cuda")
        pen, temp = torch.full((n,), 1.1, device="cuda"), torch.full((n,), 0.8, device="cuda")
        same = all(torch.equal(a, b) for a, b in zip(penalize_scale_triton(logits, ring, pen, temp),
                                                     penalize_scale_ref(logits, ring, pen, temp)))
        tab.add(f"penalize_scale B={n} V={V} ring 64", both(lambda: penalize_scale_triton(logits, ring, pen, temp)),
                ref=both(lambda: penalize_scale_ref(logits, ring, pen, temp)), nbytes=n * V * 12, err=0.0 if same else 1.0)
        run = {}
        for kern in (True, False):
            s = Sampler(n, V, device="cuda", kernels=kern)
            for r in range(n):
                s.configure(r, temperature=0.8, top_k=50, top_p=0.95, repetition_penalty=1.1, seed=r)
            for _ in range(64):                                    # a full ring of recent tokens
                s.observe(torch.randint(0, V, (n,), device="cuda"))
            run[kern] = both(lambda s=s: s(logits))
        tab.add(f"Sampler.forward B={n} V={V} (penalty, sort, pick, greedy)", run[True], ref=run[False])


# (MIN_SPLIT, PROGRAMS, WARPS_WIDE, STAGES, PV_COLS) beside the chosen ones, for the official bf16 path: the two
# launches at 64 (the default), 32 and 128 head_dim columns per program of the second, and PV_COLS 0: one launch
ATTENTION_SWEEP = [(16, 264, 8, None, 0), (16, 264, 8, None, 32), (16, 264, 8, None, 128)]
ATTENTION_KNOBS = ("MIN_SPLIT", "PROGRAMS", "WARPS_WIDE", "STAGES", "PV_COLS")


def bench_attention(tab, sweep):
    """The decode attention core (Triton: official bf16 numerics in two launches, the scores of every 64-key step
    side by side, then the online softmax and P . V split over head_dim) vs the reference (casts, two fp32 cuBLAS
    batched GEMMs, masked_fill, cat, softmax) at Flash's heads (64 of 512): CSA layers read a window of 128 and the
    indexer's 512 picks, HCA layers the window and the closed blocks (32 at 4096 tokens, 512 at 65536); as one list
    (the reference decode's) and on the window ring (the graph-safe decode's, against its one-list values). %copy
    counts the keys (bf16) and q read once and the output written. With --sweep each configuration's row says whether
    its output has the chosen configuration's bits."""
    from dsv4_kernels.attention import triton_kernel as tk
    from dsv4_kernels.attention.reference import attention_ref
    H, D, W = 64, 512, 128
    chosen = tuple(getattr(tk, k) for k in ATTENTION_KNOBS)
    for n, N, what in ((1, 640, "CSA"), (8, 640, "CSA"), (1, 160, "HCA"), (8, 160, "HCA"), (8, 640, "HCA 64k")):
        q = torch.randn(n, 1, H, D, device="cuda").bfloat16()
        K = torch.randn(n, 1, N, D, device="cuda").bfloat16()
        mask = torch.rand(n, 1, N, device="cuda") > 0.1
        mask[:, :, :W] = True
        sink = torch.randn(H, device="cuda")
        order = ((torch.arange(W, device="cuda") + 37) % W).expand(n, W).contiguous()
        ring = torch.empty(n, W, D, device="cuda", dtype=torch.bfloat16)
        ring.scatter_(1, order.unsqueeze(-1).expand(-1, -1, D), K[:, 0, :W])          # the list's window, in slots
        comp, wv, cv = K[:, 0, W:], mask[:, 0, :W].contiguous(), mask[:, 0, W:].contiguous()
        forms = {"list": lambda: tk.attention_triton(q, K, mask, sink, D ** -0.5),
                 "ring": lambda: tk.attention_ring_triton(q, ring, order, wv, comp, cv, sink, D ** -0.5).float()}
        run_ref = lambda: attention_ref(q, K, mask, sink, D ** -0.5)  # noqa: E731
        want, ref = run_ref(), both(run_ref)
        for form, run in forms.items():
            bits = run()
            for cfg in [chosen] + (ATTENTION_SWEEP if sweep else []):
                with knobs(tk, ATTENTION_KNOBS, cfg):
                    got = run()
                    label = f" warps {cfg[2]} stages {cfg[3]} pv_cols {cfg[4]} " \
                            f"{'same bits' if torch.equal(got, bits) else 'OTHER BITS'}" if sweep else ""
                    tab.add(f"decode_attention {form} {what} B={n} N={N} bf16{label}", both(run), ref=ref,
                            nbytes=n * N * D * 2 + n * H * D * 2 + n * H * D * 4, err=_relerr(got, want))


TOPK_SWEEP = [(64, 128), (32, 128), (16, 128), (64, 256), (32, 256)]   # (BI, BJ) beside the chosen ones


def bench_indexer(tab, sweep):
    """The indexer's scores and their top-k (Triton, one launch each) vs the references (casts, an fp32 batched GEMM,
    ReLU, weighting, sum over heads; the stable sort) at Flash's indexer (64 heads of 128) over 1024 compressed blocks
    (4096 tokens) and 16384 (65536). %copy counts the keys (bf16) read once and the scores written."""
    from dsv4_kernels.indexer.reference import index_scores_ref
    from dsv4_kernels.indexer.triton_kernel import index_scores_triton
    H, D = 64, 128
    for n, N in ((1, 1024), (8, 1024), (8, 16384)):
        q = torch.randn(n, 1, H, D, device="cuda").bfloat16()
        k = torch.randn(n, N, D, device="cuda").bfloat16()
        w = torch.randn(n, 1, H, device="cuda")
        err = _relerr(index_scores_triton(q, k, w), index_scores_ref(q, k, w))
        tab.add(f"index_scores B={n} N={N} bf16", both(lambda: index_scores_triton(q, k, w)),
                ref=both(lambda: index_scores_ref(q, k, w)), nbytes=n * N * D * 2 + n * N * 4, err=err)
    # the top-512 of the scores (the reference is the stable sort); relerr: 0 when the same indices, else 1
    from dsv4_kernels.indexer import triton_kernel as ik
    from dsv4_kernels.indexer.reference import topk_blocks_ref
    chosen = (ik.BI, ik.BJ)
    for n, N in ((1, 1024), (8, 1024), (8, 4096)):
        s = torch.randn(n, N, device="cuda").relu()
        want, ref = topk_blocks_ref(s, 512), both(lambda: topk_blocks_ref(s, 512))
        for cfg in [chosen] + (TOPK_SWEEP if sweep else []):
            with knobs(ik, ("BI", "BJ"), cfg):         # the launch's block sizes
                same = torch.equal(ik.topk_blocks_triton(s, 512), want)
                tab.add(f"topk_blocks B={n} N={N} k=512" + (f" BI {cfg[0]} BJ {cfg[1]}" if sweep else ""),
                        both(lambda: ik.topk_blocks_triton(s, 512)), ref=ref, nbytes=n * N * 4 + n * 512 * 8,
                        err=0.0 if same else 1.0)


# (BN, BK, num_warps, num_stages, DECODE) tried with --sweep (the first session's sweep of DECODE 0 tiles found
# BN=64, BK=256, 4 warps best: benchmarks/results/kernels-h200-1.txt)
SWEEP = [(64, 256, 4, 3, 2), (64, 256, 4, 3, 1), (64, 256, 4, 3, 0)]
SWEEP_ROUTED = [(64, 256, 4, 3, 2), (64, 256, 4, 3, 1)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--sweep", action="store_true", help="also time the tile configurations in SWEEP, the attention core's ATTENTION_SWEEP and the top-k's TOPK_SWEEP")
    ap.add_argument("--only", default="gemv,fp8,head,bf16,routed,swiglu,compressor,kvcache,sampler,attention,indexer")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/kernels.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    import triton
    from dsv4_kernels.moe_gemv.triton_kernel import CONFIG
    bw = copy_bandwidth()
    torch.manual_seed(0)
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC  {torch.cuda.get_device_name()}  torch {torch.__version__}  "
          f"triton {triton.__version__}  copy bandwidth {bw / 1e9:.0f} GB/s  FP4 configs {CONFIG}")
    print(HEADER)
    tab = Table(bw)
    only = set(a.only.split(","))
    for name, fn in (("compressor", lambda: bench_compressor(tab)), ("routed", lambda: bench_routed(tab, a.sweep)),
                     ("gemv", lambda: bench_gemv(tab, a.sweep)), ("fp8", lambda: bench_fp8(tab)), ("head", lambda: bench_head(tab)),
                     ("bf16", lambda: bench_bf16(tab)), ("swiglu", lambda: bench_swiglu(tab)),
                     ("kvcache", lambda: bench_kvcache(tab)), ("sampler", lambda: bench_sampler(tab)),
                     ("attention", lambda: bench_attention(tab, a.sweep)), ("indexer", lambda: bench_indexer(tab, a.sweep))):
        if name in only:
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - one broken kernel must not hide the others' numbers
                print(f"{name}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:300]}", flush=True)
            torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
                       "copy_GBps": bw / 1e9, "rows": tab.rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
