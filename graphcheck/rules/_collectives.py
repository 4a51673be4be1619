"""What the collective rules (GC204, GC606, GC804) share: recognising a torch.distributed collective call
through the file's imports (`dist.all_reduce`, `torch.distributed.all_reduce`, `from torch.distributed import
all_reduce`, functional collectives). Not a rule module: the registry loads `gcNNN_*.py` only."""
from __future__ import annotations

import ast

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


def walk_local(nodes) -> list[ast.AST]:
    """Every node under `nodes`, without descending into nested functions, lambdas or classes (their code runs
    elsewhere)."""
    out, stack = [], list(nodes)
    while stack:
        n = stack.pop()
        out.append(n)
        for c in ast.iter_child_nodes(n):
            if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                stack.append(c)
    return out
