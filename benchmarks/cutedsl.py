"""CuTeDSL on the GPU: the kernels' A/B against the current path, the planted CuTeDSL hazards graphcheck must catch,
`graphcheck capture` of the CuTeDSL targets over 300 replayed steps, and the clamp-order mutation.

    python benchmarks/cutedsl.py [--only ab,hazards,capture,mutation] [--out DIR] [--replays 300]

Needs a CUDA device of compute capability >= 9.0 and nvidia-cutlass-dsl importable (on the device image:
`export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH`); `bash benchmarks/h200.sh
cutedsl` runs it with the CuTeDSL tests. Writes one log per part under --out (stdout too); exit 1 when a check
fails (a hazard not caught at its line, a capture finding, a mutant that passes, parity off).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from graph_timing import graph_us

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "graphcheck"))      # cute_planted, planted


def _log(out: Path, name: str, lines: list[str]) -> None:
    text = "\n".join(lines) + "\n"
    print(text, end="")
    (out / name).write_text(text)


def ab(out: Path) -> bool:
    """CuTeDSL vs the current kernel at B = 1, 8, 32: the routed experts at Flash sizes (top-6 of 256 experts, dim
    4096, inter 2048, MXFP4, bf16 x with the FP8 activation simulation) and the CSA gather (512 of 1024 entries of
    512 bf16)."""
    import dsv4_kernels
    from dsv4_kernels.act_quant import fp8_fake_quant
    from dsv4_kernels.indexer import cutedsl_kernel as gk
    from dsv4_kernels.indexer.reference import gather_picks_ref
    from dsv4_kernels.moe_gemv import cuda_kernel
    from dsv4_kernels.moe_gemv import cutedsl_kernel as mk
    from dsv4_kernels.moe_gemv.reference import random_weight

    def sim(h, fmt, s):
        return fp8_fake_quant(h, 128 if h.shape[-1] % 128 == 0 else h.shape[-1])

    lines = [f"# CuTeDSL A/B on {torch.cuda.get_device_name()}, torch {torch.version.cuda}; per-call us from CUDA-graph "
             "replay (10 calls a graph)", f"current routed_experts path: CUDA C++ builds = {cuda_kernel.build()[0]}", "",
             "| kernel | B | current us | CuTeDSL us | CuTeDSL/current | max rel err vs current |", "|---|---|---|---|---|---|"]
    ok = True
    E, dim, inter, k = 256, 4096, 2048, 6
    g = torch.Generator(device="cuda").manual_seed(1)
    w1, w3 = (random_weight("mxfp4", inter, dim, E, g, "cuda") for _ in range(2))
    w2 = random_weight("mxfp4", dim, inter, E, g, "cuda")
    for B in (1, 8, 32):
        t = time.time()
        ck = mk.CompiledKernels(E, dim, inter, k).prepare([B], sims=(True,))
        compile_s = time.time() - t
        x = torch.randn(B, dim, device="cuda", generator=g).bfloat16()
        idx = torch.rand(B, E, device="cuda", generator=g).argsort(-1)[:, :k]
        wts = torch.rand(B, k, device="cuda", generator=g)
        cur = lambda: dsv4_kernels.routed_experts(x, idx, wts, w1, w3, w2, 10.0, sim)
        new = lambda: ck(x, idx, wts, w1, w3, w2, 10.0, sim)
        a, b = cur(), new()
        err = ((a - b).abs().max() / a.abs().max()).item()
        ok &= err < 3e-2
        ta, tb = graph_us(cur), graph_us(new)
        lines.append(f"| routed_experts E{E} {dim}x{inter} top{k} | {B} | {ta:.1f} | {tb:.1f} | {tb / ta:.2f} | "
                     f"{err:.2e} (compile {compile_s:.1f} s) |")
    N, kk, D = 1024, 512, 512
    for B in (1, 8, 32):
        ck = gk.CompiledKernels().prepare([(B, N, kk, D, torch.bfloat16)])
        ent = torch.randn(B, N, D, device="cuda", generator=g).bfloat16()
        sel = torch.rand(B, N, device="cuda", generator=g).argsort(-1)[:, :kk]
        cur = lambda: gather_picks_ref(ent, sel)
        new = lambda: ck(ent, sel)
        same = torch.equal(cur(), new())
        ok &= same
        ta, tb = graph_us(cur), graph_us(new)
        lines.append(f"| gather_picks {N}x{D} k={kk} (current: torch.gather) | {B} | {ta:.1f} | {tb:.1f} | "
                     f"{tb / ta:.2f} | {'0 (bitwise)' if same else 'DIFFERS'} |")
    _log(out, "cutedsl-ab.md", lines)
    return ok


# (target factory in cute_planted, rule, marker of the line it must name, layer)
HAZARDS = [("compile_in_step", "GC802", "compile-in-step", "capture"), ("compile_in_step", "GC802", "compile-in-step", "audit"),
           ("per_step_key", "GC802", "per-step-key", "capture"), ("per_step_key", "GC802", "per-step-key", "audit"),
           ("jit_direct", "GC802", "jit-direct", "capture"), ("stream0", "GC803", "stream0", "capture"),
           ("no_stream", "GC801", "no-stream", "capture"), ("no_stream", "GC801", "no-stream", "audit"),
           ("pack_readback", "GC104", "pack-readback", "audit"), ("pack_readback", "GC104", "pack-readback", "capture")]


def names(f, rule: str, line: int) -> bool:
    """Whether finding `f` reports `rule` at `line`: as its own rule, or (the capture layer on a capture the hazard made
    fail) as the GC001 whose first hazard, in execution order, is `rule` at that line: CUDA fails the whole capture,
    and the finding names the line and the hazard that broke it."""
    first = (f.evidence.get("first_hazard") or "").split()
    return f.rule == rule or (f.rule == "GC001" and len(first) >= 2 and first[0].endswith(f"cute_planted.py:{line}")
                              and first[1] == rule)


def hazards(out: Path) -> bool:
    import cute_planted as cp

    from graphcheck.runtime.audit import audit
    from graphcheck.runtime.capture import capture_test
    lines, ok = ["# planted CuTeDSL hazards: each must be reported at its line", ""], True
    for name, rule, marker, layer in HAZARDS:
        t = getattr(cp, name)()
        fs = capture_test(t, device="cuda") if layer == "capture" else audit(t)
        want = cp.line_of(marker)
        hit = [f for f in fs if f.path.endswith("cute_planted.py") and f.line == want and names(f, rule, want)]
        ok &= bool(hit)
        lines.append(f"{'CAUGHT' if hit else 'MISSED'} {layer:7} cute_planted.{name}: want {rule} at "
                     f"cute_planted.py:{want}")
        for f in fs:
            lines.append(f"    {f.path}:{f.line} {f.rule} {f.message[:150]}")
    fs = capture_test(cp.clean(), device="cuda") + audit(cp.clean())
    ok &= not fs
    lines.append(f"{'CLEAN' if not fs else 'FINDINGS'} cute_planted.clean: {[(f.rule, f.line) for f in fs]}")
    _log(out, "cutedsl-hazards.txt", lines)
    return ok


def capture(out: Path, replays: int) -> bool:
    """`graphcheck capture` of the CuTeDSL targets with their kernels selected: replay vs eager, bit for bit, over
    `replays` steps, at B = 1, 8 and 32 for the routed experts."""
    from dsv4_kernels import targets

    from graphcheck.runtime.capture import capture_test
    lines, ok = [f"# capture-under-test of the CuTeDSL targets, {replays} replayed steps each (bitwise vs eager)", ""], True
    for name, kw in [("routed_experts_cutedsl", {"tokens": 1}), ("routed_experts_cutedsl", {"tokens": 8}),
                     ("routed_experts_cutedsl", {"tokens": 32}), ("gather_picks_cutedsl", {})]:
        t0 = time.time()
        target = getattr(targets, name)(**kw)
        fs = capture_test(target, steps=replays, device="cuda")
        ok &= not fs
        lines.append(f"{'clean' if not fs else 'FINDINGS'} {target.name}: {len(fs)} finding(s), {time.time() - t0:.1f} s")
        lines += [f"    {f.path}:{f.line} {f.rule} {f.message[:200]}" for f in fs]
    _log(out, "cutedsl-capture.txt", lines)
    return ok


def mutation(out: Path) -> bool:
    """The routed-experts kernel with the old clamp order (min(silu(g), L) instead of silu(min(g, L))) built from
    its own source: the clamp-order parity check must fail on it and pass on the real one."""
    from dsv4_kernels.moe_gemv import cutedsl_kernel as real
    from dsv4_kernels.moe_gemv.reference import random_weight, routed_experts_ref
    src = Path(real.__file__).read_text()
    clamp = "                g = cute.arch.fmin(g, limit)                                                     # <- clamp-order"
    silu = "            silu = g / (cutlass.Float32(1.0) + cute.arch.exp(-g))"
    assert clamp in src and silu in src, "the epilogue lines moved: update benchmarks/cutedsl.py's mutation"
    mutant_src = src.replace(clamp, "                g = g").replace(
        silu, silu + "\n            if cutlass.const_expr(clamp):\n                silu = cute.arch.fmin(silu, limit)")
    d = tempfile.mkdtemp()
    path = os.path.join(d, "clamp_mutant.py")
    Path(path).write_text(mutant_src)
    spec = importlib.util.spec_from_file_location("dsv4_kernels.moe_gemv.clamp_mutant", path)
    mutant = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mutant
    spec.loader.exec_module(mutant)
    T, E, k, dim, inter, L = 4, 8, 2, 256, 128, 0.5
    g = torch.Generator(device="cuda").manual_seed(7)
    w1, w3 = (random_weight("mxfp4", inter, dim, E, g, "cuda") for _ in range(2))
    w2 = random_weight("mxfp4", dim, inter, E, g, "cuda")
    x = torch.randn(T, dim, device="cuda", generator=g) * 40
    idx = torch.rand(T, E, device="cuda", generator=g).argsort(-1)[:, :k]
    wts = torch.rand(T, k, device="cuda", generator=g)
    ref = routed_experts_ref(x, idx, wts, w1, w3, w2, L)
    tol = dict(rtol=2e-2, atol=2e-3 * ref.abs().max().item())
    res = {}
    for name, mod in (("real", real), ("mutant", mutant)):
        ck = mod.CompiledKernels(E, dim, inter, k).prepare([T], dtypes=(torch.float32,), sims=(False,))
        res[name] = torch.allclose(ck(x, idx, wts, w1, w3, w2, L), ref, **tol)
    ok = res["real"] and not res["mutant"]
    _log(out, "cutedsl-mutation.txt", [f"clamp order: real kernel matches the reference: {res['real']}; old-order mutant "
                                       f"matches: {res['mutant']} -> {'OK' if ok else 'FAIL'}"])
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="mutation,hazards,capture,ab")
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu-out"))
    ap.add_argument("--replays", type=int, default=300)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    from dsv4_kernels._cutedsl import available
    ok, why = available()
    if not ok:
        print(f"benchmarks/cutedsl.py: CuTeDSL cannot run here: {why}", file=sys.stderr)
        return 2
    parts = {"ab": lambda: ab(out), "hazards": lambda: hazards(out), "capture": lambda: capture(out, a.replays),
             "mutation": lambda: mutation(out)}
    failed = []
    for p in a.only.split(","):
        t = time.time()
        try:
            good = parts[p]()
        except Exception as e:  # noqa: BLE001 - one part's crash is that part's failure; the others still run
            import traceback
            traceback.print_exc()
            print(f"{p}: {type(e).__name__}: {e}")
            good = False
        print(f"== {p}: {'ok' if good else 'FAILED'} ({time.time() - t:.0f} s)")
        if not good:
            failed.append(p)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
