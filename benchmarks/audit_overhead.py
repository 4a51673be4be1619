"""Per-step cost of the runtime layers on the DSV4 tiny decode, against eager measured in the same run.

    python benchmarks/audit_overhead.py [--steps 50]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> int:
    import torch
    from dsv4_model.target import reference_decode
    from graphcheck.runtime.portable import PortableAudit
    from graphcheck.runtime.recorder import Recorder
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    a = ap.parse_args()
    t = reference_decode(max_seq_len=4 * a.steps + 8)
    t.step(t.make_inputs(0))

    def per_step(ctx) -> float:
        t0 = time.perf_counter()
        for k in range(a.steps):
            with ctx():
                t.step(t.make_inputs(k))
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) / a.steps

    import contextlib
    eager = per_step(contextlib.nullcontext)
    rec = Recorder()
    audited = per_step(lambda: PortableAudit(rec))
    print(f"device {t.device}, {a.steps} steps of the tiny decode")
    print(f"eager            {eager * 1e3:8.2f} ms/step   1.00x")
    print(f"portable audit   {audited * 1e3:8.2f} ms/step   {audited / eager:4.2f}x   ({len(rec)} distinct findings)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
