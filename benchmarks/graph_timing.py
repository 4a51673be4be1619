"""Per-call time of a GPU op replayed from a CUDA graph (launch overhead out, as in the decode): the one timing
helper of the benchmark scripts that A/B single ops (fuse_ab.py, cutedsl.py, bf16_sweep.py)."""
from __future__ import annotations

import time

import torch


def graph_us(fn, calls: int = 10, replays: int = 30) -> float:
    """Microseconds per call of `fn`: warmed on a side stream, captured `calls` times in one graph, the graph
    replayed `replays` times between two events. On CPU (no CUDA): `fn` called calls * replays times, eagerly."""
    if not torch.cuda.is_available():
        t = time.perf_counter()
        for _ in range(calls * replays):
            fn()
        return (time.perf_counter() - t) / (calls * replays) * 1e6
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (calls * replays)
