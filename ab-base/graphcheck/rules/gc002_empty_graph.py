"""GC002 empty-graph — Reports a capture that succeeded but recorded no work."""
from __future__ import annotations

from ._base import Rule

RULE = Rule(
    code='GC002',
    name='empty-graph',
    message='the captured graph is empty: replay does nothing',
    hint='launch custom kernels on `torch.cuda.current_stream()`',
    what='Reports a capture that succeeded but recorded no work.',
    why='A kernel launched on stream 0 during capture runs once eagerly; the graph has no nodes and every replay is a no-op.',
    example='kernel(x, stream=cuda.CUstream(0))',
    instead='kernel(x, stream=cuda.CUstream(torch.cuda.current_stream().cuda_stream))',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()
