"""Variants of the FP4 decode kernels (kernels/moe_gemv's CUDA sources) timed side by side on one GPU: the
working tree against each patch, in one process, in interleaved rounds (so clock and thermal drift fall on every
variant alike), each variant's outputs compared bit for bit with the tree's.

    python benchmarks/kernel_ab.py [PATCH ...] [--rounds 4] [--only gemv1,gemv8,routed]

A PATCH is a unified diff against the tree as `git diff` writes it (paths a/kernels/...); benchmarks/ab/ holds
the variants waiting for a GPU. Each variant, the tree too, is a copy of kernels/ (patched) imported under its own
package name and built as its own extension, the builds side by side in subprocesses (about 80 s on the H200
image; cached by name and sources under TORCH_EXTENSIONS_DIR). A patch that no longer applies is reported and
skipped (exit 1). Times: CUDA-graph replay of 10 calls or more, taken in turn over as many copies of the weights
(or routings) as make 4x the L2, so that every call reads memory; median over the rounds; %copy = bytes the kernel
must move / time / copy bandwidth of the same run; x tree = tree time / variant time (above 1: the variant is
faster).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
# benchmarks/kernels.py (the timing every benchmark uses) by its path: `kernels` on sys.path is the kernel package
_spec = importlib.util.spec_from_file_location("bench_kernels", Path(__file__).with_name("kernels.py"))
_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bench)
copy_bandwidth, graphed, rotation, routings = _bench.copy_bandwidth, _bench.graphed, _bench.rotation, _bench.routings

EXT = 'name="dsv4_fp4_rows"'          # the extension's name in moe_gemv/cuda_kernel.py; each variant gets its own


def package(name: str) -> str:
    return "abk_" + re.sub(r"\W", "_", name)


def stage(name: str, patch: Path | None, work: Path) -> Path | None:
    """A copy of kernels/ as package `package(name)` under work/name (returned: the directory to import from),
    with the patch applied and the extension renamed; None (and a line saying why) if the patch does not apply."""
    root = work / name
    shutil.copytree(ROOT / "kernels", root / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    if patch is not None:
        if shutil.which("patch") is None:
            raise SystemExit("kernel_ab: the `patch` program is needed to apply the variants, found none on PATH")
        r = subprocess.run(["patch", "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "-i", str(patch)],
                           cwd=root, capture_output=True, text=True)
        if r.returncode:
            why = (r.stdout + r.stderr).strip().splitlines()
            print(f"{name}: {patch} does not apply to the tree ({why[-1] if why else 'patch failed'}): skipped", flush=True)
            return None
    ck = root / "kernels" / "moe_gemv" / "cuda_kernel.py"
    src = ck.read_text()
    if src.count(EXT) != 1:
        raise SystemExit(f"kernel_ab: expected {EXT} once in {ck}, found it {src.count(EXT)} times")
    ck.write_text(src.replace(EXT, f'name="dsv4_fp4_ab_{package(name)[4:]}"'))
    (root / "kernels").rename(root / package(name))
    return root


def build_all(roots: dict[str, Path]) -> dict[str, str]:
    """Build every variant's extension in its own process, all at once; {name: why it failed} for the failures."""
    code = "import importlib, sys; c = importlib.import_module(sys.argv[1] + '.moe_gemv.cuda_kernel'); ok, why = c.build(); print(why); sys.exit(0 if ok else 1)"
    procs = {n: subprocess.Popen([sys.executable, "-c", code, package(n)], env={**os.environ, "PYTHONPATH": f"{r}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for n, r in roots.items()}
    failed = {}
    for n, p in procs.items():
        out = p.communicate()[0]
        if p.returncode:
            failed[n] = out.strip().splitlines()[-1] if out.strip() else f"exit {p.returncode}"
    return failed


def workloads(ref, only: set[str]):
    """(label, bytes moved per call, [call(module) -> output tensor, one per input set: see `rotation`]) for the decode's FP4 shapes (Flash: dim 4096, moe_inter
    2048, top-6 of 256 experts)."""
    out = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for fmt in ("mxfp4", "nvfp4"):
        for B, N, K in ((1, 8192, 8192), (1, 4096, 4096), (8, 8192, 8192)):
            if f"gemv{B}" not in only:
                continue
            x = torch.randn(B, K, device="cuda", generator=g).bfloat16()
            nbytes = N * K // 2 + N * K // ref.GROUP[fmt] + B * (K + N) * 2
            ws = [ref.random_weight(fmt, N, K, device="cuda") for _ in range(rotation(nbytes))]  # memory, not the L2
            calls = [lambda m, x=x, w=w: m.fp4_gemv_cuda(x, w, path="mma") for w in ws]
            out.append((f"gemv {fmt} B={B} {N}x{K}", nbytes, calls))
            if B == 1 and N * K > 2 ** 25:      # what the L2 gave the timings that read one weight again and again
                out.append((f"gemv {fmt} B={B} {N}x{K} one weight (L2)", nbytes, calls[:1]))
        if "routed" in only:
            E, dim, inter, k, limit = 256, 4096, 2048, 6, 10.0
            w1, w3 = ref.random_weight(fmt, inter, dim, E, device="cuda"), ref.random_weight(fmt, inter, dim, E, device="cuda")
            w2 = ref.random_weight(fmt, dim, inter, E, device="cuda")
            per_expert = 3 * (inter * dim // 2 + inter * dim // ref.GROUP[fmt])
            for B in (1, 8):
                x = torch.randn(B, dim, device="cuda", generator=g).bfloat16()
                sets = routings(B, E, k, per_expert, g)      # taken in turn
                hit = sum(len(h) for _, _, h in sets) / len(sets)
                out.append((f"routed {fmt} B={B} top-{k}/{E} ({hit:.0f} hit, {len(sets)} routings)", round(hit * per_expert),
                            [lambda m, a=(x, i, t, w1, w3, w2, limit): m.routed_experts_cuda(*a, path="mma")
                             for i, t, _ in sets]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("patches", nargs="*", type=Path, help="unified diffs against the tree (default: benchmarks/ab/*.patch)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--only", default="gemv1,gemv8,routed", help="workload groups: gemv1, gemv8, routed")
    a = ap.parse_args()
    only = set(a.only.split(","))
    if only - {"gemv1", "gemv8", "routed"} or a.rounds < 1:
        print(f"kernel_ab: --only takes gemv1, gemv8, routed and --rounds >= 1, found {a.only!r}, {a.rounds}", file=sys.stderr)
        return 2
    patches = a.patches or sorted((ROOT / "benchmarks" / "ab").glob("*.patch"))
    for p in patches:
        if not p.is_file():
            print(f"kernel_ab: {p}: no such patch file", file=sys.stderr)
            return 2
    names = {"tree": None} | {p.stem: p.resolve() for p in patches}
    if len({package(n) for n in names}) != len(patches) + 1:     # one package and extension name per variant
        print("kernel_ab: two patches share a name up to punctuation (early-fetch, early_fetch), or one is named "
              "tree.patch", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("kernel_ab: no CUDA device (the variants are CUDA kernels)", file=sys.stderr)
        return 2
    status = 0
    with tempfile.TemporaryDirectory(prefix="kernel_ab-") as tmp:
        roots = {n: r for n, p in names.items() if (r := stage(n, p, Path(tmp))) is not None}
        status |= len(roots) != len(names)
        for n, why in build_all(roots).items():
            print(f"{n}: the extension did not build: {why}", flush=True)
            if n == "tree":
                return 1
            del roots[n]
            status = 1
        sys.path[:0] = [str(r) for r in roots.values()]
        mods = {n: importlib.import_module(package(n) + ".moe_gemv.cuda_kernel") for n in roots}
        ref = importlib.import_module(package("tree") + ".moe_gemv.reference")
        bw = copy_bandwidth()
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, copy bandwidth {bw / 1e12:.2f} TB/s, "
              f"{a.rounds} rounds; variants: {', '.join(mods)}", flush=True)
        loads = workloads(ref, only)
        same = {}
        bits = lambda t: t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)  # noqa: E731  (-0.0 is not 0.0)
        for label, _, calls in loads:
            want = calls[0](mods["tree"])
            for n, m in mods.items():
                got = calls[0](m)
                same[label, n] = "same" if torch.equal(bits(got), bits(want)) else \
                    f"DIFFERS (max |d| {(got.float() - want.float()).abs().max().item():.3g})"
        times = {(label, n): [] for label, _, _ in loads for n in mods}
        order = list(mods)
        for r in range(a.rounds):
            for label, _, calls in loads:
                for n in order[r % len(order):] + order[:r % len(order)]:     # who goes first rotates per round
                    times[label, n].append(graphed([lambda c=c, m=mods[n]: c(m) for c in calls]))
        print(f"{'workload':44} {'variant':22} {'us':>8} {'%copy':>6} {'x tree':>7}  output vs tree")
        for label, nbytes, _ in loads:
            t0 = statistics.median(times[label, "tree"])
            for n in mods:
                t = statistics.median(times[label, n])
                print(f"{label:44} {n:22} {t * 1e6:8.1f} {100 * nbytes / t / bw:5.1f}% {t0 / t:7.3f}  {same[label, n]}")
        status |= any(v != "same" for v in same.values())
    return status


if __name__ == "__main__":
    sys.exit(main())
