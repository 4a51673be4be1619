"""Capture-under-test without a GPU: the three properties a CUDA graph relies on, checked on CPU.

1. state identity — replay writes into the buffers captured at capture time, so a state tensor the step rebinds
   (new object or new storage) is never updated by a replay (GC005);
2. graph stability — one graph serves every step only if the aten op trace (op, shapes, dtypes, which operands
   are state) is the same on different data (GC004, at the first differing op's line);
3. frozen replay — the step traced once into a frozen FX graph (`make_fx`, real tensors: Python scalars, host
   ints and read-back values are baked in, exactly as capture bakes them) is replayed on later steps' inputs and
   compared with eager bit for bit (GC003, at the first op whose result differs). A graph with no ops is GC002.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from ..findings import Finding
from ..rules import format_message
from ..target import Target
from .attribution import is_internal, relpath, source_line, user_stack
from .tensors import first_diff, flatten, restore, snapshot

Frame = tuple[str, int, str]


@dataclass
class OpRecord:
    op: str
    sig: tuple            # (shapes, dtypes, state flags) of tensor operands and results
    frame: Frame | None
    outputs: list[torch.Tensor] | None = None


def _tensors(x) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]


class _OpTrace(TorchDispatchMode):
    """Records the aten op sequence of a step; optionally keeps a copy of each op's results."""

    def __init__(self, state_ptrs: set[int], keep_outputs: bool = False):
        super().__init__()
        self.ops: list[OpRecord] = []
        self.state_ptrs = state_ptrs
        self.keep = keep_outputs

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        ins = _tensors((args, kwargs))
        outs = _tensors(out)
        sig = (tuple((tuple(t.shape), str(t.dtype), _ptr(t) in self.state_ptrs) for t in ins),
               tuple((tuple(t.shape), str(t.dtype)) for t in outs))
        st = user_stack(sys._getframe(1))
        rec = OpRecord(str(func), sig, st[0] if st else None)
        if self.keep:
            rec.outputs = [t.detach().clone() for t in outs]
        self.ops.append(rec)
        return out


def _ptr(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except RuntimeError:
        return -1


def _finding(rule: str, target: Target, frame: Frame | None, evidence: dict, **fmt) -> Finding:
    path, line, fn = frame or target.location()
    return Finding(rule, "capture", relpath(path), line, 0, fn, format_message(rule, **fmt), source_line(path, line),
                   evidence={"target": target.name, **evidence})


def check_state_identity(target: Target, k: int) -> tuple[list[Finding], Any]:
    before = target.state()
    ids = {n: (id(t), _ptr(t), tuple(t.shape)) for n, t in before.items()}
    target.step(target.make_inputs(k))
    after = target.state()
    found = []
    for name, (oid, ptr, shape) in ids.items():
        t = after.get(name)
        if t is None:
            found.append(_finding("GC005", target, None, {"check": "state identity", "detail": "state() no longer returns it"}, tensor=name))
        elif id(t) != oid or _ptr(t) != ptr:
            what = "a new tensor object" if id(t) != oid else "new storage"
            found.append(_finding("GC005", target, None, {"check": "state identity", "detail": f"after one eager step `{name}` is {what}"
                                  f" (shape {shape} -> {tuple(t.shape)})"}, tensor=name))
    return found, after


def _trace(target: Target, inputs, keep: bool = False) -> list[OpRecord]:
    ptrs = {_ptr(t) for t in target.state().values()}
    with _OpTrace(ptrs, keep) as tr:
        target.step(inputs)
    return tr.ops


def check_stability(target: Target, k: int) -> list[Finding]:
    a = _trace(target, target.make_inputs(k))
    b = _trace(target, target.make_inputs(k + 1))
    for i in range(max(len(a), len(b))):
        ra, rb = (a[i] if i < len(a) else None), (b[i] if i < len(b) else None)
        if ra is not None and rb is not None and ra.op == rb.op and ra.sig == rb.sig:
            continue
        where = (rb or ra).frame
        detail = (f"op #{i}: step {k} ran {_describe(ra)}, step {k + 1} ran {_describe(rb)}")
        return [_finding("GC004", target, where, {"check": "graph stability", "op_index": i, "detail": detail}, detail=detail)]
    return []


def _describe(r: OpRecord | None) -> str:
    if r is None:
        return "nothing (the trace ended)"
    fmt = lambda s: "x".join(map(str, s)) or "scalar"  # noqa: E731
    ins = ", ".join(fmt(s) for s, _, _ in r.sig[0][:3])
    outs = ", ".join(fmt(s) for s, _ in r.sig[1][:2])
    return f"{r.op}({ins}) -> {outs or 'no tensor'}"


_NO_WORK = {"detach", "alias", "lift_fresh", "lift_fresh_copy", "_local_scalar_dense"}


def _does_work(n) -> bool:
    if n.op != "call_function":
        return False
    name = getattr(getattr(n.target, "_schema", None), "name", str(n.target)).split("::")[-1]
    return not (getattr(n.target, "is_view", False) or name in _NO_WORK)


class _NodeRecorder(torch.fx.Interpreter):
    def __init__(self, gm):
        super().__init__(gm)
        self.ops: list[tuple[str, list[torch.Tensor]]] = []

    def run_node(self, n):
        self.current = n
        out = super().run_node(n)
        if n.op == "call_function":
            self.ops.append((str(n.target), [t.detach().clone() for t in _tensors(out)]))
        return out


def check_frozen_replay(target: Target, k: int, steps: int) -> list[Finding]:
    from torch.fx.experimental.proxy_tensor import make_fx
    inputs = target.make_inputs(k)
    leaves, spec = pytree.tree_flatten(inputs)

    def fn(*xs):
        return target.step(pytree.tree_unflatten(list(xs), spec))

    state = target.state()
    snap = snapshot(state)
    try:
        gm = make_fx(fn, tracing_mode="real", record_stack_traces=True)(*leaves)
    except Exception as e:
        restore(state, snap)
        return [capture_failure(target, e, inputs_k=k + 1)]
    restore(state, snap)
    if not any(_does_work(n) for n in gm.graph.nodes):
        return [_finding("GC002", target, None, {"check": "frozen replay", "detail": "the traced step contains no torch op that "
                                                 "computes anything; its work happens outside torch and replay would skip it"})]
    for j in range(1, steps + 1):
        step_k = k + j
        fresh = target.make_inputs(step_k)
        fleaves = pytree.tree_leaves(fresh)
        state = target.state()
        pre = snapshot(state)
        interp = _NodeRecorder(gm)
        try:
            out_r = {n: t.clone() for n, t in flatten(interp.run(*fleaves)).items()}
        except Exception as e:
            restore(state, pre)
            frame = _node_frame(getattr(interp, "current", None))
            err = f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"[:200]
            f = _finding("GC003", target, frame, {"check": "frozen replay", "step": step_k, "tensor": "<replay raised>",
                                                  "diff": err, "detail": f"the frozen graph cannot run step {step_k}'s inputs: {err}"})
            f.message = f"the graph captured at step {k} cannot replay step {step_k}: {err}"
            return [f]
        st_r = snapshot(state)
        restore(state, pre)
        ptrs = {_ptr(t) for t in state.values()}
        with _OpTrace(ptrs, keep_outputs=True) as tr:
            out_e = flatten(target.step(fresh))
        st_e = snapshot(target.state())
        diff = first_diff(out_e, out_r) or first_diff({f"state.{n}": t for n, t in st_e.items()},
                                                     {f"state.{n}": t for n, t in st_r.items()})
        if diff is None:
            continue
        tensor, desc = diff
        frame, op_detail = _first_differing_op(tr.ops, interp.ops)
        return [_finding("GC003", target, frame, {"check": "frozen replay", "step": step_k, "tensor": tensor, "diff": desc,
                                                  "detail": op_detail}, step=str(step_k), tensor=tensor, diff=desc)]
    return []


_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def _node_frame(node) -> Frame | None:
    """The innermost user frame of an FX node's recorded stack trace."""
    trace = (getattr(node, "meta", None) or {}).get("stack_trace") or ""
    frames = [(p, int(ln), fn) for p, ln, fn in _FILE_LINE.findall(trace)]
    for p, ln, fn in reversed(frames):
        if not is_internal(p):
            return p, ln, fn
    return None


def _first_differing_op(eager: list[OpRecord], replay: list[tuple[str, list[torch.Tensor]]]) -> tuple[Frame | None, str]:
    """Align eager's op trace with the frozen graph's nodes and name the first op whose result differs:
    that is where a baked value entered the computation."""
    for i, (e, (rop, routs)) in enumerate(zip(eager, replay)):
        if e.op != rop:
            return e.frame, f"op #{i}: eager ran {e.op}, the frozen graph ran {rop}"
        if first_diff({str(j): t for j, t in enumerate(e.outputs or [])}, {str(j): t for j, t in enumerate(routs)}):
            return e.frame, f"op #{i} {e.op} is the first whose result differs"
    return None, "no single op differs; the difference is in how results are returned"


def capture_failure(target: Target, err: BaseException, inputs_k: int) -> Finding:
    """GC001 naming the culprit: re-run the step under the portable audit and blame its first hazard."""
    from .portable import PortableAudit
    from .recorder import Recorder
    rec = Recorder(kind="capture")
    try:
        with PortableAudit(rec):
            target.step(target.make_inputs(inputs_k))
    except Exception:
        pass
    suspects = rec.findings()
    text = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"[:300]
    frame = None
    if suspects:
        s = suspects[0]
        frame = (s.path, s.line, s.function)
    else:
        from .attribution import stack_from_traceback
        st = stack_from_traceback(err.__traceback__)
        frame = st[0] if st else None
    culprit = f" — culprit {suspects[0].rule} {suspects[0].evidence.get('op', '')}" if suspects else ""
    return _finding("GC001", target, frame, {"error": text, "suspects": [f"{s.path}:{s.line} {s.rule} {s.evidence.get('op', '')}"
                                                                       for s in suspects[:10]]}, error=text + culprit)


def emulate(target: Target, steps: int = 3, warmup: int = 1) -> list[Finding]:
    from .portable import cuda_shims
    warmup = target.warmup if target.warmup is not None else warmup
    with torch.no_grad(), cuda_shims():
        for k in range(warmup):
            target.step(target.make_inputs(k))
        k = warmup
        found, _ = check_state_identity(target, k)
        k += 1
        found += check_stability(target, k)
        k += 2
        found += check_frozen_replay(target, k, steps)
    return found
