"""GC204 rank-divergent-branch — Flags a host branch on a value that can differ across ranks (the rank, RANK from
the environment, a clock, host RNG) that decides whether this rank issues a collective."""
from __future__ import annotations

import ast

from . import _collectives as col
from ._base import Rule, dotted, on

RULE = Rule(
    code="GC204",
    name="rank-divergent-branch",
    message="ranks take different host paths around a collective: {detail}",
    hint="make every rank issue the same collectives in the same order; select per-rank values with tensors",
    what="Flags `if`/`while`/`x if c else y` whose condition reads a value that can differ across ranks (`dist.get_rank()`, "
         "a `rank`/`local_rank` variable or attribute, `os.environ['RANK']`, `time.time()`, `random.random()`) when a "
         "branch arm issues a collective, or leaves the function early before one. At run time (`--nproc N`) the ranks' "
         "collective sequences are compared step by step, and the first collective where they differ is reported on "
         "each rank.",
    why="Tensor parallelism is N programs in lockstep: every rank must issue the same collectives, in the same order, "
        "with the same shapes. A rank that skips or adds one hangs its peers (eagerly) or captures a graph whose "
        "collectives do not match the other ranks' graphs, so the first replay deadlocks or reduces the wrong buffers.",
    example="if dist.get_rank() == 0:\n    dist.all_reduce(stats)\nif self.rank != 0:\n    return y",
    instead="dist.all_reduce(stats)                    # every rank\ny = torch.where(is_first_rank, y + bias, y)   # per-rank value as a tensor",
)
# No op signature: the runtime finding comes from comparing the ranks' collective traces, not from one call.
RUNTIME: tuple[str, ...] = ()

_RANK_NAMES = {"rank", "local_rank", "global_rank", "tp_rank", "dp_rank", "pp_rank", "ep_rank", "node_rank", "my_rank"}
_HOST_VARYING = {"time.time", "time.perf_counter", "time.monotonic", "time.time_ns", "random.random", "random.randint",
                 "socket.gethostname", "os.getpid"}


def _divergent(ctx, expr: ast.AST, local: set[str]) -> str:
    """The first sub-expression of `expr` that can differ across ranks, as source text ('' if none)."""
    for n in ast.walk(expr):
        if isinstance(n, ast.Call):
            full = col.resolve(ctx, n.func)
            last = full.rsplit(".", 1)[-1]
            if (full.startswith("torch.distributed.") and last in col.RANK_CALLS) or full in _HOST_VARYING:
                return dotted(n.func) + "()"
            if full in ("os.getenv", "os.environ.get") and n.args and isinstance(n.args[0], ast.Constant) \
                    and "RANK" in str(n.args[0].value):
                return f"{dotted(n.func)}({n.args[0].value!r})"
        elif isinstance(n, ast.Subscript) and dotted(n.value).endswith("environ") and isinstance(n.slice, ast.Constant) \
                and "RANK" in str(n.slice.value):
            return f"os.environ[{n.slice.value!r}]"
        elif isinstance(n, ast.Attribute) and n.attr in _RANK_NAMES:
            return dotted(n) or n.attr
        elif isinstance(n, ast.Name) and (n.id in _RANK_NAMES or n.id in local):
            return n.id
    return ""


def _rank_locals(ctx, fn: ast.AST) -> set[str]:
    """Names this function assigns from a rank-divergent value (`r = dist.get_rank()`, `first = self.rank == 0`)."""
    out: set[str] = set()
    for _ in range(2):                  # two passes: names derived from names
        for n in col.walk_local([fn]):
            if isinstance(n, ast.Assign) and _divergent(ctx, n.value, out):
                out |= {t.id for t in n.targets if isinstance(t, ast.Name)}
    return out


def _facts(ctx, fn: ast.AST) -> tuple[set[str], bool]:
    """(rank-derived local names, whether the function issues any collective), computed once per function: every
    branch of the function asks, and recomputing them per branch made the rule quadratic in the function's size
    (it dominated the whole scan of torch's tree)."""
    facts = getattr(fn, "_gc204_facts", None)
    if facts is None:
        issues = col.may_call_collective(ctx, fn) and any(col.collective(ctx, n) for n in col.walk_local([fn]))
        facts = fn._gc204_facts = (_rank_locals(ctx, fn) if issues else set(), issues)
    return facts


def _issues(ctx, nodes) -> str:
    for n in col.walk_local(nodes):
        name = col.collective(ctx, n)
        if name:
            return f"dist.{name}"
    return ""


def _exits(nodes) -> bool:
    return any(isinstance(n, (ast.Return, ast.Raise, ast.Break, ast.Continue)) for n in col.walk_local(nodes))


def _check(ctx, node: ast.AST, test: ast.AST, arms: list) -> None:
    if not col.in_distributed_file(ctx):
        return
    fn = ctx.func.node if ctx.func is not None else None
    local: set[str] = set()
    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        local, issues = _facts(ctx, fn)
        if not issues:              # no collective anywhere in the function: no branch can skip one
            return
    value = _divergent(ctx, test, local)
    if not value:
        return
    inside = _issues(ctx, arms)
    if inside:
        ctx.report(RULE.code, test, detail=f"a branch on `{value}` decides whether this rank runs `{inside}`")
        return
    if fn is not None and _exits(arms):
        end = getattr(node, "end_lineno", node.lineno)
        later = [n for n in col.walk_local(getattr(fn, "body", [])) if getattr(n, "lineno", 0) > end and col.collective(ctx, n)]
        if later:
            ctx.report(RULE.code, test, detail=f"a branch on `{value}` leaves early, before `dist.{col.collective(ctx, later[0])}` "
                       f"(line {later[0].lineno})")


@on(ast.If)
def check_if(ctx, node: ast.If) -> None:
    _check(ctx, node, node.test, [*node.body, *node.orelse])


@on(ast.While)
def check_while(ctx, node: ast.While) -> None:
    _check(ctx, node, node.test, [*node.body, *node.orelse])


@on(ast.IfExp)
def check_ifexp(ctx, node: ast.IfExp) -> None:
    _check(ctx, node, node.test, [node.body, node.orelse])
