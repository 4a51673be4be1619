"""GC903 parse-error — Reports files that are not valid Python."""
from __future__ import annotations

from ._base import Rule

RULE = Rule(
    code='GC903',
    name='parse-error',
    message='file could not be parsed: {error}',
    hint='fix the syntax error',
    what='Reports files that are not valid Python.',
    why='Nothing in the file can be checked, so its hazards go unseen.',
    example='def f(:',
    instead='def f():',
    runtime=False,
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()
