"""GC602 stream-event-synchronize — Flags `.synchronize()` on streams and events."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC602',
    name='stream-event-synchronize',
    message='`{call}` blocks the host on a stream or event',
    hint='order work with `stream.wait_event(e)` on the device',
    what='Flags `.synchronize()` on streams and events.',
    why='Blocking the host on a stream or event is a sync; under capture it is illegal, and `Event.synchronize()` is invisible to the CUDA sync-debug mode.',
    example='done.synchronize()',
    instead='torch.cuda.current_stream().wait_event(done)',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ('torch.cuda.Stream.synchronize', 'torch.cuda.Event.synchronize')


@on(ast.Call, names=("synchronize",))
def check(ctx, node: ast.Call) -> None:
    f = node.func
    if ctx.method(node) == "synchronize" and not node.args and (ctx.is_stream_or_event(f.value) or isinstance(f.value, ast.Call)):
        ctx.report(RULE.code, node, call=".synchronize()")
