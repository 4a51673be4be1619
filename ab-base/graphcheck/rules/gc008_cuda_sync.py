"""GC008 cuda-sync — Counts every warning of `torch.cuda.set_sync_debug_mode('warn')` during the audited steps that the portable layer did not already explain, attributed to the first user frame."""
from __future__ import annotations

from ._base import Rule

RULE = Rule(
    code='GC008',
    name='cuda-sync',
    message='the CUDA sync-debug mode reports a synchronizing call: {detail}',
    hint='find the op in the evidence stack; keep it on the device',
    what="Counts every warning of `torch.cuda.set_sync_debug_mode('warn')` during the audited steps that the portable layer did not already explain, attributed to the first user frame.",
    why="The CUDA runtime sees syncs torch's Python layer hides (a blocking copy inside a C++ op, a pageable memcpy); any sync inside a captured region fails the capture.",
    example='x = torch.zeros(n).cuda()   # pageable host copy inside the step',
    instead='allocate device buffers at load time',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()
