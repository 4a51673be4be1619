"""Static scan speed over the installed torch package vs a bare single-process `ast.parse` of the same files, in
the same run.

    python benchmarks/scan_speed.py [--jobs 2] [--out benchmarks/results/scan_speed-DATE.txt]

Prints: files, the bare parse, a cold scan (no cache, `--jobs` workers) and a warm scan (per-file cache), each as
wall time and as CPU time (this process plus its workers) with its ratio to the parse. On a machine shared with
other work the wall ratios move with the load; the CPU ratios do not.
"""
from __future__ import annotations

import argparse
import ast
import datetime
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _timed(fn):
    w0, c0 = time.perf_counter(), _cpu()
    out = fn()
    return out, time.perf_counter() - w0, _cpu() - c0


def main() -> int:
    import torch
    from graphcheck.static.scanner import discover, scan
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default=None, help="also write this report to a file")
    a = ap.parse_args()
    top = Path(torch.__file__).parent
    files, _ = discover([str(top)], root=top)

    def parse_all():
        for f in files:
            try:
                ast.parse(f.read_bytes(), str(f))
            except (SyntaxError, ValueError):
                pass

    _, p_wall, p_cpu = _timed(parse_all)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["GRAPHCHECK_CACHE_DIR"] = cache
        cold, c_wall, c_cpu = _timed(lambda: scan([str(top)], root=top, cache=True, jobs=a.jobs))
        warm, w_wall, w_cpu = _timed(lambda: scan([str(top)], root=top, cache=True, jobs=a.jobs))
    lines = [
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; python benchmarks/scan_speed.py --jobs {a.jobs}",
        f"torch {torch.__version__}, Python {platform.python_version()}, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f}",
        f"{len(files)} files, {cold.files} scanned, {len(cold.findings)} findings",
        f"{'':32}{'wall':>9}  {'ratio':>6}   {'cpu':>9}  {'ratio':>6}",
        f"{'bare ast.parse (1 process)':32}{p_wall:8.2f}s  {1:6.2f}x   {p_cpu:8.2f}s  {1:6.2f}x",
        f"{f'graphcheck scan, cold, {a.jobs} jobs':32}{c_wall:8.2f}s  {c_wall / p_wall:6.2f}x   {c_cpu:8.2f}s  {c_cpu / p_cpu:6.2f}x",
        f"{'graphcheck scan, warm cache':32}{w_wall:8.2f}s  {w_wall / p_wall:6.2f}x   {w_cpu:8.2f}s  {w_cpu / p_cpu:6.2f}x"
        f"   ({warm.cached} cached)",
    ]
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
