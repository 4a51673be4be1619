"""GC004 unstable-graph — Records the aten op trace of step k and step k+1 on different data; any difference in op, shape, dtype or state use means one graph cannot serve both steps."""
from __future__ import annotations

from ._base import Rule

RULE = Rule(
    code='GC004',
    name='unstable-graph',
    message='the op trace changes between steps: {detail}',
    hint='keep shapes, dtypes and the op sequence fixed across steps',
    what='Records the aten op trace of step k and step k+1 on different data; any difference in op, shape, dtype or state use means one graph cannot serve both steps.',
    why='A graph replays exactly the ops and shapes it recorded; a step whose shapes grow or whose branch changes needs a new graph.',
    example='k = self.cache[:, :pos + 1]',
    instead='k = self.cache   # full capacity, mask positions > pos',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()
