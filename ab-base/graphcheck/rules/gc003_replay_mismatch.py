"""GC003 replay-mismatch — Replays the captured step on fresh inputs and compares outputs and state with eager, bit for bit."""
from __future__ import annotations

from ._base import Rule

RULE = Rule(
    code='GC003',
    name='replay-mismatch',
    message='replay differs from eager at step {step}: `{tensor}` (max abs diff {diff})',
    hint='make every per-step value a device tensor read from a static buffer',
    what='Replays the captured step on fresh inputs and compares outputs and state with eager, bit for bit.',
    why='A Python scalar, a host-side position or a rebound buffer is baked in at capture time: replay silently computes with the old value.',
    example='o.copy_(x * self.scale)      # float baked at capture',
    instead='o.copy_(x * self.scale_t)    # 0-d device tensor, updated in place',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()
