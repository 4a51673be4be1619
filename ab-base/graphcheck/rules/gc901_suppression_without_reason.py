"""GC901 suppression-without-reason — Flags `# graphcheck: ignore[...]` (or `# noqa: GCxxx`) comments with no `-- reason`."""
from __future__ import annotations

from ._base import Rule

RULE = Rule(
    code='GC901',
    name='suppression-without-reason',
    message='suppression of `{codes}` gives no reason',
    hint='add ` -- why this is safe` after the codes',
    what='Flags `# graphcheck: ignore[...]` (or `# noqa: GCxxx`) comments with no `-- reason`.',
    why='A suppression is a claim that a hazard is safe here; without the reason nobody can re-check it when the code changes.',
    example='x = t.item()  # graphcheck: ignore[GC101]',
    instead='x = t.item()  # graphcheck: ignore[GC101] -- load time, runs once',
    runtime=False,
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()
