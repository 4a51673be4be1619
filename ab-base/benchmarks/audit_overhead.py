"""Cost of the runtime layers on the DSV4 tiny decode, against eager measured in the same run.

    python benchmarks/audit_overhead.py [--steps 20] [--reps 5] [--device cpu|cuda] [--out FILE]

- audit: one decode step under the portable audit (function mode + kernel net + host tagging) vs one plain step;
  rounds of eager and audited steps are interleaved and the fastest round of each is kept, so a busy machine
  inflates both alike.
- emulation: `emulate()` (the CPU capture stand-in) end to end, vs the eager time of the step executions it makes
  (warm-up, capture pass, state identity, two stability traces, one frozen trace, K replays and K eager twins).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> int:
    import torch
    from dsv4_model.target import reference_decode
    from graphcheck.runtime.emulate import emulate
    from graphcheck.runtime.portable import PortableAudit
    from graphcheck.runtime.recorder import Recorder
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20, help="steps per timed round")
    ap.add_argument("--reps", type=int, default=5, help="interleaved rounds; the fastest of each kind is kept")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", help="also write the table to this file")
    ap.add_argument("--threads", type=int, help="torch intra-op threads (1 keeps a shared machine's noise down)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    t = reference_decode(device=a.device, max_seq_len=2 * a.steps * a.reps + 64)
    with torch.no_grad():
        t.step(t.make_inputs(0))

    def sync():
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()

    def per_step(ctx) -> float:
        inputs = [t.make_inputs(k) for k in range(a.steps)]
        sync()
        t0 = time.perf_counter()
        with torch.no_grad():
            for x in inputs:
                with ctx():
                    t.step(x)
        sync()
        return (time.perf_counter() - t0) / a.steps

    rec = Recorder()
    eager, audited = [], []
    for _ in range(a.reps):
        eager.append(per_step(contextlib.nullcontext))
        audited.append(per_step(lambda: PortableAudit(rec, device=a.device)))
    e, au = min(eager), min(audited)

    steps_k = 3
    execs = 1 + 1 + 1 + 2 + 1 + 2 * steps_k
    emu_times = []
    for _ in range(max(1, a.reps // 2)):
        t0 = time.perf_counter()
        found = emulate(t, steps=steps_k, warmup=1)
        emu_times.append(time.perf_counter() - t0)
    emu = min(emu_times)
    lines = [
        f"# audit_overhead: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, torch {torch.__version__}, "
        f"python {platform.python_version()}, device {a.device}, {os.cpu_count()} cpus",
        f"# command: python benchmarks/audit_overhead.py --steps {a.steps} --reps {a.reps} --device {a.device}"
        + (f" --threads {a.threads}" if a.threads else ""),
        f"eager            {e * 1e3:9.2f} ms/step   1.00x   (fastest of {a.reps} rounds of {a.steps} steps)",
        f"portable audit   {au * 1e3:9.2f} ms/step   {au / e:5.2f}x   ({len(rec)} distinct findings)",
        f"emulation        {emu * 1e3:9.2f} ms total  {emu / (execs * e):5.2f}x the eager time of its {execs} step "
        f"executions ({emu / e:.1f}x one eager step; {len(found)} findings)",
    ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
