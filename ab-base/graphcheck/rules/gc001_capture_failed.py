"""GC001 capture-failed — Reports a step that cannot be captured into a CUDA graph (or traced into a frozen graph on CPU), naming the culprit op and user line found by re-running the step under the portable audit."""
from __future__ import annotations

from ._base import Rule

RULE = Rule(
    code='GC001',
    name='capture-failed',
    message='capture of the step failed: {error}',
    hint='fix the op named in the evidence; `graphcheck audit` lists every one',
    what='Reports a step that cannot be captured into a CUDA graph (or traced into a frozen graph on CPU), naming the culprit op and user line found by re-running the step under the portable audit.',
    why='CUDA reports `operation failed due to a previous error during capture` without naming the op; graphcheck re-attributes it.',
    example='n = mask.sum().item()',
    instead='keep n on the device',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()
