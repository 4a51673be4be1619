"""GC307 repeat-interleave-tensor — Flags `repeat_interleave` whose repeats are a tensor and that does not pass `output_size`."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC307',
    name='repeat-interleave-tensor',
    message='`repeat_interleave` with tensor repeats and no `output_size`',
    hint='pass `output_size=` (a host int bound)',
    what='Flags `repeat_interleave` whose repeats are a tensor and that does not pass `output_size`.',
    why="The output's size is known only after the kernel has run, so the host must read the count back (a sync) before it can allocate. A CUDA graph records fixed sizes: capture fails, or replay reuses the size seen at capture time.",
    example='rows = torch.repeat_interleave(ids, counts)',
    instead='rows = torch.repeat_interleave(ids, counts, output_size=max_rows)',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = (
    'torch.repeat_interleave',
    'torch.Tensor.repeat_interleave',
    'aten::repeat_interleave',
)


@on(ast.Call, names=("repeat_interleave",))
def check(ctx, node: ast.Call) -> None:
    t = ctx.torch(node)
    if t != "repeat_interleave" and ctx.method(node) != "repeat_interleave":
        return
    if any(k.arg == "output_size" for k in node.keywords):
        return
    reps = [k.value for k in node.keywords if k.arg == "repeats"] + (node.args[1:2] if t else node.args[:1])
    if reps and ctx.dev(reps[0]):
        ctx.report(RULE.code, node)
