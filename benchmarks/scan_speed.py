"""Static scan speed over the installed torch package vs bare `ast.parse` of the same files, in the same run.

    python benchmarks/scan_speed.py [--jobs N]

Prints: files, cold scan (no cache, parallel), warm scan (per-file cache), sequential ast.parse, and the ratios.
"""
from __future__ import annotations

import argparse
import ast
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> int:
    import torch
    from graphcheck.static.scanner import discover, scan
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=None)
    a = ap.parse_args()
    top = Path(torch.__file__).parent
    files, _ = discover([str(top)], root=top)
    t0 = time.perf_counter()
    for f in files:
        try:
            ast.parse(f.read_bytes(), str(f))
        except (SyntaxError, ValueError):
            pass
    t_parse = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as cache:
        os.environ["GRAPHCHECK_CACHE_DIR"] = cache
        t0 = time.perf_counter()
        cold = scan([str(top)], root=top, cache=True, jobs=a.jobs)
        t_cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        warm = scan([str(top)], root=top, cache=True, jobs=a.jobs)
        t_warm = time.perf_counter() - t0
    print(f"torch {torch.__version__}: {len(files)} files, {cold.files} scanned, {len(cold.findings)} findings, {os.cpu_count()} cores")
    print(f"bare ast.parse (sequential)  {t_parse:7.2f} s   1.00x")
    print(f"graphcheck scan, cold        {t_cold:7.2f} s   {t_cold / t_parse:4.2f}x of parse")
    print(f"graphcheck scan, warm cache  {t_warm:7.2f} s   {t_warm / t_parse:4.2f}x of parse ({warm.cached} cached)")
    import shutil
    import subprocess
    exe = shutil.which("torchfix")
    if exe is None:
        print("TorchFix: not installed (pip install torchfix to add it to this comparison)")
    else:
        t0 = time.perf_counter()
        subprocess.run([exe, str(top)], capture_output=True)
        t_fix = time.perf_counter() - t0
        print(f"TorchFix (libcst)            {t_fix:7.2f} s   {t_fix / t_parse:4.2f}x of parse")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
