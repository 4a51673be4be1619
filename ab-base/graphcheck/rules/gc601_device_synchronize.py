"""GC601 device-synchronize — Flags `torch.cuda.synchronize()` and `torch.accelerator.synchronize()`."""
from __future__ import annotations

import ast

from ._base import Rule, on
from ._base import dotted

RULE = Rule(
    code='GC601',
    name='device-synchronize',
    message='`{call}` blocks the host until the device is idle',
    hint='remove it from the step; synchronise once outside the graph',
    what='Flags `torch.cuda.synchronize()` and `torch.accelerator.synchronize()`.',
    why='A device-wide sync is illegal during capture and stalls the pipeline eagerly. The CUDA sync-debug mode does not report it: only the static rules and the portable audit see it.',
    example='torch.cuda.synchronize()\nt1 = time.perf_counter()',
    instead='start.record(); ...; end.record()   # time with events, outside the step',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = (
    'torch.cuda.synchronize',
    'torch.accelerator.synchronize',
    'torch.xpu.synchronize',
)


_DEVICE_MODULES = ("cuda", "accelerator", "xpu", "mps", "npu")


@on(ast.Call, names=("synchronize",))
def check(ctx, node: ast.Call) -> None:
    q = ctx.qual(node.func)
    head, _, last = q.rpartition(".")
    if last != "synchronize" or node.args:
        return
    if head in {f"torch.{m}" for m in _DEVICE_MODULES} or "platform" in head.rsplit(".", 1)[-1]:
        ctx.report(RULE.code, node, call=(dotted(node.func) or q) + "()")
