"""GC006 target-error — Reports a target that cannot be imported, built or run eagerly."""
from __future__ import annotations

from ._base import Rule

RULE = Rule(
    code='GC006',
    name='target-error',
    message='the target failed to run: {error}',
    hint='fix the target factory or step',
    what='Reports a target that cannot be imported, built or run eagerly.',
    why='Nothing can be audited until the step runs.',
    example='graphcheck audit mypkg.targets:missing',
    instead='graphcheck audit mypkg.targets:decode',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()
