"""GC109 numpy-from-tensor — Flags `np.asarray(t)` / `np.array(t)` where `t` is a tensor."""
from __future__ import annotations

import ast

from ._base import Rule, on
from ._base import dotted

RULE = Rule(
    code='GC109',
    name='numpy-from-tensor',
    message='`{call}` converts a tensor to a NumPy array',
    hint='do the math in torch on the device',
    what='Flags `np.asarray(t)` / `np.array(t)` / `t.numpy()` where `t` is a tensor (not a value of unknown kind: `.numpy()` of a device tensor raises, so where it runs on one the value is on the host), and `t.numpy(force=True)`, which copies a device tensor to the host instead of raising, on any value not known to be on the host.',
    why='Reading a device value on the host blocks the CPU until every queued kernel has finished (a device-to-host sync). During CUDA-graph capture nothing has run yet, so the read fails with `operation failed due to a previous error during capture` — which names neither the op nor the line.',
    example='arr = np.asarray(probs)',
    instead='probs.cumsum(-1)',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ('torch.Tensor.numpy', 'torch.Tensor.__array__')


@on(ast.Call, names=("asarray", "array", "asanyarray", "ascontiguousarray", "numpy"))
def check(ctx, node: ast.Call) -> None:
    q = ctx.qual(node.func)
    if q in ("numpy.asarray", "numpy.array", "numpy.asanyarray", "numpy.ascontiguousarray") and node.args \
            and ctx.dev(node.args[0]):
        ctx.report(RULE.code, node, call=f"{dotted(node.func)}(...)")
    # `.numpy()` raises on a device tensor: where it runs on a value of unknown kind, that value is on the host (or
    # no tensor at all), so only what is inferred to be a tensor is flagged, as for np.asarray above. Not so
    # `.numpy(force=True)`, which copies a device tensor to the host (a sync) instead of raising: any value not
    # known to be on the host may be one
    elif ctx.method(node) == "numpy" and not node.args:
        force = any(k.arg == "force" and not (isinstance(k.value, ast.Constant) and not k.value.value)
                    for k in node.keywords)
        if ctx.maybe_dev(node.func.value) if force else ctx.dev(node.func.value):
            ctx.report(RULE.code, node, call=".numpy()")
