"""GC902 unused-suppression — Flags suppressions that suppress nothing on their line or the line below."""
from __future__ import annotations

from ._base import Rule

RULE = Rule(
    code='GC902',
    name='unused-suppression',
    message='suppression of `{codes}` matches no finding',
    hint='remove the stale suppression',
    what='Flags suppressions that suppress nothing on their line or the line below.',
    why='Stale suppressions hide the next real hazard written on that line.',
    example='y = x + 1  # graphcheck: ignore[GC101] -- old',
    instead='y = x + 1',
    runtime=False,
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()
