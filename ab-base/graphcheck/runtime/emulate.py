"""Capture-under-test without a GPU: the three properties a CUDA graph relies on, checked on CPU.

0. capture — the step runs once under the portable audit; every event that fails a CUDA capture (a readback, a
   data-dependent shape, a host-to-device copy, an explicit sync) is listed in execution order, and GC001 names the
   first. The other checks still run on the whole step (a frozen graph bakes what a capture could not record), so
   one run gives the whole hunt-list;
1. state identity — replay writes into the buffers captured at capture time, so a state tensor the step rebinds
   (new object or new storage) is never updated by a replay (GC005, at the line whose op made the new tensor);
2. graph stability — one graph serves every step only if the aten op trace (op, shapes, dtypes, which operands
   are state) is the same on different data (GC004, at the first differing op's line);
3. frozen replay — the step recorded once as the aten ops it ran (`frozen.FrozenStep`: Python scalars, host ints
   and read-back values are baked in, exactly as capture bakes them) is replayed on later steps' inputs and
   compared with eager bit for bit, both starting from the same generator states (GC003, at the first op whose
   result differs, eager ops and graph nodes aligned by op, not by position). A graph with no ops is GC002.
"""
from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from ..findings import Finding
from ..options import STEPS, WARMUP
from ..rules import format_message
from ..target import Target
from .attribution import first_user_frame, relpath, source_line
from .frozen import FrozenStep
from .rng import RngState, generators_in
from .tensors import device_of, first_diff, flatten, restore, snapshot

Frame = tuple[str, int, str]


@dataclass
class OpRecord:
    op: str
    sig: tuple            # (shapes, dtypes, state flags) of tensor operands and results
    frame: Frame | None
    outputs: list[torch.Tensor] | None = None


def _tensors(x) -> list[torch.Tensor]:
    """Tensors among args/kwargs/results, two levels deep (aten arguments are tensors or lists of them)."""
    if isinstance(x, torch.Tensor):
        return [x]
    out = []
    for v in (x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else ()):
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple, dict)):
            out.extend(_tensors(v))
    return out


class _OpTrace(TorchDispatchMode):
    """Records the aten op sequence of a step; optionally keeps a copy of each op's results.

    Operands are told apart by storage address, which the allocator reuses: the state tensors are held for the
    whole trace, so no temporary can take a state tensor's address after the step rebinds it (it was then counted
    as state or not by allocator timing, and the trace "changed" between steps at random); and a storage's
    creator is the last op that allocated it, not the first op seen at that address."""

    def __init__(self, state: list[torch.Tensor], keep_outputs: bool = False):
        super().__init__()
        self.ops: list[OpRecord] = []
        self.state = list(state)                      # held: their addresses stay theirs until the trace ends
        self.state_ptrs = {_ptr(t) for t in self.state}
        self.keep = keep_outputs
        self.creator: dict[int, Frame | None] = {}     # storage -> user frame of the op that allocated it

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        ins = _tensors((args, kwargs))
        outs = _tensors(out)
        sig = (tuple((tuple(t.shape), t.dtype, _ptr(t) in self.state_ptrs) for t in ins),
               tuple((tuple(t.shape), t.dtype) for t in outs))
        rec = OpRecord(str(func), sig, first_user_frame(sys._getframe(1)))
        fresh = _allocates(func)
        for t in outs:
            if fresh:
                self.creator[_ptr(t)] = rec.frame
            else:          # a view, in-place or out= result lives in storage another op allocated
                self.creator.setdefault(_ptr(t), rec.frame)
        if self.keep:
            rec.outputs = [t.detach().clone() for t in outs]
        self.ops.append(rec)
        return out


def _allocates(func) -> bool:
    """Whether an aten op's results are new storage: no result aliases an argument (views, `add_`, out=)."""
    schema = getattr(func, "_schema", None)
    return schema is not None and all(r.alias_info is None for r in schema.returns)


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
    rebound = _rebound(target, target.make_inputs(k))
    if not rebound:
        return [], target.state()
    # Only now pay for a trace: one more step under it names the op (and line) that makes each new tensor.
    with _OpTrace(list(target.state().values())) as tr:
        again = _rebound(target, target.make_inputs(k + 1))
    made = {name: tr.creator.get(ptr) for name, (_, ptr, _) in again.items()}
    found = []
    for name, (what, _, shapes) in rebound.items():
        if what == "missing":
            found.append(_finding("GC005", target, None, {"check": "state identity", "detail": "state() no longer returns it"}, tensor=name))
            continue
        made_at = made.get(name)
        found.append(_finding("GC005", target, made_at, {"check": "state identity", "detail": f"after one eager step `{name}` is {what}"
                              f" (shape {shapes})" + ("" if made_at else "; no torch op in the step made it")}, tensor=name))
    return found, target.state()


def _rebound(target: Target, inputs) -> dict[str, tuple[str, int, str]]:
    """name -> (what changed, storage of the new tensor, shapes) for each state tensor one eager step replaces."""
    old = target.state()            # held until compared: a freed tensor's id and address can be reused at once
    before = {n: (id(t), _ptr(t), tuple(t.shape)) for n, t in old.items()}
    target.step(inputs)
    after = target.state()
    out = {}
    for name, (oid, ptr, shape) in before.items():
        t = after.get(name)
        if t is None:
            out[name] = ("missing", -1, "")
        elif id(t) != oid or _ptr(t) != ptr:
            out[name] = ("a new tensor object" if id(t) != oid else "new storage", _ptr(t), f"{shape} -> {tuple(t.shape)}")
    del old
    return out


def _trace(target: Target, inputs, keep: bool = False) -> list[OpRecord]:
    with _OpTrace(list(target.state().values()), keep) as tr:
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


def _does_work(func) -> bool:
    name = getattr(getattr(func, "_schema", None), "name", str(func)).split("::")[-1]
    return not (getattr(func, "is_view", False) or name in _NO_WORK)


def check_frozen_replay(target: Target, k: int, steps: int) -> list[Finding]:
    inputs = target.make_inputs(k)
    leaves, spec = pytree.tree_flatten(inputs)

    def fn(*xs):
        return target.step(pytree.tree_unflatten(list(xs), spec))

    state = target.state()
    snap = snapshot(state)
    rng0 = RngState()
    try:
        # Like a capture, the frozen step keeps the value a data-dependent op had when it was recorded; the capture
        # pass has already reported those ops, so recording goes on past them to check the rest of the step.
        gm = FrozenStep.record(fn, leaves)
    except Exception as e:
        restore(state, snap)
        err = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:200]
        return [_finding("GC006", target, None, {"check": "frozen replay", "error": err}, error=f"recording the step: {err}")]
    restore(state, snap)
    rng0.restore()
    gens = generators_in(gm.constants())        # named generators the frozen step draws from
    if not any(_does_work(f) for f, _, _, _ in gm.ops):
        return [_finding("GC002", target, None, {"check": "frozen replay", "detail": "the traced step contains no torch op that "
                                                 "computes anything; its work happens outside torch and replay would skip it"})]
    for j in range(1, steps + 1):
        step_k = k + j
        fresh = target.make_inputs(step_k)
        fleaves = pytree.tree_leaves(fresh)
        state = target.state()
        pre = snapshot(state)
        rng = RngState(gens)
        try:
            diff = _replay_vs_eager(target, gm, fresh, fleaves, pre, rng)
        except _ReplayRaised as e:
            restore(state, pre)
            frame = gm.frames[e.node] if e.node is not None else None
            f = _finding("GC003", target, frame, {"check": "frozen replay", "step": step_k, "tensor": "<replay raised>",
                                                  "diff": e.err, "detail": f"the frozen graph cannot run step {step_k}'s inputs: {e.err}"})
            f.message = f"the graph captured at step {k} cannot replay step {step_k}: {e.err}"
            return [f]
        if diff is None:
            continue
        # Only a mismatch pays for op-by-op records: replay and eager again from the same state and generators
        # (not possible when the step rebinds its state: GC005 reports that, and the step's line stands here).
        tensor, desc = diff
        frame, op_detail = None, "the step rebinds its state, so it cannot be replayed again from the same state"
        try:
            restore(target.state(), pre)
            rng.restore()
            recorded: dict = {}
            _replay_vs_eager(target, gm, fresh, fleaves, pre, rng, recorded)
            frame, op_detail = _first_differing_op(recorded["eager"], recorded["replay"])
        except (RuntimeError, KeyError, _ReplayRaised):
            pass
        return [_finding("GC003", target, frame, {"check": "frozen replay", "step": step_k, "tensor": tensor, "diff": desc,
                                                  "detail": op_detail}, step=str(step_k), tensor=tensor, diff=desc)]
    return []


class _ReplayRaised(Exception):
    def __init__(self, node, err: str):
        super().__init__(err)
        self.node, self.err = node, err


def _replay_vs_eager(target: Target, gm: FrozenStep, fresh, fleaves, pre, rng: RngState, recorded: dict | None = None):
    """Replay the frozen step, then eager, from the same state and generator states; the first difference or
    None. With `recorded`, every op's results on both sides are kept there ("eager", "replay")."""
    state = target.state()
    keep: list | None = [] if recorded is not None else None
    try:
        out_r = {n: t.clone() for n, t in flatten(gm.run(fleaves, keep)).items()}
    except Exception as e:
        err = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:200]
        raise _ReplayRaised(gm.current, err) from None
    st_r = snapshot(state)
    restore(state, pre)
    rng.restore()
    if recorded is not None:
        with _OpTrace(list(state.values()), keep_outputs=True) as tr:
            out_e = flatten(target.step(fresh))
        recorded["eager"], recorded["replay"] = tr.ops, keep
    else:
        out_e = flatten(target.step(fresh))
    st_e = snapshot(target.state())
    return first_diff(out_e, out_r) or first_diff({f"state.{n}": t for n, t in st_e.items()},
                                                 {f"state.{n}": t for n, t in st_r.items()})


def _first_differing_op(eager: list[OpRecord], replay: list[tuple[str, list[torch.Tensor]]],
                        window: int = 64) -> tuple[Frame | None, str]:
    """Align eager's aten ops with the frozen graph's aten nodes by op (a node is the op eager ran; FX's own
    `getitem` nodes are not in the list) and name the first op whose result differs: that is where a baked value
    entered the computation. Where the two sequences part (the eager step took another branch), the first op that
    eager ran and the graph did not is the answer."""
    i = j = 0
    while i < len(eager) and j < len(replay):
        e, (rop, routs) = eager[i], replay[j]
        if e.op != rop:
            ahead = next((d for d in range(1, window) if j + d < len(replay) and replay[j + d][0] == e.op), None)
            if ahead is None:
                return e.frame, f"eager op #{i} {e.op} is not in the frozen graph (it ran {rop} there)"
            j += ahead
            continue
        if first_diff({str(n): t for n, t in enumerate(e.outputs or [])}, {str(n): t for n, t in enumerate(routs)}):
            return e.frame, f"eager op #{i} {e.op} is the first whose result differs"
        i += 1
        j += 1
    return None, "no single op differs; the difference is in how results are returned"


def capture_failure(target: Target, err: BaseException, inputs_k: int) -> Finding:
    """GC001 for a failed CUDA capture: the op that failed (the innermost user frame of the error, when the error
    is raised at the op) and the hazards of one audited eager step in execution order (the first is the culprit
    when CUDA only reports the failure at the end of capture)."""
    from .attribution import stack_from_traceback
    text = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"[:300]
    st = stack_from_traceback(err.__traceback__)
    hunt = _capture_hazards(target, target.make_inputs(inputs_k))
    failed_at = st[0] if st else None
    frame = failed_at or (hunt[0][2] if hunt else None)
    return _gc001(target, frame, text, hunt, failed_at)


def _gc001(target: Target, frame: Frame | None, text: str, hunt: list, failed_at: Frame | None) -> Finding:
    first = hunt[0] if hunt else None
    culprit = f" — first hazard {first[0]} {first[1]}" if first else ""
    where = lambda fr: f"{relpath(fr[0])}:{fr[1]}" if fr else "?"  # noqa: E731
    return _finding("GC001", target, frame, {
        "error": text, "failed_at": where(failed_at) if failed_at else None,
        "first_hazard": f"{where(first[2])} {first[0]} {first[1]}" if first else None,
        "hunt_list": [f"{where(fr)} {rule} {op}" for rule, op, fr in hunt[:20]]}, error=text + culprit)


def audited_step(target: Target, inputs, device: str):
    """The Recorder of one eager step run under the portable audit, the state restored afterwards. A step that
    raises is cut short there: what it did up to the error is what a failed capture or a stale replay needs."""
    from .portable import PortableAudit
    from .recorder import Recorder
    rec = Recorder(kind="capture")
    state = target.state()
    snap = snapshot(state)
    with contextlib.suppress(Exception), PortableAudit(rec, device=device, host_built=target.host_built > 0):
        target.step(inputs)
    restore(state, snap)
    return rec


def _capture_hazards(target: Target, inputs) -> list[tuple[str, str, Frame | None]]:
    """(rule, op, frame) of each distinct capture-breaking event of one audited step, in execution order."""
    rec = audited_step(target, inputs, device_of(target.device, inputs))
    seen, out = set(), []
    for rule, op, frame, breaks in rec.events:
        if breaks and (rule, frame) not in seen:
            seen.add((rule, frame))
            out.append((rule, op, frame))
    return out


def check_capture(target: Target, k: int) -> list[Finding]:
    """The CPU stand-in for a capture: GC001 at the first capture-breaking event in execution order."""
    hunt = _capture_hazards(target, target.make_inputs(k))
    if not hunt:
        return []
    rule, op, frame = hunt[0]
    text = f"{op} ({rule}) fails a CUDA capture"
    return [_gc001(target, frame, text, hunt, None)]


def emulate(target: Target, steps: int = STEPS, warmup: int = WARMUP) -> list[Finding]:
    from .portable import cuda_shims, placing
    warmup = target.warmup if target.warmup is not None else warmup
    with torch.no_grad(), cuda_shims():
        for k in range(warmup):
            inputs = target.make_inputs(k)
            with placing(device_of(target.device, inputs)):
                target.step(inputs)
        k = warmup
        found = check_capture(target, k)
        k += 1
        ident, _ = check_state_identity(target, k)
        found += ident
        k += 1
        found += check_stability(target, k)
        k += 2
        found += check_frozen_replay(target, k, steps)
    return found
