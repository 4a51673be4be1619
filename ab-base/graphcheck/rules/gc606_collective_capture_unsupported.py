"""GC606 collective-capture-unsupported — Flags collectives in the captured region that the process group
cannot capture: barriers, object collectives, and process-group setup (the runtime also flags CUDA tensors
on a group whose backend has no capture support, such as gloo)."""
from __future__ import annotations

import ast

from . import _collectives as col
from ._base import Rule, on

RULE = Rule(
    code="GC606",
    name="collective-capture-unsupported",
    message="`{call}` cannot be captured: {why}",
    hint="keep tensor collectives on an NCCL group in the step; move barriers, object collectives and group setup out of it",
    what="Flags `dist.barrier()`, `monitored_barrier`, the object collectives (`all_gather_object`, "
         "`broadcast_object_list`, ...) and `new_group`/`init_process_group` inside the captured region. At run time "
         "(`graphcheck audit --nproc N`) it also flags a tensor collective whose CUDA tensors go through a group "
         "whose backend cannot be captured (gloo, mpi).",
    why="A CUDA graph records kernels on the capturing stream. NCCL's tensor collectives are such kernels; a barrier "
        "is a device-wide synchronisation, an object collective pickles on the host and reads sizes back, group "
        "setup talks to the store, and gloo stages CUDA tensors through host memory: each is a host round trip that "
        "fails the capture (or, outside capture, stalls every rank each step).",
    example="dist.barrier()\nlogits = head(h)\nparts = [None] * world\ndist.all_gather_object(parts, logits)",
    instead="out = torch.empty(world * n, v, device=h.device)\ndist.all_gather_into_tensor(out, head(h))  # NCCL, captured",
)
# The Python-level torch.distributed calls whose mere presence in the step is the hazard; the runtime monitor
# (graphcheck/runtime/distributed.py) wraps them for the audited steps.
RUNTIME: tuple[str, ...] = col.runtime_names(col.HOST)


# dispatched by name: a call resolves to a collective only through its own name or the last part of its
# qualified name, which is what the engine matches `names` against
@on(ast.Call, names=tuple(sorted(col.HOST)))
def check(ctx, node: ast.Call) -> None:
    if not col.in_distributed_file(ctx):
        return
    name = col.collective(ctx, node)
    if name in col.HOST:
        why = ("process-group setup talks to the store" if name in ("new_group", "init_process_group", "new_subgroups",
                                                                     "destroy_process_group")
               else "a barrier synchronises the device and every rank" if "barrier" in name
               else "object collectives pickle on the host and read tensor sizes back")
        ctx.report(RULE.code, node, call=f"dist.{name}", why=why)
