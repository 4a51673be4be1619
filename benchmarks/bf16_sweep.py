"""The bf16-weight GEMV's tile and launch shape, swept on the decode's narrow shapes (issue 37): the compressors'
joined projections (CSA: 2560 x 4096, HCA: 1024 x 4096), the router (256 x 4096) at B = 1 and 8, each variant timed
per call in a CUDA graph of 20 calls against the module's default shape in the same run, ranked per B by its sum
over that B's shapes, its output checked against the fp32 product of the widened operands (relative 1e-5: a
variant sums in another order). `--best FILE`: the fastest per B, for `decode.py --bf16-shape`.

    python benchmarks/bf16_sweep.py [--shapes 1x2560x4096,...] [--out FILE] [--best FILE] [--f32]
"""
from __future__ import annotations

import argparse
import itertools
import sys

import torch

from graph_timing import graph_us


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="1x2560x4096,1x1024x4096,1x256x4096,8x2560x4096,8x256x4096")
    ap.add_argument("--out", default=None)
    ap.add_argument("--f32", action="store_true", help="also the fp32 mix kernel's cluster sizes (builds the CUDA extension)")
    ap.add_argument("--best", default=None, help="write the fastest shape per x-row count, as decode.py --bf16-shape takes it")
    a = ap.parse_args()
    from dsv4_kernels.bf16_gemv import triton_kernel as tk
    lines = [f"{torch.cuda.get_device_name()}, torch {torch.__version__}; default bk={tk.BK} waves={tk.WAVES} "
             f"pairs={tk.PAIRS} warps=4"]
    variants = [dict(bk=bk, waves=wv, pairs=32, warps=wp) for bk, wv, wp in
                itertools.product((128, 256), (1, 2, 4), (4, 8))]
    variants += [dict(bk=256, waves=wv, pairs=64, warps=wp) for wv in (1, 2) for wp in (4, 8)]
    # more weight rows per program: at 8 rows of x a program of 4 weight rows reads twice as many x bytes (from L2) as
    # weight bytes (run 71: the HCA layer's joined product, 8 MB, took 17.6 us at B=8)
    variants += [dict(bk=bk, waves=1, pairs=128, warps=wp) for bk in (64, 128) for wp in (4, 8)]
    groups: dict[int, list[tuple[int, int]]] = {}
    for spec in a.shapes.split(","):
        B, N, K = (int(v) for v in spec.split("x"))
        groups.setdefault(B, []).append((N, K))
    best = []
    for B, shapes in groups.items():
        g = torch.Generator(device="cuda").manual_seed(0)
        cases = []
        for N, K in shapes:
            x = torch.randn(B, K, device="cuda", generator=g).bfloat16()
            w = (torch.randn(N, K, device="cuda", generator=g) * 0.02).bfloat16()
            cases.append((N, K, x, w, x.float() @ w.float().T))
        base = [graph_us(lambda x=x, w=w: tk.bf16_linear_triton(x, w)) for N, K, x, w, _ in cases]
        rows = []
        for v in variants:
            times, notes = [], []
            try:
                for N, K, x, w, ref in cases:
                    y = tk.bf16_linear_triton(x, w, **v)
                    err = float((y - ref).abs().max() / ref.abs().max())
                    times.append(graph_us(lambda x=x, w=w, v=v: tk.bf16_linear_triton(x, w, **v)))
                    notes.append("" if err < 1e-5 else f" WRONG (rel err {err:.1e} at N={N})")
            except Exception as e:          # a shape Triton cannot build (registers, shared memory): say so
                lines.append(f"  B={B} {v}: failed: {type(e).__name__}: {str(e)[:80]}")
                continue
            rows.append((sum(times), times, v, "".join(notes)))
        rows.sort(key=lambda r: r[0])
        head = ", ".join(f"{N}x{K} {t:.2f} us ({N * K * 2 / t / 1e3:.0f} GB/s)" for (N, K, *_), t in zip(cases, base))
        lines.append(f"== B={B}: default (bk={tk.BK} waves={tk.WAVES} pairs={tk.PAIRS} warps=4) {sum(base):.2f} us: {head}")
        for tot, times, v, note in rows[:8]:
            per = ", ".join(f"{t:.2f}" for t in times)
            lines.append(f"  {tot:7.2f} us {sum(base) / tot:5.2f}x  [{per}]  bk={v['bk']} waves={v['waves']} "
                         f"pairs={v['pairs']} warps={v['warps']}{note}")
        print("\n".join(lines[-9:]), flush=True)
        if rows and not rows[0][3] and rows[0][0] < sum(base):
            v = rows[0][2]
            best.append(f"{tk.rows_per_program(B)}={v['bk']},{v['waves']},{v['pairs']},{v['warps']}")
    lines.append(f"best: {';'.join(best) or 'the default'}")
    if a.best:
        with open(a.best, "w") as fh:
            fh.write(";".join(best))
    # the fp32 mixes' kernel (mHC: 24 x 16384 fp32, the CUDA rows kernel): its cluster size (0: whole rows per warp;
    # 1..8: blocks of 8 warps splitting K, in clusters of that many)
    from dsv4_kernels.moe_gemv import cuda_kernel as ck
    if a.f32 and ck.build()[0]:
        for B in (1, 8):
            N, K = 24, 16384
            x = torch.randn(B, K, device="cuda").bfloat16()
            w = torch.randn(N, K, device="cuda") * 0.01
            ref = x.float() @ w.T
            default = ck.f32_cluster(N, K)
            res = []
            for cl in (0, 1, 2, 4, 8):
                y = torch.empty(B, N, dtype=torch.float32, device="cuda")
                try:
                    ck._ext().f32_rows(x, w, y, cl, 0)
                    err = float((y - ref).abs().max() / ref.abs().max())
                    us = graph_us(lambda cl=cl, y=y: ck._ext().f32_rows(x, w, y, cl, 0))
                except Exception as e:
                    res.append(f"  cluster {cl}: failed: {type(e).__name__}: {str(e)[:80]}")
                    continue
                res.append(f"  cluster {cl}{' (default)' if cl == default else ''}: {us:6.2f} us "
                           f"{N * K * 4 / us / 1e3:5.0f} GB/s  rel err {err:.1e}")
            lines.append(f"== f32 mix B={B} N={N} K={K} ({N * K * 4 / 1e6:.1f} MB)")
            lines += res
            print("\n".join(lines[-6:]), flush=True)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
