"""The captured region and the cross-file half of the device lattice.

Scope: the functions reachable from the entry points through calls resolved statically inside the scanned tree —
same-module names, imports (also through package-dir mappings and re-exports), ``self.method()``, submodules held
in attributes (assigned directly, in ``nn.ModuleList``/``ModuleDict``/``Sequential``, filled by ``.append`` in a
loop, by a comprehension, by a helper or factory that returns them, by a class variable such as ``model_cls``, or
taken from a module-level registry), submodules of submodules (``self.block.experts(x)``), ``CustomOp``-style
dispatch (``forward`` -> ``forward_cuda`` / ``forward_native``), ``super()``, ``self.method()`` to the method and
its overrides in every subclass of the receiver (the class ``self`` may be at run time: the entry point's class, a
submodule's, an override's: each function is walked once per receiver), functions passed as arguments (by position
or keyword) and defs nested in an enclosing function. ``module(...)`` means ``forward``. Reading a property
(``self.n``, ``self.cache.length``, resolved as ``self.n()`` / ``self.cache.length()`` would be) runs its getter, and
assigning it (``self.n = v``) its setter; a read of a plain attribute resolves to nothing and stays quiet.
Whatever cannot be resolved is kept (``unresolved``), so a scan never calls a scope it could not build clean.

Kinds: a finding whose value depends on a parameter or a callee's return (see ``inference``) is decided by
joining the kinds the resolved callers pass and the resolved callees return (``conditions.py``). How a name or a call
resolves is ``resolve.py``; this module walks the calls from the entry points.
"""
from __future__ import annotations

from collections import deque

from .conditions import Conditions
from .resolve import Resolver


class ScopeError(ValueError):
    pass


class Program(Resolver, Conditions):
    def __init__(self, summaries: dict[str, dict], modules: dict[str, str]):
        self.s = summaries            # path -> summary
        self.mod_of = modules         # path -> module name
        self.path_of = {m: p for p, m in modules.items()}
        self._memo: dict[str, tuple[str, str] | None] = {}
        self._callees: dict[tuple[str, str], list] = {}
        self._callers: dict[str, list] | None = None
        self._kinds: dict = {}
        self.roots: set[tuple[str, str]] = set()
        # no entry points (every function in scope): any function may be where a step starts, so a parameter no
        # resolved caller feeds is unknown, judged as an entry point's input (likely on the device), not host data
        self.open_scope = False
        self._rev: dict[str, dict] = {}
        self._calls: dict[int, tuple] = {}
        self._mros: dict[tuple[str, str], list] = {}
        self._syms: dict[tuple[str, str], tuple[str, str] | None] = {}
        self._subs: dict[tuple[str, str], list] | None = None
        self._accessors: set[str] | None = None
        self._attr_insts: dict[tuple, tuple[list, bool, bool]] = {}
        self._hops: dict[tuple, list] = {}
        self._insts: dict[tuple, tuple[list, bool]] = {}
        self._meths: dict[tuple, list] = {}
        self._targets: dict[int, tuple[list, list]] = {}

    # -- reachability -------------------------------------------------------------------------------
    def entry(self, spec: str) -> tuple[str, str]:
        mod, sep, qual = spec.partition(":")
        if not sep or not mod or not qual:
            raise ScopeError(f"entry point {spec!r} is not of the form 'package.module:Class.method'")
        path = self.path_of.get(mod)
        if path is None:
            tail = mod.replace(".", "/")
            near = sorted(m for p, m in self.mod_of.items() if p.endswith((f"{tail}.py", f"{tail}/__init__.py"))
                          or p.endswith(f"{mod.rsplit('.', 1)[-1]}.py") and mod.endswith(f".{m}"))
            hint = (f" (its file is scanned as module {near[0]!r}: names come from the package directories, those with "
                    "an __init__.py, up to the project root)") if near else ""
            raise ScopeError(f"entry point {spec!r}: module {mod!r} is not among the scanned files{hint}")
        funcs = self.s[path]["functions"]
        if qual in funcs:
            return (path, qual)
        if qual in self.s[path]["classes"]:
            hit = self._class_method((path, qual), "__call__")
            if hit:
                return hit[0]
        cls, _, meth = qual.rpartition(".")
        if cls in self.s[path]["classes"]:      # a method the class inherits: Backend.init_metadata from its base
            hit = self._class_method((path, cls), meth)
            if hit:
                return hit[0]
        raise ScopeError(f"entry point {spec!r}: no function {qual!r} in {path}")

    def receiver(self, spec: str) -> tuple[str, str] | None:
        """The class an entry point names (`mod:Llama.forward`, `mod:Llama`): its `self` is that class or a subclass,
        even where the method is inherited from a base that other classes share."""
        mod, _, qual = spec.partition(":")
        path = self.path_of.get(mod)
        if path is None:
            return None
        classes = self.s[path]["classes"]
        if qual in classes:
            return (path, qual)
        cls = qual.rpartition(".")[0]
        return (path, cls) if cls in classes else None

    def reachable(self, entry_points: list[str], fanout_limit: int = 0) -> "Reach":
        """The functions reachable from the entry points (and every `@capturable` def). A call that resolves to more
        than `fanout_limit` implementations (classes, or functions; 0: no limit) is not followed: it becomes one
        fan-out record (`Reach.fanouts`), and its record joins `Reach.cut`. Each function is walked once per class
        its `self` may be (the receiver: an entry point's class, a submodule's, an override's), so that a base
        class's `self.m()` reached from one subclass does not run its siblings' overrides."""
        roots = [self.entry(e) for e in entry_points]
        starts = [(r, self.receiver(e)) for r, e in zip(roots, entry_points)]
        for path, summ in self.s.items():
            caps = [(path, q) for q, f in summ["functions"].items() if f.get("capturable")]
            roots += caps
            starts += [(c, None) for c in caps]
        self.roots = set(roots)
        parent: dict[tuple[str, str], tuple | None] = {r: None for r in roots}
        unresolved: list[dict] = []
        fanouts: dict[tuple, dict] = {}
        cut: set[int] = set()
        edges: dict[int, list] = {}
        noted: set[int] = set()
        todo = deque(starts)
        seen: set[tuple[str, str]] = set()
        walked: set[tuple] = set()
        while todo:
            node, recv = todo.popleft()
            path, q = node
            if recv is not None and recv == self._cls_of(node):
                recv = None
            if (node, recv) in walked:
                continue
            walked.add((node, recv))
            seen.add(node)
            funcs = self.s[path]["functions"]
            # nested functions of a reachable function are part of it (a closure's self is the enclosing one's)
            for other in funcs:
                if other.startswith(q + ".") and "." not in other[len(q) + 1:]:
                    if (path, other) not in parent:
                        parent[(path, other)] = (node, funcs[other]["line"])
                    todo.append(((path, other), recv))
            for call in funcs[q]["calls"]:
                pairs, status = self.dispatch(path, q, call, recv)
                targets = list(dict.fromkeys(t for t, _ in pairs))
                first = id(call) not in noted
                noted.add(id(call))
                if first and status == "unresolved" and call[0] != "ref":
                    unresolved.append({"path": path, "function": q, "line": _call_line(call), "call": _describe(call)})
                if fanout_limit and len(targets) > fanout_limit and self._fans_out(targets, fanout_limit, fanouts,
                                                                                   path, q, call, first):
                    cut.add(id(call))
                    continue
                got = edges.setdefault(id(call), [])
                for t, r in pairs:
                    if t not in got:
                        got.append(t)
                    if t not in parent:
                        parent[t] = (node, _call_line(call))
                    todo.append((t, r))
        return Reach(seen, parent, unresolved, self._gaps(roots, seen, entry_points), list(fanouts.values()), cut,
                     edges)

    def _fans_out(self, targets: list, limit: int, fanouts: dict, path: str, q: str, call: list,
                  new_site: bool = True) -> bool:
        """Whether a call's targets are more implementations than the limit: distinct classes for methods (a
        CustomOp's forward and forward_cuda are one implementation), each function for itself. Records the call
        once per target set (the same dispatch from several sites is one fan-out, counting its sites)."""
        impls = {(t[0], self.s[t[0]]["functions"][t[1]].get("cls") or t[1]) for t in targets}
        if len(impls) <= limit:
            return False
        key = (_describe(call), tuple(sorted(targets)))
        rec = fanouts.get(key)
        if rec is None:
            fanouts[key] = {"path": path, "function": q, "line": _call_line(call), "call": key[0],
                            "implementations": len(targets), "classes": len(impls), "sites": 1,
                            "targets": [f"{p}:{t}" for p, t in key[1]]}
        elif new_site:       # the same site walked again for another receiver is not another site
            rec["sites"] += 1
        return True

    def _gaps(self, roots: list, seen: set, specs: list[str]) -> list[str]:
        """Entry points that reach fewer functions than their class obviously calls: submodules it constructs whose
        forward is in the tree but was not reached."""
        out = []
        for spec, (path, q) in zip(specs, roots):
            cls = self.s[path]["functions"][q].get("cls")
            if not cls:
                continue
            missing = []
            for attr in sorted(self.s[path]["classes"][cls]["attrs"]):
                insts, _, _ = self._attr_instances((path, cls), attr)
                for c in insts:
                    fw = self._class_method(c, "__call__")
                    if fw and not any(t in seen for t in fw):
                        missing.append(f"self.{attr} ({c[1]}.forward)")
            if missing:
                out.append(f"entry point {spec} reaches {len(seen)} function(s) but not what {cls} constructs: "
                           + ", ".join(missing[:6]) + (" ..." if len(missing) > 6 else ""))
        return out


class Reach:
    """The captured region: functions, how each was reached (for call chains), unresolved calls, scope gaps."""

    def __init__(self, functions: set, parent: dict, unresolved: list[dict], gaps: list[str],
                 fanouts: list[dict] | None = None, cut: set[int] | None = None, edges: dict | None = None):
        self.functions = functions
        self.parent = parent
        self.unresolved = unresolved
        self.gaps = gaps
        self.fanouts = fanouts or []     # dispatch calls not followed: more implementations than the limit
        self.cut = cut or set()          # their call records (id), which the region pass does not follow either
        self.edges = edges or {}         # call record (id) -> the targets followed from it, over every receiver

    def __contains__(self, item) -> bool:
        return item in self.functions

    def targets(self, call: list) -> list[tuple[str, str]]:
        """What the walk followed from one call record (none where it was cut or never reached)."""
        return self.edges.get(id(call), [])

    def __len__(self) -> int:
        return len(self.functions)

    def chain(self, node: tuple[str, str]) -> list[dict]:
        """Entry point first: each step is the function and the line of the call that led on."""
        out = []
        cur = node
        guard = 0
        while cur is not None and guard < 64:
            p = self.parent.get(cur)
            if p is None:
                break
            (prev, line) = p
            out.append({"path": prev[0], "function": prev[1], "line": line})
            cur = prev
            guard += 1
        return list(reversed(out))


def _call_line(call: list) -> int:
    for x in call[1:]:
        if isinstance(x, int) and not isinstance(x, bool):
            return x
    return 0


def _describe(call: list) -> str:
    k = call[0]
    if k == "get" or k == "set":
        return _describe(call[1:])[:-2]
    if k == "name":
        return f"{call[1]}()"
    if k == "attr":
        return f"{call[1]}.{call[2]}()"
    if k == "self":
        return f"self.{call[1]}()"
    if k == "selfattr":
        return f"self.{call[1]}()" if call[2] == "__call__" else f"self.{call[1]}.{call[2]}()"
    if k == "reg":
        return f"{call[1]}[...]()"
    if k == "inst":
        return f"<{', '.join(call[1])}>.{call[2]}()"
    return f"{k}.{call[1]}()"
