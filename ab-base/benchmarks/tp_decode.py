"""Tensor-parallel graph-safe decode on GPUs: capture on every rank (NCCL collectives inside the graph), replay vs
eager bit for bit for K steps, and the step time of N ranks against one GPU, measured in the same run.

    python benchmarks/tp_decode.py --nproc 2 --steps 300            # Flash dimensions, 4 layers, release formats
    python benchmarks/tp_decode.py --nproc 2 --preset tiny --steps 300

Each rank builds the same random model (same seed), takes its shard (`dsv4_model.parallel.shard`), wraps the
graph-safe decoder in a graphcheck Target and runs graphcheck's capture-under-test on it with the collective
monitor on (`graphcheck.runtime.distributed.rank_runtime` does exactly what `graphcheck capture --nproc N` does):
side-stream warm-up, capture, K replays on fresh tokens each compared with an eager step from the same state with
`torch.equal` on logits and every state tensor. Then it times graph replays. Prints one line per world size and
the ratio; exit 1 on any finding. Needs N CUDA GPUs (NCCL); there is no CPU mode (tests/ cover gloo).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def build(preset: str, layers: int, max_seq_len: int):
    """`preset` "flash": the real Flash layer dimensions, `layers` layers, random weights in the release formats
    (dsv4_model.synthetic); "tiny": the embedded checkpoint. On this rank's GPU, not yet sharded."""
    if preset == "tiny":
        import dsv4_model
        return dsv4_model.load("tiny", device="cuda", max_seq_len=max_seq_len)
    from dsv4_model.synthetic import flash_args, random_model
    return random_model(flash_args(layers, max_seq_len), device="cuda")


def rank_main(preset: str, layers: int, batch: int, steps: int, time_steps: int, max_seq_len: int) -> dict:
    import torch.distributed as dist
    from dsv4_model.decode import GraphSafeDecoder
    from dsv4_model.parallel import shard
    from graphcheck.runtime.capture import capture_test
    from graphcheck.runtime.distributed import CollectiveMonitor
    from graphcheck.target import Target
    model = build(preset, layers, max_seq_len)
    if dist.is_initialized() and dist.get_world_size() > 1:
        shard(model)
    dec = GraphSafeDecoder(model, batch, kernels=True)
    vocab = model.args.vocab_size

    def make_inputs(k: int) -> torch.Tensor:
        return torch.randint(16, vocab, (batch,), generator=torch.Generator().manual_seed(5000 + k)).cuda()

    def step(tokens: torch.Tensor) -> torch.Tensor:
        dec.tokens.copy_(tokens)
        return dec.step(batch)

    target = Target(step=step, make_inputs=make_inputs, state=dec.state, name=f"tp decode {preset}", device="cuda", warmup=2)
    monitor = CollectiveMonitor("capture")
    with monitor:
        found = capture_test(target, steps=steps, warmup=2, device="cuda")
    found += monitor.findings()
    # timing: one captured graph, replayed; eager for the ratio
    dec.pos.zero_()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step(make_inputs(0))
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(dec.tokens)
    times = {}
    for mode in ("eager", "graph"):
        dec.pos.zero_()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(time_steps):
            graph.replay() if mode == "graph" else step(dec.tokens)
        torch.cuda.synchronize()
        times[mode] = (time.perf_counter() - t0) / time_steps
    return {"findings": [f"{f.rule} {f.path}:{f.line} {f.message}" for f in found], "times": times,
            "mem_gb": torch.cuda.max_memory_allocated() / 2**30}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, default=2, help="tensor-parallel ranks (also runs 1 GPU for the ratio)")
    ap.add_argument("--preset", choices=("flash", "tiny"), default="flash", help="Flash layer dimensions, or the tiny checkpoint")
    ap.add_argument("--layers", type=int, default=4, help="first N layers (0 = all)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=300, help="replays compared with eager, bit for bit")
    ap.add_argument("--time-steps", type=int, default=100)
    ap.add_argument("--max-seq-len", type=int, default=1024)
    a = ap.parse_args(argv)
    from graphcheck.runtime.distributed import launch
    if torch.cuda.device_count() < a.nproc:
        print(f"tp_decode: --nproc {a.nproc} needs {a.nproc} CUDA GPUs, found {torch.cuda.device_count()}", file=sys.stderr)
        return 2
    rows = {}
    for n in sorted({1, a.nproc}):
        res = launch(rank_main, n, a.preset, a.layers, a.batch, a.steps if n > 1 else 3, a.time_steps, a.max_seq_len,
                     backend="nccl", timeout=900)
        rows[n] = res
        for r, out in enumerate(res):
            print(f"world {n} rank {r}: eager {out['times']['eager'] * 1e3:.2f} ms/step, graph {out['times']['graph'] * 1e3:.2f} "
                  f"ms/step, peak {out['mem_gb']:.1f} GiB, {len(out['findings'])} finding(s)")
            for f in out["findings"]:
                print("   ", f)
    if a.nproc > 1:
        g1, gn = rows[1][0]["times"]["graph"], rows[a.nproc][0]["times"]["graph"]
        print(f"graph step, {a.nproc} GPUs vs 1: {gn * 1e3:.2f} / {g1 * 1e3:.2f} ms = {gn / g1:.2f}x "
              f"(replay == eager bit for bit for {a.steps} steps on every rank: "
              f"{'yes' if not any(o['findings'] for o in rows[a.nproc]) else 'NO'})")
    return 1 if any(o["findings"] for res in rows.values() for o in res) else 0


if __name__ == "__main__":
    sys.exit(main())
