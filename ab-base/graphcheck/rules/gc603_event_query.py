"""GC603 event-query — Flags `.query()` on streams and events."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC603',
    name='event-query',
    message='`{call}` polls the device from the host',
    hint='order work on the device with `wait_event`',
    what='Flags `.query()` on streams and events.',
    why='A query asks the driver about device progress from the host; a graph cannot record it, and a polling loop is a sync.',
    example='while not ev.query():\n    pass',
    instead='stream.wait_event(ev)',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ('torch.cuda.Event.query', 'torch.cuda.Stream.query')


@on(ast.Call, names=("query",))
def check(ctx, node: ast.Call) -> None:
    if ctx.method(node) == "query" and not node.args and ctx.is_stream_or_event(node.func.value):
        ctx.report(RULE.code, node, call=".query()")
