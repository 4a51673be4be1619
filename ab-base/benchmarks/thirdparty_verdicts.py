"""graphcheck's verdict on every third-party target (tests/graphcheck/thirdparty_targets.py), against the verdict
written down for it, on CPU or on a GPU.

    python benchmarks/thirdparty_verdicts.py [--device cpu|cuda] [--out FILE] [--only NAME ...]

A verdict is "unsafe" when the audit or capture-under-test (a real CUDA capture with --device cuda, the CPU
emulation otherwise) reports anything, "safe" otherwise. Exit 1 when any verdict differs from the expected one.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests", "graphcheck")]


def main() -> int:
    import warnings

    import torch
    import thirdparty_targets as tt
    import transformers
    from graphcheck.runtime.attribution import set_root
    from graphcheck.runtime.audit import audit
    from graphcheck.runtime.capture import capture_test
    from graphcheck.target import build_target
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--out", help="write the table to this file too (replaced atomically)")
    ap.add_argument("--only", nargs="*", help="target names (default: all)")
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: no CUDA device is available (expected torch.cuda.is_available())", file=sys.stderr)
        return 2
    names = a.only or sorted(tt.EXPECTED)
    unknown = [n for n in names if n not in tt.EXPECTED]
    if unknown:
        print(f"--only: unknown target {unknown[0]!r}; expected one of {', '.join(sorted(tt.EXPECTED))}", file=sys.stderr)
        return 2
    set_root(ROOT)
    warnings.filterwarnings("ignore")
    dev_name = torch.cuda.get_device_name() if a.device == "cuda" else platform.processor() or "cpu"
    lines = [f"# graphcheck third-party verdicts, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: device {a.device} "
             f"({dev_name}), torch {torch.__version__}, transformers {transformers.__version__}, python {platform.python_version()}",
             f"# command: python benchmarks/thirdparty_verdicts.py --device {a.device}",
             "| target | expected | graphcheck | right | findings (rule file:line) | seconds |",
             "| --- | --- | --- | --- | --- | --- |"]
    wrong = 0
    for name in names:
        exp = tt.EXPECTED[name]
        t0 = time.perf_counter()
        try:
            build = lambda: build_target(tt.FACTORIES[name], a.device, {"device": a.device})  # noqa: E731
            fs = audit(build()) + capture_test(build(), device=a.device)
            got = "unsafe" if fs else "safe"
            ok = got == exp.verdict and set(exp.rules) <= {f.rule for f in fs} and not any(f.rule == "GC006" for f in fs)
            shown = sorted({f"{f.rule} {f.path.rsplit('/', 1)[-1]}:{f.line}" for f in fs})
        except Exception as e:       # building the target failed: a wrong row, not a crash of the table
            got, ok, shown = "error", False, [f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"]
        wrong += not ok
        lines.append(f"| {name} | {exp.verdict} {'+'.join(exp.rules)} | {got} | {'yes' if ok else 'NO'} | "
                     f"{', '.join(shown[:10]) or '-'} | {time.perf_counter() - t0:.1f} |")
        print(lines[-1], flush=True)
    lines.append(f"# {len(names) - wrong} of {len(names)} verdicts right")
    text = "\n".join(lines) + "\n"
    print(lines[-1])
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, a.out)
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
