"""What the collective rules (GC204, GC606, GC804) share: recognising a torch.distributed collective call
through the file's imports (`dist.all_reduce`, `torch.distributed.all_reduce`, `from torch.distributed import
all_reduce`, functional collectives). Not a rule module: the registry loads `gcNNN_*.py` only."""
from __future__ import annotations

import ast
import re

from ._base import dotted

# tensor collectives: capturable on a group that supports capture (NCCL), from the capturing stream
TENSOR = frozenset({"all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_single", "reduce_scatter",
                    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "broadcast", "reduce", "send", "recv",
                    "isend", "irecv", "batch_isend_irecv", "all_gather_tensor", "wait_tensor"})
# a host round trip on every backend, or process-group setup: never capturable
HOST = frozenset({"barrier", "monitored_barrier", "all_gather_object", "broadcast_object_list", "gather_object",
                  "scatter_object_list", "send_object_list", "recv_object_list", "new_group", "init_process_group",
                  "new_subgroups", "destroy_process_group"})
RANK_CALLS = frozenset({"get_rank", "get_local_rank", "get_node_local_rank", "get_group_rank", "get_global_rank"})


def runtime_names(names) -> tuple[str, ...]:
    """`torch.distributed.<name>` for each name, sorted: a collective rule's RUNTIME signatures, as the runtime
    monitor names the calls it wraps."""
    return tuple(f"torch.distributed.{n}" for n in sorted(names))


def resolve(ctx, func: ast.AST) -> str:
    """The fully qualified name of a called function through the file's imports ('' if unknown)."""
    return ctx.qual(func) or dotted(func)


def collective(ctx, node: ast.AST) -> str | None:
    """'all_reduce' for a torch.distributed collective call, else None."""
    if not isinstance(node, ast.Call):
        return None
    full = resolve(ctx, node.func)
    last = full.rsplit(".", 1)[-1]
    if full.startswith("torch.distributed.") and (last in TENSOR or last in HOST):
        return last
    return None


def in_distributed_file(ctx) -> bool:
    """Whether the file can name torch.distributed at all (every import or attribute path to it spells
    `distributed`). The collective rules ask first: without it no call resolves to a collective, and walking every
    function of every file for collectives was a third of a cold scan of torch's tree."""
    a = ctx.a
    known = getattr(a, "_mentions_distributed", None)
    if known is None:
        known = a._mentions_distributed = "distributed" in a.text
    return known


_NAMES = TENSOR | HOST
_NAME_RX = re.compile(r"\b(?:%s)\b" % "|".join(sorted(_NAMES)))
# every collective name contains one of these: looking for them first (a plain substring search) spares the
# regular expression, which is some forty times slower, on nearly every function
_CORES = ("reduce", "gather", "scatter", "all_to_all", "broadcast", "send", "recv", "barrier", "wait_tensor",
          "new_group", "new_subgroups", "init_process_group", "destroy_process_group")
if not all(any(c in n for c in _CORES) for n in _NAMES):
    raise ImportError("_collectives._CORES must cover every collective name")


def may_call_collective(ctx, fn: ast.AST) -> bool:
    """False only when no call in function `fn` (as `walk_local([fn])` sees it) can be a collective, read from its
    source text: GC204 asks before walking a function (most functions of torch.distributed issue none).

    A call resolves to `torch.distributed.<c>` only through its own spelling: `<c>` is the called attribute or name,
    or the called name is an import or alias bound to a path ending in `<c>`. All of that lies between the first
    decorator and the function's last line (less a docstring's inner lines). A function whose text is not ASCII is
    not read (identifiers are NFKC-normalised, so the tree's spelling need not be the text's), nor a file with a
    lone carriage return (the parser counts it as a line break, `str.split("\\n")` does not)."""
    a = ctx.a
    lines = getattr(a, "_collective_lines", None)
    if lines is None:
        lines = a._collective_lines = a.text.split("\n") if a.text.count("\r") == a.text.count("\r\n") else ()
        a._collective_imports = [k for k, imp in a.imports.items() if imp["target"].rsplit(".", 1)[-1] in _NAMES]
    if not lines:
        return True
    first = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
    doc = fn.body[0] if fn.body and isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant) \
        and isinstance(fn.body[0].value.value, str) else None
    if doc is not None and doc.end_lineno - doc.lineno > 1:
        # the docstring's inner lines are string content only (documentation names collectives all the time)
        text = "\n".join(lines[first - 1:doc.lineno] + lines[doc.end_lineno - 1:fn.end_lineno])
    else:
        text = "\n".join(lines[first - 1:fn.end_lineno])
    if not text.isascii() or (any(c in text for c in _CORES) and _NAME_RX.search(text)):
        return True
    bound = [k for k, v in ctx.env.aliases.items() if v.rsplit(".", 1)[-1] in _NAMES] + a._collective_imports
    return any(re.search(r"\b%s\b" % re.escape(k), text) for k in bound)


_OWN_SCOPE = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
# AST fields that hold only operator and context markers (Load, Add, Eq, ...): no rule looks for those
_MARKER_FIELDS = {"ctx", "op", "ops"}
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def walk_local(nodes) -> list[ast.AST]:
    """Every node under `nodes`, without descending into nested functions, lambdas or classes (their code runs
    elsewhere), and without the operator/context marker nodes. The order is that of a stack walk over
    `ast.iter_child_nodes` (GC204 names the first collective it meets); the fields are read directly because the
    generic iterator was most of the collective rules' time on torch's tree."""
    out, stack = [], list(nodes)
    push, fields_of = stack.append, _CHILD_FIELDS
    while stack:
        n = stack.pop()
        out.append(n)
        t = type(n)
        fields = fields_of.get(t)
        if fields is None:
            fields = fields_of[t] = tuple(f for f in t._fields if f not in _MARKER_FIELDS)
        for name in fields:
            v = getattr(n, name, None)
            if type(v) is list:
                for c in v:
                    if isinstance(c, ast.AST) and not isinstance(c, _OWN_SCOPE):
                        push(c)
            elif isinstance(v, ast.AST) and not isinstance(v, _OWN_SCOPE):
                push(v)
    return out
