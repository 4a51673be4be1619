"""GC905 unknown-suppression-code — Flags suppressions naming codes that do not exist."""
from __future__ import annotations

from ._base import Rule

RULE = Rule(
    code='GC905',
    name='unknown-suppression-code',
    message='suppression names unknown code(s) `{codes}`',
    hint='use a code from `graphcheck rules`',
    what='Flags suppressions naming codes that do not exist.',
    why='A typo in a suppression silently suppresses nothing.',
    example='# graphcheck: ignore[GC10] -- x',
    instead='# graphcheck: ignore[GC101] -- x',
    runtime=False,
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()
