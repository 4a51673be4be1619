"""`no_sync()` and `allow_sync(reason)`: the audit as context managers for tests and user code."""
from __future__ import annotations

import contextlib
import sys

from .attribution import user_stack
from .recorder import Recorder, SyncError, exemptions

__all__ = ["no_sync", "allow_sync", "SyncError"]


# What a block that is not a step cannot judge: whether a tensor built from host data (or copied to the device)
# is built once, as setup, or on every step. audit and capture know it from the Target (state and inputs are made
# outside the audited step); a test body that builds its model and inputs itself does not.
HOST_TRAFFIC = ("GC401", "GC402", "GC404")


@contextlib.contextmanager
def no_sync(strict_cuda: bool = True, skip: tuple[str, ...] = ()):
    """Raise `SyncError` at the first host sync or capture hazard in the block, naming the rule and the line.

    Portable (works on CPU); on CUDA, torch's sync-debug mode in "error" mode also runs, so syncs that only the
    runtime sees are caught too. `allow_sync(reason)` blocks inside are exempt. `skip`: rule codes not judged
    (the graph_safe marker passes HOST_TRAFFIC).
    """
    from .cuda_sync import CudaSyncAudit
    from .portable import PortableAudit
    rec = Recorder(kind="sync", raise_on_first=True, skip=frozenset(skip))
    with PortableAudit(rec), CudaSyncAudit(Recorder(kind="sync", raise_on_first=True, skip=frozenset(skip)),
                                           strict=strict_cuda) as cuda:
        yield rec
    # Strict CUDA mode swallows the RuntimeError to record it; turn that record into the error no_sync promises.
    found = cuda.recorder.findings()
    if found:
        raise SyncError(found[0])


@contextlib.contextmanager
def allow_sync(reason: str):
    """Exempt the block from `no_sync` and the audit; the exemption is reported (GC007) with the reason."""
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError("allow_sync needs a reason: expected a non-empty string, found " + repr(reason))
    stack = user_stack(sys._getframe(2))
    ex = exemptions()
    ex.append((reason.strip(), stack[0] if stack else None))
    try:
        yield
    finally:
        ex.pop()
