"""Peak host memory while loading a DSV4 checkpoint, against the checkpoint's largest tensor and a baseline
measured in the same run: every tensor decoded to fp32 at once (what the previous loader did before building
the model).

    python benchmarks/load_memory.py [--preset small] [--formats bf16 release] [--dir DIR] [--device cuda]

Writes each checkpoint with the tests' writer (multi-shard, 256 MB shards), then measures each load in a fresh
subprocess, sampling the process's anonymous resident memory (RssAnon: heap and tensors; file pages mapped by
safetensors are reported apart, as RssFile) every 2 ms. The model is loaded in bf16; on the CPU its final
resident size is about the checkpoint's and "overhead" = peak - final is what loading costs on top; with
--device cuda the host keeps nothing and the peak itself is the loading cost.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def _rss() -> tuple[int, int]:
    anon = file = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            anon = int(line.split()[1]) * 1024
        elif line.startswith("RssFile:"):
            file = int(line.split()[1]) * 1024
    return anon, file


def _fp32_all(root: str) -> dict:
    import torch
    from safetensors import safe_open
    out = {}
    for f in sorted(Path(root).glob("*.safetensors")):
        with safe_open(str(f), "pt") as h:
            for k in h.keys():
                t = h.get_tensor(k)
                out[k] = t.float() if t.dtype.is_floating_point and t.dtype.itemsize > 1 else t.clone()
    return out


def measure(root: str, how: str, device: str) -> dict:
    import torch
    torch.set_num_threads(1)
    import dsv4_model
    from dsv4_model.checkpoint import Plan
    from dsv4_model.config import load_args
    if device.startswith("cuda"):
        torch.zeros(1, device=device)           # the CUDA context is not a loading cost: create it before the baseline
    base = _rss()
    peak = list(base)
    done = threading.Event()

    def sample():
        while not done.is_set():
            a, f = _rss()
            peak[0], peak[1] = max(peak[0], a), max(peak[1], f)
            time.sleep(0.002)
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    t0 = time.perf_counter()
    if how == "dsv4_model.load":
        obj = dsv4_model.load(root, dtype=torch.bfloat16, device=device)
    else:
        obj = _fp32_all(root)
    secs = time.perf_counter() - t0
    done.set()
    th.join()
    final = _rss()
    plan = Plan(Path(root), load_args(Path(root) / "config.json"))
    del obj
    return {"how": how, "seconds": round(secs, 2), "base_anon": base[0], "peak_anon": peak[0], "final_anon": final[0],
            "peak_file": peak[1], "largest_tensor": plan.largest, "checkpoint_bytes": plan.total}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--formats", nargs="+", default=["bf16", "release"])
    ap.add_argument("--dir", default=None, help="where to write the checkpoints (default: a temporary folder)")
    ap.add_argument("--device", default="cpu", help="where dsv4_model.load puts the weights")
    ap.add_argument("--measure", nargs=3, metavar=("ROOT", "HOW", "DEVICE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.measure:
        print(json.dumps(measure(*a.measure)))
        return 0
    import torch

    from dsv4_model import config
    from dsv4_model.checkpoint import random_state, write_checkpoint
    work = Path(a.dir or tempfile.mkdtemp(prefix="dsv4-loadmem-"))
    args = config.PRESETS[a.preset]()
    print(f"torch {torch.__version__}, preset {a.preset}, device {a.device}, {time.strftime('%Y-%m-%d')}")
    rows = []
    for fmt in a.formats:
        root = work / fmt
        if not (root / "config.json").exists():
            state = random_state(args, seed=0)
            write_checkpoint(root, args, state, fmt=fmt, naming="native", shard_bytes=256 << 20)
            del state
        for how in ("fp32 decode of all", "dsv4_model.load"):
            out = subprocess.run([sys.executable, __file__, "--measure", str(root), how, a.device], capture_output=True, text=True)
            if out.returncode:
                print(out.stderr, file=sys.stderr)
                return 1
            r = json.loads(out.stdout.strip().splitlines()[-1])
            r["format"] = fmt
            r["shards"] = len(list(root.glob("*.safetensors")))
            rows.append(r)
            print(json.dumps(r))
    mb = 1 << 20
    print(f"\n{'format':8} {'loader':22} {'ckpt MB':>8} {'shards':>6} {'largest MB':>10} {'peak MB':>8} {'final MB':>8} "
          f"{'overhead MB':>11} {'overhead/largest':>16} {'peak vs fp32-all':>16}")
    for r in rows:
        ref = next(x for x in rows if x["format"] == r["format"] and x["how"] == "fp32 decode of all")
        peak = r["peak_anon"] - r["base_anon"]
        over = r["peak_anon"] - r["final_anon"]
        print(f"{r['format']:8} {r['how']:22} {r['checkpoint_bytes'] / mb:8.0f} {r['shards']:6d} {r['largest_tensor'] / mb:10.0f} "
              f"{peak / mb:8.0f} {(r['final_anon'] - r['base_anon']) / mb:8.0f} {max(over, 0) / mb:11.0f} "
              f"{max(over, 0) / r['largest_tensor']:16.2f} {peak / (ref['peak_anon'] - ref['base_anon']):16.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
