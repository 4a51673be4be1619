"""Rank-aware runtime layers: run a target's audit or capture-under-test on every rank of a process group,
compare the ranks' verdicts and merge them into one inventory.

A tensor-parallel decode step is N programs that must stay in lockstep: the same collectives, in the same
order, with the same shapes, on every rank, each captured on the stream the graph records. One rank's verdict
says nothing about the others (a graph can capture on rank 0 and fail on rank 1; one rank can read back a value
the others keep on the device), so every rank runs the target and the merge keeps, per finding, the ranks that
saw it. What only a multi-rank run can see is checked here too (rules GC204, GC606, GC804):

- the collective sequence each rank issued per step, compared across ranks (a host branch on a value that
  differs across ranks shows up as the first collective where the ranks disagree);
- collectives whose process group cannot be captured (barriers, object collectives, group creation in the
  step, CUDA tensors on a non-NCCL group);
- collectives off the capture stream (issued from a stream that is not capturing while a capture is open) and
  async collectives whose work is never waited inside the step.

Two ways to start the ranks:
- `launch(fn, nproc, ...)` spawns the processes itself (what `graphcheck audit/capture/run --nproc N` calls);
- under torchrun, every rank runs `python -m graphcheck.runtime.distributed {audit,capture} TARGET`, which
  gathers to rank 0; rank 0 merges and prints (or writes `-o`). NCCL on GPUs, gloo on CPU.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import os
import pickle
import shutil
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from ..findings import Finding
from ..options import DEFAULT_FORMAT, DEVICE, FORMATS, STEPS, WARMUP
from .attribution import first_user_frame, relpath, source_line, user_stack
from .recorder import Recorder


class DistributedError(RuntimeError):
    """A rank that failed to start or run; the message names the rank and its error. `results` holds what
    the ranks that finished returned (None for the others), `errors` one line per failed rank."""

    def __init__(self, msg: str, results: list | None = None, errors: dict[int, str] | None = None):
        super().__init__(msg)
        self.results = results or []
        self.errors = errors or {}


# -- launching -------------------------------------------------------------------------------------------------
def default_backend(device: str) -> str:
    return "nccl" if device == "cuda" or (device == "auto" and torch.cuda.is_available()) else "gloo"


def launch(fn: Callable[..., Any], nproc: int, *args: Any, backend: str = "gloo", timeout: float = 600.0,
           threads: int | None = None) -> list[Any]:
    """Run `fn(*args)` in `nproc` spawned processes that form one process group; return each rank's result in
    rank order. `fn` must be importable (a module-level function). A rank that raises makes the whole launch
    raise DistributedError with that rank's traceback; collectives time out after `timeout` seconds, so a rank
    waiting for a peer that took another path does not hang the caller."""
    if nproc < 1:
        raise ValueError(f"nproc must be >= 1, found {nproc}")
    if backend == "nccl" and torch.cuda.device_count() < nproc:
        raise DistributedError(f"backend nccl needs one GPU per rank: {nproc} ranks, {torch.cuda.device_count()} GPU(s) visible")
    ctx = torch.multiprocessing.get_context("spawn")
    work = tempfile.mkdtemp(prefix="graphcheck-ranks-")
    threads = threads or max(1, (os.cpu_count() or 1) // nproc)
    procs = [ctx.Process(target=_worker, args=(r, nproc, backend, work, fn, args, timeout, threads), daemon=False)
             for r in range(nproc)]
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout + 120          # start-up (imports, rendezvous) on top of the work
        for p in procs:
            p.join(max(1.0, deadline - time.monotonic()))
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for r in hung:
            procs[r].terminate()
            procs[r].join(10)
        results: list[Any] = []
        errors: dict[int, str] = {}
        for r in range(nproc):
            path = os.path.join(work, f"rank{r}.pkl")
            if not os.path.exists(path):
                errors[r] = "did not finish in time" if r in hung else f"exited with code {procs[r].exitcode} and no result"
                results.append(None)
                continue
            with open(path, "rb") as fh:
                status, value = pickle.load(fh)
            if status != "ok":
                errors[r] = value
                value = None
            results.append(value)
        if errors:
            raise DistributedError(f"{len(errors)} of {nproc} rank(s) failed\n" + "\n".join(f"rank {r}: {e}" for r, e in errors.items()),
                                   results, errors)
        return results
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        shutil.rmtree(work, ignore_errors=True)


def _worker(rank: int, nproc: int, backend: str, work: str, fn, args, timeout: float, threads: int) -> None:
    try:
        # a rank's standard output is the parent's report stream (`--output-format json` on stdout): what the
        # backends print there from C++ (torch 2.8's gloo: "[Gloo] Rank 0 is connected to 1 peer ranks") goes to
        # stderr instead; results come back through the work directory
        sys.stdout.flush()
        os.dup2(2, 1)
        torch.set_num_threads(threads)
        if backend == "nccl":
            torch.cuda.set_device(rank)
        # A FileStore in a private directory: no port to pick, no collision between parallel launches.
        store = dist.FileStore(os.path.join(work, "store"), nproc)
        dist.init_process_group(backend, store=store, rank=rank, world_size=nproc,
                                timeout=datetime.timedelta(seconds=timeout))
        payload = ("ok", fn(*args))
    except BaseException:  # noqa: BLE001 -- any failure is reported to the parent with its traceback
        payload = ("error", traceback.format_exc(limit=12))
    finally:
        with contextlib.suppress(Exception):
            if dist.is_initialized():
                dist.destroy_process_group()
    tmp = os.path.join(work, f".rank{rank}.tmp")
    with open(tmp, "wb") as fh:
        pickle.dump(payload, fh)
    os.replace(tmp, os.path.join(work, f"rank{rank}.pkl"))


# -- the collective monitor -----------------------------------------------------------------------------------
# Collectives whose implementation is a host round trip on every backend: never capturable.
HOST_COLLECTIVES = ("barrier", "monitored_barrier", "all_gather_object", "broadcast_object_list", "gather_object",
                    "scatter_object_list", "send_object_list", "recv_object_list", "new_group", "init_process_group")
# Tensor collectives: capturable on a group that supports capture (NCCL), when issued on the capturing stream.
TENSOR_COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_single", "reduce_scatter",
                      "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "broadcast", "reduce", "send",
                      "recv", "isend", "irecv")
CAPTURE_BACKENDS = {"cuda": ("nccl",)}    # device type -> backends whose collectives a CUDA graph can record


@dataclass
class CollectiveCall:
    op: str                      # aten-style name, e.g. c10d.allreduce_
    shapes: str                  # "4x128:f32,..."
    frame: tuple[str, int, str]  # the user frame that issued it

    def key(self) -> tuple[str, str]:
        return self.op, self.shapes


@dataclass
class _Monitor:
    rec: Recorder
    capturing: list[bool] = field(default_factory=lambda: [False])
    trace: dict[int, list[CollectiveCall]] = field(default_factory=dict)
    pending: dict[int, tuple[str, tuple]] = field(default_factory=dict)   # id(work) -> (call, frame)
    depth: int = 0
    step: int | None = None
    remap: bool = False          # CPU capture emulation: in-place collectives in their traceable functional form
    thread: int = field(default_factory=threading.get_ident)


def _describe(args) -> str:
    def one(t):
        return "x".join(map(str, t.shape)) + ":" + str(t.dtype).replace("torch.", "")
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(one(a))
        elif isinstance(a, (list, tuple)) and a and all(isinstance(t, torch.Tensor) for t in a):
            out.append("[" + ",".join(one(t) for t in a) + "]")
    return ",".join(out)


class _Trace(TorchDispatchMode):
    """Sees every c10d / functional-collective op, whatever Python API issued it, and records the sequence."""

    def __init__(self, mon: _Monitor):
        super().__init__()
        self.mon = mon

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        ns = getattr(func, "namespace", "")
        if ns in ("c10d", "_c10d_functional") and threading.get_ident() == self.mon.thread and self.mon.step is not None:
            frame = first_user_frame(sys._getframe()) or ("<unknown>", 0, "")     # only the innermost is kept
            name = func.name().replace("::", ".")
            self.mon.trace.setdefault(self.mon.step, []).append(CollectiveCall(name, _describe(args), frame))
        return func(*args, **(kwargs or {}))


def _reduce_name(op) -> str:
    return getattr(op, "name", str(op)).rsplit(".", 1)[-1].lower()


def _traceable() -> dict[str, Callable]:
    """The in-place collectives written with functional collectives (the form torch.compile traces them in).
    The CPU capture emulation freezes the step with make_fx; an in-place `dist.all_reduce` would trace as an
    un-waited c10d op (its `work.wait()` is Python, not an op), while the functional form traces as the
    collective, `wait_tensor` and the in-place copy: what a CUDA graph records for an NCCL collective."""
    try:
        import torch.distributed._functional_collectives as fc
    except ImportError:        # no functional collectives: the emulation traces the in-place ops as they are
        return {}
    W = lambda g: g if g is not None else dist.group.WORLD  # noqa: E731

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        tensor.copy_(fc.all_reduce(tensor, _reduce_name(op), W(group)))

    def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
        output_tensor.copy_(fc.all_gather_tensor(input_tensor, 0, W(group)))

    def reduce_scatter_tensor(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
        output.copy_(fc.reduce_scatter_tensor(input, _reduce_name(op), 0, W(group)))

    def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
        tensor.copy_(fc.broadcast(tensor, src if src is not None else 0, W(group)))

    return {"all_reduce": all_reduce, "all_gather_into_tensor": all_gather_into_tensor,
            "all_gather_single": all_gather_into_tensor, "reduce_scatter_tensor": reduce_scatter_tensor,
            "broadcast": broadcast}


_TRACEABLE = _traceable()


def _patched(mon: _Monitor, name: str, orig: Callable) -> Callable:
    @functools.wraps(orig)
    def call(*args, **kwargs):
        if threading.get_ident() != mon.thread or mon.step is None or mon.depth:
            return orig(*args, **kwargs)
        stack = user_stack()
        if name in HOST_COLLECTIVES:
            mon.rec.record("GC606", f"torch.distributed.{name}", stack, call=f"dist.{name}",
                           why="it is a host round trip on every backend")
        else:
            tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)] + \
                      [t for a in list(args) + list(kwargs.values()) if isinstance(a, (list, tuple)) for t in a if isinstance(t, torch.Tensor)]
            dev = tensors[0].device.type if tensors else "cpu"
            group = kwargs.get("group")
            with contextlib.suppress(Exception):
                backend = str(dist.get_backend(group)).lower()
                allowed = CAPTURE_BACKENDS.get(dev)
                if allowed is not None and not any(b in backend for b in allowed):
                    mon.rec.record("GC606", f"torch.distributed.{name}", stack, call=f"dist.{name}",
                                   why=f"its group's backend {backend!r} cannot be captured for {dev} tensors")
            if dev == "cuda" and mon.capturing[0] and not torch.cuda.is_current_stream_capturing():
                mon.rec.record("GC804", f"torch.distributed.{name}", stack, call=f"dist.{name}",
                               detail="issued on a stream that is not capturing: it ran once, eagerly, and replay skips it")
        mon.depth += 1
        try:
            fn = _TRACEABLE.get(name) if mon.remap and not kwargs.get("async_op") else None
            out = (fn or orig)(*args, **kwargs)
        finally:
            mon.depth -= 1
        if kwargs.get("async_op") and out is not None and name in TENSOR_COLLECTIVES:
            out = _TrackedWork(out, mon, name, user_stack())
        return out
    return call


class _TrackedWork:
    """The work handle of an async collective, so the monitor can tell whether the step waited for it."""

    def __init__(self, work, mon: _Monitor, name: str, stack):
        self._work, self._mon = work, mon
        mon.pending[id(self)] = (name, stack)

    def wait(self, *a, **k):
        self._mon.pending.pop(id(self), None)
        return self._work.wait(*a, **k)

    def __getattr__(self, item):
        return getattr(self._work, item)


class CollectiveMonitor:
    """Wraps the torch.distributed collectives and the CUDA graph capture for the duration of a rank's run; call
    `begin_step(k)` / `end_step()` around each audited step (the warm-up is not recorded)."""

    def __init__(self, kind: str = "sync", remap: bool = False):
        self.mon = _Monitor(Recorder(kind=kind), remap=remap)
        self._saved: list[tuple[Any, str, Any]] = []
        self._trace = _Trace(self.mon)

    def __enter__(self) -> "CollectiveMonitor":
        for name in HOST_COLLECTIVES + TENSOR_COLLECTIVES:
            orig = getattr(dist, name, None)
            if orig is not None:
                self._saved.append((dist, name, orig))
                setattr(dist, name, _patched(self.mon, name, orig))
        if torch.cuda.is_available():
            graph_cls = torch.cuda.CUDAGraph
            for meth, flag in (("capture_begin", True), ("capture_end", False)):
                orig = getattr(graph_cls, meth)
                self._saved.append((graph_cls, meth, orig))
                setattr(graph_cls, meth, self._capture_hook(orig, flag))
        self._trace.__enter__()
        return self

    def _capture_hook(self, orig, flag: bool):
        mon = self.mon

        @functools.wraps(orig)
        def hook(graph, *a, **k):
            out = orig(graph, *a, **k)
            mon.capturing[0] = flag
            return out
        return hook

    def __exit__(self, *exc) -> None:
        self._trace.__exit__(*exc)
        for owner, name, orig in reversed(self._saved):
            setattr(owner, name, orig)
        self._saved.clear()

    def begin_step(self, k: int) -> None:
        self.mon.step = k

    def end_step(self) -> None:
        for name, stack in list(self.mon.pending.values()):
            self.mon.rec.record("GC804", f"torch.distributed.{name}", stack, call=f"dist.{name}(async_op=True)",
                                detail="its work is never waited inside the step: it stays on the group's stream, unjoined")
        self.mon.pending.clear()
        self.mon.step = None

    def findings(self) -> list[Finding]:
        return self.mon.rec.findings()

    def trace(self) -> dict[int, list[CollectiveCall]]:
        return self.mon.trace


# -- per-rank run and the cross-rank merge --------------------------------------------------------------------
@dataclass
class RankResult:
    rank: int
    findings: list[dict]
    trace: dict[int, list[CollectiveCall]]


def rank_runtime(kind: str, spec: str, steps: int, warmup: int, device: str, root: str | None) -> RankResult:
    """One rank's audit ("sync") or capture-under-test ("capture") of a target, with the collective monitor on.
    Runs inside an initialised process group; the target factory builds its rank's shard (it reads the group)."""
    from .attribution import set_root
    from ..target import load_target
    if root is not None:
        set_root(root)
        if root not in sys.path:
            sys.path.insert(0, root)
    target = load_target(spec, device=None if device in (None, "auto") else device)
    on_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    monitor = CollectiveMonitor(kind, remap=kind == "capture" and not on_cuda)
    with monitor:
        found = _run_monitored(kind, target, monitor, steps, warmup, device)
    rank = dist.get_rank() if dist.is_initialized() else 0
    return RankResult(rank, [f.to_dict() for f in found + monitor.findings()], monitor.trace())


def _run_monitored(kind, target, monitor: CollectiveMonitor, steps: int, warmup: int, device: str) -> list[Finding]:
    """The single-rank layers, with each step of theirs bracketed for the monitor. The step is wrapped, not the
    layers: audit and capture stay the one implementation every world size runs."""
    step_fn, counter = target.step, [0]

    def step(inputs):
        monitor.begin_step(counter[0])
        try:
            return step_fn(inputs)
        finally:
            counter[0] += 1
            monitor.end_step()
    target.step = step
    if kind == "sync":
        from .audit import audit
        return audit(target, steps=steps, warmup=warmup)
    from .capture import capture_test
    return capture_test(target, steps=steps, warmup=warmup, device=device)


def compare_traces(traces: list[dict[int, list[CollectiveCall]]], kind: str = "sync") -> list[Finding]:
    """GC204 where the ranks' collective sequences first differ in a step (op, shapes or count): the ranks took
    different host paths. One finding per rank at that rank's call site (or its last collective if it issued
    none there), so the merge reports which ranks went where."""
    out: list[Finding] = []
    steps = sorted({k for t in traces for k in t})
    for k in steps:
        seqs = [t.get(k, []) for t in traces]
        n = max(len(s) for s in seqs)
        for i in range(n):
            calls = [s[i] if i < len(s) else None for s in seqs]
            keys = [c.key() if c else None for c in calls]
            if len(set(keys)) == 1:
                continue
            desc = "; ".join(f"rank {r}: " + (f"{c.op}({c.shapes})" if c else "no collective") for r, c in enumerate(calls))
            for r, c in enumerate(calls):
                frame = c.frame if c else (seqs[r][-1].frame if seqs[r] else ("<unknown>", 0, ""))
                path, line, fn = frame
                from ..rules import format_message
                out.append(Finding("GC204", kind, relpath(path), line, 0, fn,
                                   format_message("GC204", detail=f"collective #{i + 1} of step {k} differs: {desc}"),
                                   source_line(path, line), evidence={"step": k, "index": i, "ranks_seen": desc,
                                                                      "_rank": r}))
            return out     # after the first divergence every later collective is misaligned: one finding per rank
    return out


def merge_ranks(per_rank: list[list[Finding]]) -> list[Finding]:
    """One inventory from N ranks: findings equal in rule, kind, place and function are one row whose count is
    the sum and whose evidence names the ranks; a finding on some ranks only says so in its message."""
    world = len(per_rank)
    rows: dict[tuple, Finding] = {}
    ranks: dict[tuple, list[int]] = {}
    for r, found in enumerate(per_rank):
        for f in found:
            f = Finding.from_dict(f.to_dict())
            f.evidence.pop("_rank", None)
            key = (f.rule, f.kind, f.path, f.line, f.col, f.function)
            if key not in rows:
                rows[key], ranks[key] = f, [r]
                continue
            host = rows[key]
            if r not in ranks[key]:
                ranks[key].append(r)
            if f.severity == "error":
                host.severity = "error"
            host.count += f.count
    out = []
    for key, f in rows.items():
        f.evidence["ranks"] = ranks[key]
        f.evidence["world"] = world
        if len(ranks[key]) < world:
            f.message += f" [on rank{'s' if len(ranks[key]) > 1 else ''} {', '.join(map(str, ranks[key]))} of {world}]"
        out.append(f)
    return sorted(out, key=Finding.sort_key)


def merge_results(results: list[RankResult], kind: str) -> list[Finding]:
    per_rank = [[Finding.from_dict(d) for d in res.findings] for res in sorted(results, key=lambda x: x.rank)]
    for f in compare_traces([res.trace for res in sorted(results, key=lambda x: x.rank)], kind):
        per_rank[f.evidence["_rank"]].append(f)
    return merge_ranks(per_rank)


def run_ranks(kind: str, spec: str, nproc: int, *, steps: int = STEPS, warmup: int = WARMUP, device: str = DEVICE,
              root: str | os.PathLike | None = None, backend: str | None = None, timeout: float = 600.0) -> list[Finding]:
    """What `graphcheck audit/capture/run --nproc N` calls: the target's audit ("sync") or capture ("capture") on
    N spawned ranks (NCCL when CUDA is used, gloo otherwise), merged into one list of findings."""
    if kind not in ("sync", "capture"):
        raise ValueError(f"kind must be 'sync' or 'capture', found {kind!r}")
    backend = backend or default_backend(device)
    dev = device if device != "auto" else ("cuda" if backend == "nccl" else "cpu")
    root_s = os.path.abspath(root) if root is not None else None
    try:
        results = launch(rank_runtime, nproc, kind, spec, steps, warmup, dev, root_s, backend=backend, timeout=timeout)
    except DistributedError as e:
        # A rank that died (a collective mismatch aborts gloo and NCCL alike) still leaves the others' findings;
        # the dead rank is a GC006 of its own, so the merge says which rank never reported.
        if not any(e.results):
            raise
        results = [r if r is not None else RankResult(i, [_rank_failure(kind, spec, i, e.errors[i]).to_dict()], {})
                   for i, r in enumerate(e.results)]
    return merge_results(results, kind)


def _rank_failure(kind: str, spec: str, rank: int, error: str) -> Finding:
    from ..rules import format_message
    last = [ln for ln in error.strip().splitlines() if ln.strip()][-1:] or [error]
    text = f"rank {rank}: {last[0].strip()}"[:300]
    return Finding("GC006", kind, spec.partition(":")[0].replace(".", "/") + ".py", 0, 0, spec.partition(":")[2],
                   format_message("GC006", error=text), "", evidence={"error": error[-2000:], "target": spec})


# -- torchrun entry point --------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """`torchrun --nproc-per-node N -m graphcheck.runtime.distributed {audit,capture} TARGET [-o out.json]`:
    every rank runs the layer, rank 0 merges, prints and writes. Exit 1 on findings, like the CLI."""
    ap = argparse.ArgumentParser(prog="python -m graphcheck.runtime.distributed")
    ap.add_argument("layer", choices=("audit", "capture"))
    ap.add_argument("target")
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--warmup", type=int, default=WARMUP)
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default=DEVICE)
    ap.add_argument("--output-format", default=DEFAULT_FORMAT, choices=tuple(FORMATS))
    ap.add_argument("-o", "--output-file", dest="output")
    a = ap.parse_args(argv)
    if "RANK" not in os.environ:
        print("graphcheck.runtime.distributed: RANK is not set; start it with torchrun (or use `graphcheck "
              f"{a.layer} --nproc N`)", file=sys.stderr)
        return 2
    backend = default_backend(a.device)
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend)
    kind = "sync" if a.layer == "audit" else "capture"
    res = rank_runtime(kind, a.target, a.steps, a.warmup, "cuda" if backend == "nccl" else "cpu", os.getcwd())
    gathered: list[Any] = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(res, gathered, dst=0)
    code = 0
    if dist.get_rank() == 0:
        from ..options import Output
        from ..report.output import finish
        from ..result import classify
        found = merge_results(gathered, kind)
        result = classify(a.layer, found, None, layers={kind: {"targets": 1, "findings": len(found)}}, targets=[a.target])
        code = finish(result, Output(format=a.output_format, file=a.output))
    dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main())
