"""GC406 state-rebind — Flags assigning a tensor to `self.<attr>` outside `__init__` in the captured region (`self.cache = torch.cat(...)`)."""
from __future__ import annotations

import ast

from ._base import Rule, on

RULE = Rule(
    code='GC406',
    name='state-rebind',
    message='`self.{attr}` is rebound to another tensor inside the captured step',
    hint='write in place (`self.{attr}.copy_(...)`, `index_copy_`)',
    what='Flags assigning a tensor to `self.<attr>` (or re-registering a buffer) outside `__init__` in the captured region (`self.cache = torch.cat(...)`).',
    why='A graph replays into the memory it captured. Rebinding runs in Python, which replay skips: a state tensor rebound to a fresh allocation (or to another buffer) is never updated by replay, which keeps reading and writing the tensor it captured, and a growing `cat` changes the shape every step.',
    example='self.k_cache = torch.cat([self.k_cache, k], dim=1)',
    instead='self.k_cache.index_copy_(1, pos, k)   # fixed capacity, device pos',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()


_INIT = {"__init__", "__post_init__", "__new__", "__setstate__"}


@on(ast.Assign)
def check(ctx, node: ast.Assign) -> None:
    for t in node.targets:
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" \
                and ctx.in_method and ctx.function_name not in _INIT and ctx.dev(node.value):
            ctx.report(RULE.code, t, attr=t.attr)


@on(ast.Call, names=("register_buffer",))
def check_register(ctx, node: ast.Call) -> None:
    # self.register_buffer("inv_freq", t) inside the step swaps the buffer object the graph captured
    f = node.func
    if isinstance(f, ast.Attribute) and f.attr == "register_buffer" and isinstance(f.value, ast.Name) \
            and f.value.id == "self" and ctx.in_method and ctx.function_name not in _INIT and len(node.args) >= 2 \
            and isinstance(node.args[0], ast.Constant) and not ctx.py(node.args[1]):
        ctx.report(RULE.code, node, attr=str(node.args[0].value))
