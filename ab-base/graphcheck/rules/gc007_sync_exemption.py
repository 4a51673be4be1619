"""GC007 sync-exemption — Reports every `with graphcheck.allow_sync(reason):` block the step entered and what it exempted."""
from __future__ import annotations

from ._base import Rule

RULE = Rule(
    code='GC007',
    name='sync-exemption',
    message='sync allowed by `allow_sync`: {reason}',
    hint='remove the exemption once the sync is gone',
    what='Reports every `with graphcheck.allow_sync(reason):` block the step entered and what it exempted.',
    why='An exemption is an accepted hazard; the report keeps it visible so it can be retired.',
    example="with graphcheck.allow_sync('stop check'): done = bool(tok == eos)",
    instead='keep the stop check outside the captured step',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()
