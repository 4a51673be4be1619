"""`graphcheck audit`: run a target's step K times after warm-up and inventory every sync it performs."""
from __future__ import annotations

import torch

from ..findings import Finding
from ..options import STEPS, WARMUP
from ..rules import format_message
from ..target import Target
from . import nvtx
from .attribution import relpath, source_line, stack_from_traceback
from .boundary import DEFAULT_STEP_TIMEOUT, StepAborted, guarded
from .cuda_sync import CudaSyncAudit
from .kernel_jit import KernelJitAudit
from .portable import PortableAudit, cuda_shims, placing
from .recorder import Recorder
from .rng import seeded
from .tensors import device_of


def target_error(target: Target, err: BaseException, kind: str, stage: str) -> Finding:
    """GC006 at the user line the exception came from (or the step's definition)."""
    # an aborted call is raised by the guard; the user's line is where the SystemExit (or the timeout) began
    cause = err.__context__ if isinstance(err, StepAborted) and err.__context__ is not None else err
    stack = stack_from_traceback(cause.__traceback__) or stack_from_traceback(err.__traceback__)
    path, line, fn = stack[0] if stack else target.location()
    if isinstance(err, StepAborted):
        text = f"{stage}: the target's {err.what} {err.detail}"[:300]
    else:
        text = f"{stage}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]
    return Finding("GC006", kind, relpath(path), line, 0, fn, format_message("GC006", error=text), source_line(path, line),
                   evidence={"error": text, "target": target.name,
                             "stack": [f"{relpath(p)}:{ln}:{q}" for p, ln, q in stack]})


def audit(target: Target, steps: int = STEPS, warmup: int = WARMUP, strict: bool = False,
          step_timeout: float | None = DEFAULT_STEP_TIMEOUT) -> list[Finding]:
    """Sync findings of `steps` audited steps. Warm-up steps run unaudited so one-time effects (lazy init,
    autotuning, first-touch allocation) are not mistaken for per-step syncs; inputs are built outside the
    audited region, since producing them is not part of the step. A step that exits, raises KeyboardInterrupt
    itself or runs past `step_timeout` seconds is a GC006 row (boundary.py)."""
    target = guarded(target, step_timeout)
    rec = Recorder(kind="sync")
    cuda_rec = Recorder(kind="sync")
    warmup = target.warmup if target.warmup is not None else warmup
    try:
        with seeded():
            return _audit(target, steps, warmup, strict, rec, cuda_rec)
    except (Exception, StepAborted) as e:  # the target itself is broken: that is the finding
        return rec.findings() + cuda_rec.findings() + [target_error(target, e, "sync", "step")]


def _audit(target: Target, steps: int, warmup: int, strict: bool, rec: Recorder, cuda_rec: Recorder) -> list[Finding]:
    for k in range(warmup):
        inputs = target.make_inputs(k)
        with cuda_shims(), placing(device_of(target.device, inputs)):
            target.step(inputs)
    for i in range(steps):
        k = warmup + i
        inputs = target.make_inputs(k)
        rec.step = cuda_rec.step = k
        with nvtx.range_(f"graphcheck audit {target.name} step {k}"):
            with PortableAudit(rec, device=device_of(target.device, inputs), host_built=target.host_built > 0), \
                    KernelJitAudit(rec), CudaSyncAudit(cuda_rec, strict=strict, claimed=_claimed_by(rec)):
                target.step(inputs)
        if strict and len(cuda_rec):
            break
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return rec.findings() + cuda_rec.findings()


def _claimed_by(rec: Recorder):
    """A CUDA warning at a line the portable layer already explained is the same event, not a second one."""
    def claimed(path: str, line: int) -> bool:
        rp = relpath(path)
        return any(f.path == rp and f.line == line for f in rec.findings())
    return claimed
