"""GC406 state-rebind — Flags assigning a tensor to `self.<attr>` outside `__init__` in the captured region (`self.cache = torch.cat(...)`)."""
from __future__ import annotations

import ast

from ._base import Rule, dotted, on

RULE = Rule(
    code='GC406',
    name='state-rebind',
    message='`self.{attr}` is rebound to another tensor inside the captured step',
    hint='write in place (`self.{attr}.copy_(...)`, `index_copy_`)',
    what='Flags assigning a tensor to `self.<attr>` (or re-registering a buffer) outside `__init__` in the captured region (`self.cache = torch.cat(...)`). Not flagged: a conversion or view of the attribute itself (`self.cache = self.cache.to(q.device, dtype=q.dtype)`, the same tensor once converted; `self.lens = self.lens.reshape(-1, 1)`, the same storage) and a run-once branch that sets what it tests (`if not self.ready: self.cache = ...; self.ready = True`, `if self.buf is None: self.buf = ...`, also behind plain flags: `if self.use_fast and self.buf is None:`), which runs at warm-up, before capture.',
    why='A graph replays into the memory it captured. Rebinding runs in Python, which replay skips: a state tensor rebound to a fresh allocation (or to another buffer) is never updated by replay, which keeps reading and writing the tensor it captured, and a growing `cat` changes the shape every step.',
    example='self.k_cache = torch.cat([self.k_cache, k], dim=1)',
    instead='self.k_cache.index_copy_(1, pos, k)   # fixed capacity, device pos',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()


_INIT = {"__init__", "__post_init__", "__new__", "__setstate__"}
# conversions that return the tensor itself once it already has the asked-for device/dtype/layout, and views to a
# fixed shape (`self.lens = self.lens.reshape(-1, 1, 1, 1)`): the same storage, and the same shape when run again
_IDEMPOTENT = {"to", "type", "float", "half", "bfloat16", "double", "contiguous", "cuda", "view", "reshape",
               "view_as", "reshape_as"}


def _self_attr(n: ast.AST) -> str:
    return n.attr if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self" else ""


def _converts_itself(attr: str, v: ast.AST) -> bool:
    """`self.cache = self.cache.to(q.device, dtype=q.dtype)`: rebinds only the first time (then `.to` returns the
    same tensor), and the copy, if captured, is replayed from the same source."""
    return isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr in _IDEMPOTENT \
        and _self_attr(v.func.value) == attr \
        and not any(k.arg == "copy" and not (isinstance(k.value, ast.Constant) and not k.value.value) for k in v.keywords)


def _once_flag(test: ast.AST) -> tuple[str, bool]:
    """The attribute an `if` tests for not-yet-done, and whether the test is `is None`: `if not self.ready:`,
    `if self.buf is None:`, also gated by plain flags (`if self.use_fast and self.buf is None:`: still run once, the
    first time the flag holds)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        hits = [(v, _once_flag(v)) for v in test.values]
        once = [h for v, h in hits if h[0]]
        # the others plain flag reads (`self.use_fast`, `enabled`, `cfg.fused`: a name chain, no call or comparison)
        if len(once) == 1 and all(h[0] or dotted(v) for v, h in hits):
            return once[0]
        return "", False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _self_attr(test.operand), False
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is) \
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None:
        return _self_attr(test.left), True
    return "", False


def _once_branches(fn: ast.AST) -> set[int]:
    """Assignments inside a run-once branch: `if not self.F: ...; self.F = True` (or `if self.F is None: self.F =
    ...`). The branch sets what it tests, so it runs on the first call (the warm-up before capture), never again.
    Not run-once: a flag set to something that may be false (`self.F = x.any()`), or assigned again elsewhere in
    the function (`self.F = False` at the end of the step runs the branch every step)."""
    out: set[int] = set()
    assigns = [m for m in ast.walk(fn) if isinstance(m, ast.Assign)]
    for n in ast.walk(fn):
        if not isinstance(n, ast.If):
            continue
        flag, is_none = _once_flag(n.test)
        if not flag:
            continue
        body = [m for s in n.body for m in ast.walk(s)]
        inside = {id(m) for m in body}
        to_flag = [m for m in assigns if any(_self_attr(t) == flag for t in m.targets)]
        done = [m for m in to_flag if id(m) in inside and (
            not (isinstance(m.value, ast.Constant) and m.value.value is None) if is_none
            else isinstance(m.value, ast.Constant) and bool(m.value.value))]
        if done and all(id(m) in inside for m in to_flag):
            out.update(id(m) for m in body if isinstance(m, ast.Assign))
    return out


@on(ast.Assign)
def check(ctx, node: ast.Assign) -> None:
    for t in node.targets:
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" \
                and ctx.in_method and ctx.function_name not in _INIT and not _converts_itself(t.attr, node.value) \
                and ctx.dev(node.value) and id(node) not in _once(ctx):
            ctx.report(RULE.code, t, attr=t.attr)


def _once(ctx) -> set[int]:
    f = ctx.func
    hit = getattr(f, "_gc406_once", None)
    if hit is None:
        hit = _once_branches(f.node) if f.node is not None else set()
        f._gc406_once = hit
    return hit


@on(ast.Call, names=("register_buffer",))
def check_register(ctx, node: ast.Call) -> None:
    # self.register_buffer("inv_freq", t) inside the step swaps the buffer object the graph captured
    f = node.func
    if isinstance(f, ast.Attribute) and f.attr == "register_buffer" and isinstance(f.value, ast.Name) \
            and f.value.id == "self" and ctx.in_method and ctx.function_name not in _INIT and len(node.args) >= 2 \
            and isinstance(node.args[0], ast.Constant) and not ctx.py(node.args[1]):
        ctx.report(RULE.code, node, attr=str(node.args[0].value))
