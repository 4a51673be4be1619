"""Each kernel vs its PyTorch reference and vs measured HBM copy bandwidth (bytes moved / time); the NVFP4 GEMV
vs a BF16 F.linear of the same matrix. Ratios are against baselines measured in the same run.

    python benchmarks/kernels.py [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def timed(fn, iters: int = 200, warmup: int = 20) -> float:
    """Median-of-5 mean time per call in seconds, CUDA events around a batch of launches."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        torch.cuda.synchronize()
        runs.append(a.elapsed_time(b) / 1e3 / iters)
    return sorted(runs)[2]


def copy_bandwidth() -> float:
    x = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    t = timed(lambda: y.copy_(x), iters=20, warmup=3)
    return 2 * x.numel() / t


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/kernels.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    import dsv4_kernels as kernels
    from dsv4_model.quant import quantize_nvfp4_weight
    from dsv4_kernels.compressor_reduce.build import cuda_compressor_reduce
    from dsv4_kernels.compressor_reduce.reference import compressor_reduce_ref
    from dsv4_kernels.fused_swiglu.reference import fused_swiglu_ref
    from dsv4_kernels.nvfp4_gemv.reference import nvfp4_gemv_ref
    from dsv4_kernels.nvfp4_kvcache.build import cuda_dequantize_nvfp4_kvcache
    from dsv4_kernels.nvfp4_kvcache.reference import dequantize_nvfp4_kvcache_ref

    bw = copy_bandwidth()
    rows = []

    def guarded(name, fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - one broken kernel must not hide the others' numbers
            print(f"{name}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]}")

    def row(name, t_kernel, t_ref, nbytes, extra=None):
        rows.append({"kernel": name, "us": t_kernel * 1e6, "ref_us": t_ref * 1e6, "speedup_vs_ref": t_ref / t_kernel,
                     "GBps": nbytes / t_kernel / 1e9, "frac_copy_bw": nbytes / t_kernel / bw, **(extra or {})})

    def bench_compressor_reduce():
        for n, slots, d in ((4096, 8, 512), (256, 128, 512)):
            kv, gate = torch.randn(n, slots, d, device="cuda"), torch.randn(n, slots, d, device="cuda")
            bias = torch.randn(slots, d, device="cuda")
            nbytes = (2 * kv.numel() + bias.numel() + n * d) * 4
            row(f"compressor_reduce N={n} S={slots} D={d}", timed(lambda: cuda_compressor_reduce(kv, gate, bias)),
                timed(lambda: compressor_reduce_ref(kv, gate, bias)), nbytes)

    guarded("compressor_reduce", bench_compressor_reduce)

    def bench_nvfp4_kvcache():
        M, N = 16384, 512
        fp4 = torch.randint(0, 256, (M, N // 2), dtype=torch.uint8, device="cuda")
        sf = torch.rand(M, N // 16, device="cuda").to(torch.float8_e4m3fn)
        gs = torch.rand(M, device="cuda")
        nbytes = fp4.numel() + sf.numel() + gs.numel() * 4 + M * N * 2
        row(f"nvfp4_kvcache M={M} N={N} ->bf16", timed(lambda: cuda_dequantize_nvfp4_kvcache(fp4, sf, gs, M, N)),
            timed(lambda: dequantize_nvfp4_kvcache_ref(fp4, sf, gs, M, N)), nbytes)

    guarded("nvfp4_kvcache", bench_nvfp4_kvcache)

    def bench_fused_swiglu():
        ok, why = kernels.available("fused_swiglu")
        if ok:
            from dsv4_kernels.fused_swiglu.cute_kernel import fused_swiglu_cute
            h = torch.randn(64, 2 * 4096, device="cuda").bfloat16()
            nbytes = h.numel() * 2 + h.numel()
            row("fused_swiglu 64x2x4096 bf16 (CuTeDSL)", timed(lambda: fused_swiglu_cute(h, 10.0)), timed(lambda: fused_swiglu_ref(h, 10.0)), nbytes)
        else:
            print(f"fused_swiglu skipped: {why}")

    guarded("fused_swiglu", bench_fused_swiglu)

    def bench_nvfp4_gemv():
        ok, why = kernels.available("nvfp4_gemv")
        if ok:
            from dsv4_kernels.nvfp4_gemv.triton_kernel import nvfp4_gemv_triton
            for b, n, k in ((1, 8192, 8192), (4, 8192, 8192), (1, 4096, 16384)):
                q = {name: t.cuda() for name, t in quantize_nvfp4_weight(torch.randn(n, k)).items()}
                w16 = torch.randn(n, k, device="cuda").bfloat16()
                x = torch.randn(b, k, device="cuda").bfloat16()
                nbytes = q["weight"].numel() + q["weight_scale"].numel() + x.numel() * 2 + b * n * 2
                t_k = timed(lambda: nvfp4_gemv_triton(x, q["weight"], q["weight_scale"], q["weight_scale_2"]))
                t_bf16 = timed(lambda: F.linear(x, w16))
                row(f"nvfp4_gemv B={b} N={n} K={k} (Triton)", t_k,
                    timed(lambda: nvfp4_gemv_ref(x, q["weight"], q["weight_scale"], q["weight_scale_2"]), iters=20), nbytes,
                    {"bf16_linear_us": t_bf16 * 1e6, "speedup_vs_bf16": t_bf16 / t_k})
        else:
            print(f"nvfp4_gemv skipped: {why}")

    guarded("nvfp4_gemv", bench_nvfp4_gemv)

    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  copy bandwidth {bw / 1e9:.0f} GB/s")
    print(f"{'kernel':46} {'us':>9} {'ref us':>9} {'x ref':>7} {'GB/s':>7} {'%copy':>6} {'x bf16':>7}")
    for r in rows:
        print(f"{r['kernel']:46} {r['us']:9.2f} {r['ref_us']:9.2f} {r['speedup_vs_ref']:7.1f} {r['GBps']:7.0f} "
              f"{100 * r['frac_copy_bw']:5.0f}% {r.get('speedup_vs_bf16', float('nan')):7.2f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "copy_GBps": bw / 1e9, "rows": rows}, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
