"""Decode step speed on a GPU: eager graph-safe step vs its CUDA-graph replay vs torch.compile(reduce-overhead) of
the same step, against the HBM floor (bytes the step must read / measured copy bandwidth), all measured in this run.

    python benchmarks/decode.py                       # tiny preset and Flash layer dimensions, batch 1 and 8
    python benchmarks/decode.py --configs tiny --no-compile
    python benchmarks/decode.py --configs flash --batches 8 --profile   # plus the graph step's top kernels

The step timed is the runner's captured body: decoder step + device sampler + next-token feed. Flash: the real
layer dimensions (dim 4096, 64x512 heads, 256 experts of 2048, top-6), 3 layers, random bf16 weights built on the
device. Ratios, not absolute times, are the result: eager/graph >= 4 on tiny is the target, graph <= compile, and
graph within 3x of the floor on Flash.

torch.compile runs in a child process per (config, batch): a compile that fails inside Inductor can leave the
process's dispatcher state broken (torch 2.11 hit an internal assert on the next allocation), which must not take
the other rows with it. The child compiles the step with the kernels the decoder selects; if that fails it says
why and compiles the PyTorch-reference step instead (the column then carries "ref").
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import torch


def _ms(fn, steps: int) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3 / steps


def copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """Bytes per second of a device-to-device copy (read + write counted)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = _ms(lambda: dst.copy_(src), 20)
    return 2 * nbytes / (ms / 1e3)


def bytes_per_step(model, dec, batch: int) -> int:
    """Weights the step reads in their stored formats (routed experts: the ones hit, at most batch*k per layer;
    embedding: the rows fed) plus the decode state it reads (window rings, compressor states and every compressed
    slot, masked or not). The reference model's own decode state and rope tables are not read by this step."""
    a = model.args
    skip = ("kv_window", "kv_state", "gate_state", "entries", "pos", "rope_main", "rope_compress", "tid2eid")
    total = 0
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if ".experts." in name or name == "embed.weight" or name.rsplit(".", 1)[-1] in skip:
            continue
        total += t.numel() * t.element_size()
    for layer in model.layers:
        ex = layer.ffn.experts
        per_expert = sum(qw.nbytes for qw in (ex.w1, ex.w2, ex.w3)) // ex.n      # ex.n: the experts on this rank
        total += min(ex.n, batch * a.n_activated_experts) * per_expert
    total += batch * a.dim * model.embed.weight.element_size()
    total += sum(b.numel() * b.element_size() for n, b in dec.named_buffers() if b.dim() >= 2)
    return total


def _setup(model, batch: int, kernels: bool = True):
    from dsv4_model.decode import GraphSafeDecoder
    from dsv4_model.runner import Runner
    from dsv4_model.sampler import Sampler
    dec = GraphSafeDecoder(model, batch=batch, kernels=kernels)
    runner = Runner(dec, Sampler(batch, model.args.vocab_size, device="cuda", kernels=kernels), buckets=(batch,),
                    log=lambda s: None)
    for r in range(batch):
        runner.start(r, [0, 5 + r, 6 + r], temperature=0.8, top_k=50, top_p=0.95, seed=r)
    for _ in range(3):
        runner.body(batch)
    return dec, runner


def _model(cfg: str):
    import dsv4_model
    from dsv4_model.synthetic import flash_layers
    from dsv4_model.target import shard_if_distributed
    model = dsv4_model.load("tiny", device="cuda", max_seq_len=512) if cfg == "tiny" else flash_layers()
    return shard_if_distributed(model)


def compile_child(cfg: str, batch: int, steps: int, kernels: bool) -> dict:
    """Runs in its own process: torch.compile(mode="reduce-overhead") of the runner's body."""
    torch.manual_seed(0)
    _, runner = _setup(_model(cfg), batch, kernels)
    fn = torch.compile(runner.body, mode="reduce-overhead")
    for _ in range(3):
        fn(batch)
    return {"compile": _ms(lambda: fn(batch), steps)}


def compile_row(cfg: str, batch: int, steps: int, deadline: float) -> tuple[float, str]:
    """(ms, note) of the compiled step, from a child process; NaN and the reason when both attempts fail or the
    run's compile budget (`deadline`, a perf_counter time) is spent."""
    why = ""
    for kernels in (True, False):
        left = deadline - time.perf_counter()
        if left < 20:
            return float("nan"), "compile: no time left"
        cmd = [sys.executable, __file__, "--compile-child", f"{cfg}:{batch}:{int(kernels)}", "--steps", str(steps)]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=left)
        except subprocess.TimeoutExpired:
            return float("nan"), "compile: timed out"
        last = (p.stdout.strip().splitlines() or [""])[-1]
        if p.returncode == 0 and last.startswith("{"):
            return json.loads(last)["compile"], "" if kernels else "ref"
        err = [ln for ln in p.stderr.splitlines() if "Error" in ln or "error" in ln]
        why = (err[-1] if err else f"exit {p.returncode}")[:160]
        print(f"  torch.compile ({'kernels' if kernels else 'references'}) failed on {cfg} batch {batch}: {why}",
              file=sys.stderr)
    return float("nan"), "failed"


def profile_parts(dec, runner, batch: int) -> None:
    """The decoder step and the sampler, each captured alone and replayed: how the step's time splits."""
    logits = dec.step(batch)
    for name, fn in (("decoder step", lambda: dec.step(batch)), ("sampler", lambda: runner.sampler(logits))):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        print(f"  {name}: {_ms(g.replay, 20):.3f} ms per replay")


def profile_graph(runner, batch: int, top: int = 40) -> None:
    """The CUDA kernels of one graph replay, by total time: where the step's time goes."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            runner.step(batch)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=top, max_name_column_width=70))


def bench(name: str, model, batch: int, steps: int, compile_: bool, bw: float, profile_: bool = False,
          deadline: float = float("inf")) -> dict:
    dec, runner = _setup(model, batch)
    row = {"config": name, "batch": batch}
    row["eager"] = _ms(lambda: runner.body(batch), steps)
    runner.step(batch)                                          # captures the bucket's graph
    row["graph"] = _ms(lambda: runner.step(batch), steps)
    row["floor"] = bytes_per_step(model, dec, batch) / bw * 1e3
    if profile_:
        print(f"== {name} batch {batch}: graph replay, top kernels")
        profile_graph(runner, batch)
        profile_parts(dec, runner, batch)
    del dec, runner
    torch.cuda.empty_cache()
    row["compile"], row["note"] = compile_row(name, batch, steps, deadline) if compile_ else (float("nan"), "")
    return row


def measure(a) -> tuple[float, list[dict]]:
    """The table's rows on this process (or this rank's shard under a process group of more than one rank)."""
    bw = copy_bandwidth()
    rows = []
    compile_ = not a.no_compile and a.nproc == 1          # the child process is a single rank
    only = set(a.compile_rows.split(",")) if a.compile_rows else None
    deadline = time.perf_counter() + a.compile_budget
    for cfg in a.configs.split(","):
        model = _model(cfg)
        for b in (int(x) for x in a.batches.split(",")):
            want = compile_ and (only is None or f"{cfg}:{b}" in only)
            rows.append(bench(cfg, model, b, a.steps, want, bw, a.profile, deadline))
        del model
        torch.cuda.empty_cache()
    return bw, rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="tiny,flash")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--nproc", type=int, default=1, help="tensor-parallel ranks, one GPU each (NCCL); rank 0's times")
    ap.add_argument("--profile", action="store_true", help="print each graph replay's top CUDA kernels")
    ap.add_argument("--compile-rows", default="", help="compile only these CONFIG:BATCH rows (default: all)")
    ap.add_argument("--compile-budget", type=float, default=3600, help="seconds for all torch.compile children")
    ap.add_argument("--compile-child", metavar="CFG:B:KERNELS", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.compile_child:
        cfg, b, k = a.compile_child.split(":")
        print(json.dumps(compile_child(cfg, int(b), a.steps, k == "1")))
        return 0
    if torch.cuda.device_count() < a.nproc:
        print(f"benchmarks/decode.py: needs {a.nproc} CUDA GPU(s), found {torch.cuda.device_count()}", file=sys.stderr)
        return 2
    if a.nproc > 1:                       # every rank runs the same steps on its shard; collectives in the graph
        from graphcheck.runtime.distributed import launch
        bw, rows = launch(measure, a.nproc, a, backend="nccl", timeout=3600)[0]
    else:
        bw, rows = measure(a)
    print(f"{torch.cuda.get_device_name()} x{a.nproc}, torch {torch.__version__}; copy bandwidth {bw / 1e9:.0f} GB/s")
    print(f"{'config':7} {'B':>2} {'eager ms':>9} {'graph ms':>9} {'compile ms':>10} {'floor ms':>9} "
          f"{'eager/graph':>11} {'compile/graph':>13} {'graph/floor':>11}")
    # compile/graph > 1: the graph replay is faster than reduce-overhead; "ref": compiled with the references
    for r in rows:
        print(f"{r['config']:7} {r['batch']:>2} {r['eager']:9.3f} {r['graph']:9.3f} {r['compile']:10.3f} {r['floor']:9.3f} "
              f"{r['eager'] / r['graph']:11.2f} {r['compile'] / r['graph']:13.2f} {r['graph'] / r['floor']:11.2f} {r['note']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
