"""GC904 unreadable-file — Reports files that cannot be opened or decoded."""
from __future__ import annotations

from ._base import Rule

RULE = Rule(
    code='GC904',
    name='unreadable-file',
    message='file could not be read: {error}',
    hint='make the file readable UTF-8, or exclude it',
    what='Reports files that cannot be opened or decoded.',
    why='Nothing in the file can be checked, so its hazards go unseen.',
    example='# (binary or latin-1 bytes)',
    instead='# -*- coding: utf-8 -*-',
    runtime=False,
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()
