"""Which region each line runs in (``graphcheck/regions.py`` has the model; `graphcheck explain regions`).

Two halves, like the rest of the scan:

* per file (``blocks``, ``once_decorator``; the engine stores them in each function's summary, cached by content):
  the blocks of a function that run in another region than the function itself — a `with` block (an allow-block
  when the configuration names its context), a one-time branch (lazy init, cache miss, first-run / warm-up flag),
  a branch that only runs outside capture (`if not torch.cuda.is_current_stream_capturing():`) — and whether the
  def runs once per key (`functools.cache`);
* across files (``RegionMap``): each function's region along the resolved call graph, from the capture and
  per-step entry points, through the blocks its call sites sit in, into configured eager-only code; a finding's
  region is its function's combined with the blocks around its line.
"""
from __future__ import annotations

import ast
import heapq
import re

from ..regions import RANK, REGIONS, weaker
from ..vocab import dotted
from .inference import children

# flag names whose true value means "this has not happened yet" (the branch runs once) and those whose false
# value does; matched on the words of the attribute's last name (`_first_run`, `isWarmup`, `kv_initialized`)
_ONCE_IF_TRUE = frozenset({"first", "warmup", "warming", "uninitialized", "uninitialised"})
_ONCE_IF_FALSE = frozenset({"initialized", "initialised", "inited", "built", "compiled", "warmed"})
_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_ONCE_DECORATORS = frozenset({"functools.cache", "functools.lru_cache", "functools.cached_property"})


def once_decorator(node: ast.AST, imports: dict) -> str:
    """The decorator that makes a def run once per key (`@functools.cache`, `@lru_cache(maxsize=None)`,
    `@cached_property`), '' if none: resolved through the file's imports, so a project's own `cache` is not one."""
    for d in node.decorator_list:
        name = dotted(d.func if isinstance(d, ast.Call) else d)
        head, _, rest = name.partition(".")
        imp = imports.get(head)
        full = f"{imp['target']}.{rest}".rstrip(".") if imp and not imp.get("level") else name
        if full in _ONCE_DECORATORS:
            return name
    return ""


def blocks(fn: ast.AST, nodes: list, globals_possible: bool = True) -> list[list]:
    """The blocks of a def (`nodes`: its own If/With nodes, nested defs excluded) that may run in another region:
    [kind, what, line0, col0, line1, col1] with kind `with` (what: the context's dotted name; the configuration
    decides whether it is an allow-block), `one-time` or `eager-only` (what: why). `globals_possible`: False when
    the file's text never says `global`, so no def of it need be searched for the statement."""
    out: list[list] = []
    glob = _Globals(fn, globals_possible)
    for n in nodes:
        t = type(n)
        if t is ast.With:
            for item in n.items:
                e = item.context_expr
                name = dotted(e.func if isinstance(e, ast.Call) else e)
                if name:
                    out.append(["with", name, *_span(n.body)])
        elif t is ast.If:
            hit = _branch(n, glob)
            if hit is not None:
                kind, why, body = hit
                if body:
                    out.append([kind, why, *_span(body)])
    return out


class _Globals:
    """The names a def declares `global`, read from its body only when a test names a bare name (walking every def
    for them cost a third of the analysis time)."""

    def __init__(self, fn: ast.AST, possible: bool):
        self.fn, self.names = fn, None if possible else set()

    def __contains__(self, name: str) -> bool:
        if self.names is None:
            self.names = {x for s in _walk(self.fn.body) if isinstance(s, ast.Global) for x in s.names}
        return name in self.names


def _span(body: list) -> list[int]:
    first, last = body[0], body[-1]
    return [first.lineno, first.col_offset, last.end_lineno or last.lineno, last.end_col_offset or 0]


def _branch(n: ast.If, glob: _Globals) -> tuple[str, str, list] | None:
    """Which branch of an `if` runs in another region, and why: (kind, why, statements) or None. A conjunction
    counts when one of its terms does (the branch runs at most when that term holds); a disjunction never."""
    test, neg = n.test, False
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, neg = test.operand, not neg
    terms = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and not neg else [test]
    for term in terms:
        tneg = neg
        while isinstance(term, ast.UnaryOp) and isinstance(term.op, ast.Not):
            term, tneg = term.operand, not tneg
        hit = _term(term, tneg, n, glob)
        if hit is not None:
            kind, why, when = hit
            if len(terms) > 1 and not when:
                continue      # `a and b` false says nothing about either term: the else branch is not that region
            return kind, why, n.body if when else n.orelse
    return None


def _term(t: ast.AST, neg: bool, n: ast.If, glob: _Globals):
    """(kind, why, True for the body / False for the else branch) for one term of an `if` test, or None."""
    if isinstance(t, ast.Call) and dotted(t.func).rpartition(".")[2] == "is_current_stream_capturing":
        return "eager-only", "runs only outside capture (is_current_stream_capturing)", neg
    if isinstance(t, ast.Compare) and len(t.ops) == 1:
        op, left, right = t.ops[0], t.left, t.comparators[0]
        if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant) and right.value is None:
            body = isinstance(op, ast.Is) != neg            # the branch taken while it is still None
            if _assigns(n.body if body else n.orelse, left) and _persistent(left, glob):
                return "one-time", f"lazy initialisation of `{ast.unparse(left)}`", body
        if isinstance(op, (ast.In, ast.NotIn)):
            body = isinstance(op, ast.NotIn) != neg         # the branch taken on a miss
            if _fills(n.body if body else n.orelse, right) and _persistent(right, glob):
                return "one-time", f"cache miss on `{ast.unparse(right)}`", body
        return None
    if isinstance(t, ast.Call) and isinstance(t.func, ast.Name) and t.func.id == "hasattr" and len(t.args) == 2 \
            and isinstance(t.args[1], ast.Constant) and isinstance(t.args[1].value, str) and neg:
        target = ast.Attribute(value=t.args[0], attr=t.args[1].value, ctx=ast.Load())
        if _assigns(n.body, target):
            return "one-time", f"lazy initialisation of `{ast.unparse(target)}`", True
        return None
    if isinstance(t, (ast.Attribute, ast.Name)):
        words = {w.lower() for w in _WORDS.findall((t.attr if isinstance(t, ast.Attribute) else t.id))}
        once = not neg if words & _ONCE_IF_TRUE or {"warm", "up"} <= words else neg if words & _ONCE_IF_FALSE else None
        if once is not None and _persistent(t, glob):       # the words first: most tests are no such flag
            return "one-time", f"first-run / warm-up flag `{ast.unparse(t)}`", once
    return None


def _persistent(x: ast.AST, glob: _Globals) -> bool:
    """State that outlives the call: an attribute (`self._buf`, `cls.cache`), a global the def declares, or an
    element of either. A local or a parameter (`if mask is None: mask = ones()`) is set again every call."""
    while isinstance(x, ast.Subscript):
        x = x.value
    if isinstance(x, ast.Attribute):
        return bool(dotted(x))
    return isinstance(x, ast.Name) and x.id in glob


def _walk(stmts: list):
    """The nodes of statements, not entering nested defs, classes or lambdas (their bodies run elsewhere)."""
    todo = list(stmts)
    while todo:
        s = todo.pop()
        yield s
        for c in children(s):
            if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                todo.append(c)


def _assigns(stmts: list, target: ast.AST) -> bool:
    want = _key(target)
    if want is None:
        return False
    for s in _walk(stmts):
        tgts = s.targets if isinstance(s, ast.Assign) else [s.target] if isinstance(s, (ast.AnnAssign, ast.AugAssign)) \
            else []
        for tg in tgts:
            for x in ([tg] if not isinstance(tg, (ast.Tuple, ast.List)) else tg.elts):
                if _key(x) == want:
                    return True
        if isinstance(s, ast.Call) and isinstance(s.func, ast.Name) and s.func.id == "setattr" and len(s.args) >= 2 \
                and isinstance(target, ast.Attribute) and isinstance(s.args[1], ast.Constant) \
                and s.args[1].value == target.attr and _key(s.args[0]) == _key(target.value):
            return True
    return False


def _fills(stmts: list, cache: ast.AST) -> bool:
    """Whether the statements store into the container: `cache[k] = v`, `cache.setdefault(...)`, `.update`,
    `.add`, `.append`."""
    want = _key(cache)
    if want is None:
        return False
    for s in _walk(stmts):
        if isinstance(s, ast.Assign):
            for tg in s.targets:
                if isinstance(tg, ast.Subscript) and _key(tg.value) == want:
                    return True
        elif isinstance(s, ast.Call) and isinstance(s.func, ast.Attribute) \
                and s.func.attr in ("setdefault", "update", "add", "append", "__setitem__") \
                and _key(s.func.value) == want:
            return True
    return False


def _key(x: ast.AST) -> str | None:
    """A target and the same expression read compare equal: `self._buf`, `cache[k]` (a subscript's index is a read
    in both, so its dump carries no store context); None for anything else."""
    if isinstance(x, ast.Subscript):
        inner = _key(x.value)
        return f"{inner}[{ast.dump(x.slice)}]" if inner is not None else None
    return dotted(x) or None


# ---------------------------------------------------------------------------------------------------- cross-file


class RegionError(ValueError):
    """A region key of the configuration that names nothing scanned."""


def _matches(name: str, allowed: list[str]) -> bool:
    return any(name == a or name.endswith("." + a) for a in allowed)


class RegionMap:
    """Each function's region, and a line's. Built once per scan from the program, its reach and the config."""

    def __init__(self, summaries: dict[str, dict], modules: dict[str, str], *, allowed: list[str],
                 eager_only: list[str], strict: bool = True):
        self.s = summaries
        self.mod_of = modules
        self.allowed = list(allowed)
        self.best: dict[tuple[str, str], int] | None = None       # None: an unscoped scan, no call graph
        self._eager = self._eager_functions(eager_only, strict)

    def _eager_functions(self, specs: list[str], strict: bool) -> set[tuple[str, str]]:
        """The defs the eager-only entries name. `strict`: an entry naming nothing is an error (a typo would
        otherwise leave an encoder gated in silence); off where only part of the project is scanned (a file given
        on the command line, a buffer from stdin), whose modules an entry may well not name."""
        out: set[tuple[str, str]] = set()
        for spec in specs:
            mod, sep, qual = spec.partition(":")
            hit = set()
            for path, m in self.mod_of.items():
                if sep and m != mod or not sep and m != mod and not m.startswith(mod + "."):
                    continue
                for q in self.s[path]["functions"]:
                    if q == "<module>" or q.startswith("<class "):
                        continue
                    if not sep or q == qual or q.startswith(qual + "."):
                        hit.add((path, q))
            if not hit and strict:
                where = (f"no function or class {qual!r} in module {mod!r}" if sep and mod in self.mod_of.values()
                         else f"module {mod!r} is not among the scanned files")
                raise RegionError(f"[tool.graphcheck] eager-only {spec!r}: {where}")
            out |= hit
        return out

    def floor(self, path: str, q: str) -> int:
        """The region a def runs in whoever calls it: eager-only where configured, one-time where it runs once per
        key, allowed where an allow-block decorates it."""
        r = 0
        if (path, q) in self._eager:
            r = RANK["eager-only"]
        fn = self.s[path]["functions"].get(q) or {}
        if fn.get("once"):
            r = max(r, RANK["one-time"])
        if self.allowed and any(_matches(d, self.allowed) for d in fn.get("decos", ())):
            r = max(r, RANK["allowed"])
        return r

    def _blocks_at(self, path: str, q: str, line: int, col: int) -> int:
        r = 0
        for kind, what, l0, c0, l1, c1 in (self.s[path]["functions"].get(q) or {}).get("blocks", ()):
            if not (l0, c0) <= (line, col) <= (l1, c1):
                continue
            if kind == "with":
                if self.allowed and _matches(what, self.allowed):
                    r = max(r, RANK["allowed"])
            else:
                r = max(r, RANK[kind])
        return r

    def assign(self, reach, capture_roots: list, per_step_roots: list) -> None:
        """Each function's region over the call graph the scope walked (`reach`: the calls it followed, to the
        targets it followed them to; a fan-out it cut is not followed here either): the strongest over the paths
        that reach it, each path as weak as its weakest step (a bottleneck shortest path: the region only ever
        weakens along a path)."""
        heap = [(max(RANK[r], self.floor(*n)), n) for r, roots in (("captured", capture_roots),
                                                                   ("per-step", per_step_roots)) for n in roots]
        heapq.heapify(heap)
        best: dict[tuple[str, str], int] = {}
        while heap:
            r, node = heapq.heappop(heap)
            if node in best:
                continue
            best[node] = r
            path, q = node
            funcs = self.s[path]["functions"]
            for other in funcs:       # a nested def runs where its enclosing function calls it
                if other.startswith(q + ".") and "." not in other[len(q) + 1:] and (path, other) not in best:
                    heapq.heappush(heap, (max(r, self.floor(path, other)), (path, other)))
            for call in funcs[q]["calls"]:
                targets = reach.targets(call)
                if not targets:
                    continue
                line, col = _call_pos(call)
                site = max(r, self._blocks_at(path, q, line, col))
                for t in targets:
                    if t not in best:
                        heapq.heappush(heap, (max(site, self.floor(*t)), t))
        self.best = best

    def function(self, path: str, q: str) -> str:
        if self.best is None or (path, q) not in self.best:
            return REGIONS[self.floor(path, q)] if q in self.s.get(path, {}).get("functions", {}) else "captured"
        return REGIONS[self.best[(path, q)]]

    def at(self, path: str, q: str, line: int, col: int) -> str:
        """The region of a finding at (line, col) of function q."""
        if path not in self.s:
            return "captured"
        return weaker(self.function(path, q), REGIONS[self._blocks_at(path, q, line, col)])

    def for_runtime(self, path: str, line: int) -> str:
        """The region of a line a runtime layer saw run in the target's step: the step reached it, so only what
        the line itself says counts (the blocks around it, and its def's own region: eager-only, once per key,
        allowed), not how the scan reached it."""
        summ = self.s.get(path)
        if summ is None or line <= 0:
            return "captured"
        inner, span = None, None
        for q, fn in summ["functions"].items():
            lo, hi = fn.get("line", 0), fn.get("end", 0)
            if lo and lo <= line <= hi and (span is None or hi - lo < span):
                inner, span = q, hi - lo
        if inner is None:
            return "captured"
        return REGIONS[max(self.floor(path, inner), self._blocks_at(path, inner, line, 1 << 30),
                           self._blocks_at(path, inner, line, 0))]


def _call_pos(call: list) -> tuple[int, int]:
    """(line, col) of a call record: its first two integers after the kind."""
    for i in range(1, len(call)):
        x = call[i]
        if isinstance(x, int) and not isinstance(x, bool):
            nxt = call[i + 1] if i + 1 < len(call) else 0
            return x, nxt if isinstance(nxt, int) and not isinstance(nxt, bool) else 0
    return 0, 0
