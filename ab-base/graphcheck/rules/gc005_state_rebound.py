"""GC005 state-rebound — Checks that every state tensor keeps its object and storage across an eager step."""
from __future__ import annotations

from ._base import Rule

RULE = Rule(
    code='GC005',
    name='state-rebound',
    message='state tensor `{tensor}` is rebound by the step instead of written in place',
    hint='write into the existing buffer (`copy_`, `index_copy_`)',
    what='Checks that every state tensor keeps its object and storage across an eager step.',
    why='Replay writes into the buffers captured at capture time; a state tensor that the step replaces is never updated by replay.',
    example='self.cache = torch.cat([self.cache, kv])',
    instead='self.cache.index_copy_(0, pos, kv)',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()
