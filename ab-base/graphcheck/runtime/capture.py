"""`graphcheck capture`: capture one step into a CUDA graph, replay it on fresh inputs, compare with eager.

On CUDA: warm-up on a side stream (as torch.cuda.graphs requires), capture, then for k = 1..K copy fresh inputs
into the static buffers, replay from a snapshot of the state and of the generator states, and run the same step eagerly from the same snapshots; outputs
and every state tensor must be bit-identical. A failed capture is attributed by execution (`capture_failure`). Without CUDA (or with device="cpu") the CPU
emulation in `emulate.py` checks the same properties.
"""
from __future__ import annotations

import contextlib
import warnings

import torch

from ..findings import Finding
from ..options import DEVICE, STEPS, WARMUP
from ..target import Target
from .audit import target_error
from .boundary import DEFAULT_STEP_TIMEOUT, StepAborted, guarded
from .emulate import (_finding, audited_step, capture_failure, check_frozen_replay, check_stability, check_state_identity,
                      emulate)
from .kernel_jit import KernelJitAudit, armed_after
from .recorder import Recorder
from .rng import RngState, seeded
from .tensors import clone_tree, copy_into, first_diff, flatten, restore, snapshot


def capture_test(target: Target, steps: int = STEPS, warmup: int = WARMUP, device: str = DEVICE,
                 step_timeout: float | None = DEFAULT_STEP_TIMEOUT) -> list[Finding]:
    target = guarded(target, step_timeout)     # exits, self-raised KeyboardInterrupts and hangs are GC006 rows
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: no CUDA device is available (expected torch.cuda.is_available())")
    # CuTeDSL compiles and off-stream launches in the steps after warm-up (and in the captured one): findings of
    # their own, beside whatever the capture itself reports
    jit = KernelJitAudit(Recorder(kind="capture"))
    n_warm = target.warmup if target.warmup is not None else warmup
    use_cuda = False
    try:
        use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available() and _on_cuda(target))
        with jit, seeded():
            if use_cuda:     # one eager step (the state-identity check) before the side-stream warm-up
                found = capture_cuda(armed_after(target, jit, 1 + max(n_warm, 1)), steps, warmup,
                                     replay_safe=lambda: jit.compiles == 0)
            else:
                found = emulate(armed_after(target, jit, n_warm), steps, warmup)
    except StepAborted as e:    # not a verdict on the capture: the target ended its own call
        if use_cuda:
            _recover()
        return jit.recorder.findings() + [target_error(target, e, "capture", "capture-under-test")]
    except Exception as e:
        return jit.recorder.findings() + [target_error(target, e, "capture", "capture-under-test")]
    return found + jit.recorder.findings()


def _on_cuda(target: Target) -> bool:
    if target.device is not None:
        return torch.device(target.device).type == "cuda"
    return any(t.is_cuda for t in flatten(target.make_inputs(0)).values())


@contextlib.contextmanager
def _deterministic():
    prev = torch.are_deterministic_algorithms_enabled()
    prev_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    prev_cudnn = torch.backends.cudnn.deterministic
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        torch.use_deterministic_algorithms(prev, warn_only=prev_warn)
        torch.backends.cudnn.deterministic = prev_cudnn


def capture_cuda(target: Target, steps: int, warmup: int, replay_safe=lambda: True) -> list[Finding]:
    """`replay_safe() -> bool`, asked after the capture: False (a kernel was compiled and loaded inside the captured
    step) ends the check there: replaying that graph crashed the process on an H100 (run 40), and the compile is
    the finding already."""
    warmup = max(target.warmup if target.warmup is not None else warmup, 1)
    found, _ = check_state_identity(target, 0)
    static_in = clone_tree(target.make_inputs(1))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            target.step(static_in)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    state = target.state()
    pre_capture = snapshot(state)
    graph = torch.cuda.CUDAGraph()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.cuda.graph(graph):
                static_out = target.step(static_in)
    except Exception as e:
        _recover()
        restore(target.state(), pre_capture)
        # The rest of the step is still checked (as the CPU emulation does), so one run gives the whole hunt-list.
        with torch.no_grad():
            rest = check_stability(target, 3) + check_frozen_replay(target, 5, steps)
        return found + [capture_failure(target, e, inputs_k=2)] + rest
    if any("empty" in str(w.message).lower() for w in caught):
        return found + [_finding("GC002", target, None, {"check": "capture", "detail": "; ".join(str(w.message) for w in caught)[:300]})]
    if not replay_safe():
        graph.reset()
        return found
    with _deterministic():
        for k in range(2, steps + 2):
            copy_into(static_in, target.make_inputs(k))
            pre = snapshot(state)
            rng = RngState()          # replay and eager draw from the same generator states
            graph.replay()
            torch.cuda.synchronize()
            out_r = {n: t.clone() for n, t in flatten(static_out).items()}
            st_r = snapshot(state)
            restore(state, pre)
            rng.restore()
            out_e = {n: t.clone() for n, t in flatten(target.step(static_in)).items()}
            torch.cuda.synchronize()
            st_e = snapshot(target.state())
            diff = first_diff(out_e, out_r) or first_diff({f"state.{n}": t for n, t in st_e.items()},
                                                         {f"state.{n}": t for n, t in st_r.items()})
            if diff is not None:
                tensor, desc = diff
                return found + [_finding("GC003", target, None, {"check": "cuda replay", "step": k, "tensor": tensor, "diff": desc,
                                                                 "suspects": _suspects(target, k)},
                                         step=str(k), tensor=tensor, diff=desc)]
    graph.reset()
    return found


def _suspects(target: Target, k: int) -> list[str]:
    """Portable-audit findings of one eager step: the usual reasons a replay reads stale values."""
    rec = audited_step(target, target.make_inputs(k), device="cuda")
    return [f"{f.path}:{f.line} {f.rule} {f.evidence.get('op', '')}" for f in rec.in_order()[:10]]


def _recover() -> None:
    """Leave the CUDA context usable after a failed capture: end any capture still open, drain errors."""
    with contextlib.suppress(Exception):
        if torch.cuda.is_current_stream_capturing():
            torch.cuda.current_stream().synchronize()
    with contextlib.suppress(Exception):
        torch.cuda.synchronize()
    # A capture that fails inside CUDA never reaches the generators' capture epilogue, so the default CUDA
    # generators stay in "capturing" mode and every later random op outside capture raises "Offset increment
    # outside graph capture encountered unexpectedly" (seen on the H200: one failed target broke the next
    # target's sampling). A fresh state object with the same seed and offset is not capturing.
    for g in torch.cuda.default_generators:
        with contextlib.suppress(Exception):
            g.graphsafe_set_state(g.clone_state())
