"""GC804 collective-off-stream — Flags a collective launched outside the capture stream: inside
`with torch.cuda.stream(side):`, or with `async_op=True` and a work handle the step never waits on."""
from __future__ import annotations

import ast

from . import _collectives as col
from ._base import Rule, dotted, on

RULE = Rule(
    code="GC804",
    name="collective-off-stream",
    message="collective `{call}` {detail}",
    hint="issue collectives on the current (capturing) stream and wait on every async work handle inside the step",
    what="Flags a torch.distributed collective issued inside `with torch.cuda.stream(s):` for a stream other than "
         "`torch.cuda.current_stream()`, and an `async_op=True` collective whose work handle is discarded or never "
         "`.wait()`ed in the same function. At run time it flags a collective issued from a stream that is not "
         "capturing while a capture is open, and async work left unwaited at the end of a step.",
    why="NCCL runs a collective on its own stream, ordered after the stream that issued it. Capture records only work "
        "that joins the capturing stream: a collective issued from a side stream that never joined runs once, eagerly, "
        "and replay skips it (the other ranks' replays then wait forever or read a stale buffer); an async collective "
        "never waited leaves the NCCL stream unjoined, so `capture_end` fails.",
    example="with torch.cuda.stream(comm_stream):\n    dist.all_reduce(y)\nwork = dist.all_reduce(z, async_op=True)\nreturn z",
    instead="dist.all_reduce(y)                      # on the current stream\nwork = dist.all_reduce(z, async_op=True)\n...\nwork.wait()                             # joined before the step returns",
)
# The tensor collectives, as the runtime monitor names the calls it wraps: it reports them under this code when
# they are issued off the capturing stream or left unwaited.
RUNTIME: tuple[str, ...] = col.runtime_names(col.TENSOR)


def _is_current_stream(ctx, e: ast.AST) -> bool:
    return isinstance(e, ast.Call) and col.resolve(ctx, e.func).endswith("current_stream")


@on(ast.With)
def check_stream_block(ctx, node: ast.With) -> None:
    if not col.in_distributed_file(ctx):
        return
    for item in node.items:
        e = item.context_expr
        if not (isinstance(e, ast.Call) and col.resolve(ctx, e.func) in ("torch.cuda.stream", "torch.cuda.StreamContext")):
            continue
        if e.args and _is_current_stream(ctx, e.args[0]):
            continue
        stream = dotted(e.args[0]) if e.args else "?"
        for n in col.walk_local(node.body):
            name = col.collective(ctx, n)
            if name in col.TENSOR:
                ctx.report(RULE.code, n, call=f"dist.{name}", detail=f"is issued on stream `{stream or 'expression'}`, "
                           "not the capturing stream")


def _waited(fn: ast.AST, var: str) -> bool:
    for n in col.walk_local([fn]):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "wait" \
                and isinstance(n.func.value, ast.Name) and n.func.value.id == var:
            return True
    return False


# dispatched by name, as GC606: only a call named like a tensor collective can be one
@on(ast.Call, names=tuple(sorted(col.TENSOR)))
def check_async(ctx, node: ast.Call) -> None:
    if not col.in_distributed_file(ctx):
        return
    name = col.collective(ctx, node)
    if name not in col.TENSOR or not any(k.arg == "async_op" and isinstance(k.value, ast.Constant) and k.value.value is True
                                         for k in node.keywords):
        return
    fn = ctx.func.node if ctx.func is not None else None
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return
    for stmt in col.walk_local(fn.body):
        if isinstance(stmt, ast.Expr) and stmt.value is node:
            ctx.report(RULE.code, node, call=f"dist.{name}(async_op=True)", detail="discards its work handle: nothing "
                       "joins the collective's stream back into the capture")
            return
        if isinstance(stmt, ast.Assign) and stmt.value is node and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            if not _waited(fn, stmt.targets[0].id):
                ctx.report(RULE.code, node, call=f"dist.{name}(async_op=True)",
                           detail=f"returns `{stmt.targets[0].id}`, which this function never `.wait()`s")
            return
