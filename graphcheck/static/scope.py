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

Kinds: a finding whose value depends on a parameter or a callee's return (see ``inference``) is decided here by
joining the kinds the resolved callers pass and the resolved callees return.
"""
from __future__ import annotations

from collections import deque

from .inference import HOST, HOST_KINDS, NP, ON_DEVICE, PY, SEQ, TENSOR, join

_DISPATCH = ("forward_cuda", "forward_native")     # CustomOp: forward() picks one of these per platform
_BUILTINS = set(dir(__import__("builtins")))


class ScopeError(ValueError):
    pass


def _c3(seqs: list[list]) -> list | None:
    """C3 merge: the next head that is in no other sequence's tail, until all are used; None if none is."""
    seqs = [q for q in seqs if q]
    out = []
    while seqs:
        head = next((q[0] for q in seqs if not any(q[0] in r[1:] for r in seqs)), None)
        if head is None:
            return None
        out.append(head)
        seqs = [q[1:] if q[0] == head else q for q in seqs]
        seqs = [q for q in seqs if q]
    return out


class Program:
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

    # -- symbol resolution --------------------------------------------------------------------------
    def _import_target(self, path: str, alias: str) -> str:
        imp = self.s[path]["imports"].get(alias)
        if not imp:
            return ""
        tgt, level = imp["target"], imp["level"]
        if level:
            pkg = self.mod_of[path].split(".")
            if not self.s[path].get("is_package"):
                pkg = pkg[:-1]
            pkg = pkg[: len(pkg) - (level - 1)] if level > 1 else pkg
            tgt = ".".join([*pkg, tgt]) if tgt else ".".join(pkg)
        return tgt

    def resolve_dotted(self, full: str, depth: int = 0) -> tuple[str, str] | None:
        """'pkg.mod.Class.meth' -> (path, 'Class.meth') when the module is scanned."""
        if full in self._memo:
            return self._memo[full]
        if depth > 16:  # import cycles through re-exports
            return None
        self._memo[full] = None
        self._memo[full] = hit = self._resolve_dotted(full, depth)
        return hit

    def _resolve_dotted(self, full: str, depth: int) -> tuple[str, str] | None:
        parts = full.split(".")
        for i in range(len(parts), 0, -1):
            mod = ".".join(parts[:i])
            if mod in self.path_of:
                rest = ".".join(parts[i:])
                path = self.path_of[mod]
                if not rest:
                    return (path, "")
                head = parts[i]
                summ = self.s[path]
                if head not in summ["functions"] and head not in summ["classes"]:
                    tgt = self._import_target(path, head)   # re-exported names: follow the package's own import
                    if tgt and tgt != full:
                        return self.resolve_dotted(".".join([tgt, *parts[i + 1:]]), depth + 1)
                    if head in summ.get("registries", {}):
                        return (path, rest)
                    return None
                return (path, rest)
        return None

    def resolve_symbol(self, path: str, sym: str) -> tuple[str, str] | None:
        key = (path, sym)
        if key in self._syms:
            return self._syms[key]
        hit = self._syms[key] = self._resolve_symbol(path, sym)
        return hit

    def _resolve_symbol(self, path: str, sym: str) -> tuple[str, str] | None:
        head, _, rest = sym.partition(".")
        summ = self.s[path]
        if head in summ["functions"] or head in summ["classes"]:
            return (path, sym)
        tgt = self._import_target(path, head)
        if tgt:
            return self.resolve_dotted(f"{tgt}.{rest}" if rest else tgt)
        return None

    def _external(self, path: str, sym: str) -> bool:
        """Whether a symbol names something outside the scanned tree (an import that does not resolve here)."""
        head = sym.partition(".")[0]
        return bool(self.s[path]["imports"].get(head)) or head in _BUILTINS

    def _mro(self, cls_ref: tuple[str, str], depth: int = 0) -> list[tuple[str, str]]:
        if depth == 0:
            hit = self._mros.get(cls_ref)
            if hit is None:
                hit = self._mros[cls_ref] = self._mro_walk(cls_ref, 0)
            return hit
        return self._mro_walk(cls_ref, depth)

    def _mro_walk(self, cls_ref: tuple[str, str], depth: int) -> list[tuple[str, str]]:
        """Python's method resolution order (C3) over the bases in the tree (those outside it are left out); where
        what the tree shows does not linearise, depth-first, each class once."""
        path, cname = cls_ref
        summ = self.s.get(path)
        if summ is None or cname not in summ["classes"] or depth > 8:
            return []
        bases = []
        for b in summ["classes"][cname]["bases"]:
            ref = self.resolve_symbol(path, b)
            if ref and ref != cls_ref and ref not in bases:
                bases.append(ref)
        seqs = [[r for r in self._mro(b, depth + 1) if r != cls_ref] for b in bases]
        merged = _c3([*seqs, list(bases)])
        if merged is None:
            merged = []
            for q in seqs:
                merged += [r for r in q if r not in merged]
        return [cls_ref, *merged]

    def _subclasses(self, cls_ref: tuple[str, str]) -> list[tuple[str, str]]:
        """Every class of the tree with cls_ref among its bases, at any depth."""
        if self._subs is None:
            self._subs = {}
            for path, summ in self.s.items():
                for cname in summ["classes"]:
                    for base in self._mro((path, cname))[1:]:
                        self._subs.setdefault(base, []).append((path, cname))
        return self._subs.get(cls_ref, [])

    def _overrides(self, cls_ref: tuple[str, str], meth: str) -> list[tuple[str, str]]:
        """The definitions of `meth` in the subclasses of cls_ref (the class `self` may be at run time)."""
        out = []
        for path, cname in self._subclasses(cls_ref):
            q = f"{cname}.{meth}"
            if q in self.s[path]["functions"] and (path, q) not in out:
                out.append((path, q))
        return out

    def _accessor_names(self) -> set[str]:
        """The names of every property getter (`x`) and setter (`x@setter`) in the tree: a read or store of any
        other name is a plain attribute, answered without resolving its receiver."""
        if self._accessors is None:
            self._accessors = {q.rpartition(".")[2] for summ in self.s.values()
                               for q, f in summ["functions"].items() if f.get("prop")}
        return self._accessors

    def _getter(self, cls_ref: tuple[str, str], attr: str) -> tuple[str, str] | None:
        """The property getter `attr` of a class (its own or inherited), if it is one."""
        if attr not in self._accessor_names():
            return None
        for path, cname in self._mro(cls_ref):
            f = self.s[path]["functions"].get(f"{cname}.{attr}")
            if f is not None:
                return (path, f"{cname}.{attr}") if f.get("prop") == "get" else None
        return None

    def _has_external_base(self, cls_ref: tuple[str, str]) -> bool:
        for path, cname in self._mro(cls_ref):
            for b in self.s[path]["classes"][cname]["bases"]:
                if not self.resolve_symbol(path, b):
                    return True
        return False

    def _class_method(self, cls_ref: tuple[str, str], meth: str) -> list[tuple[str, str]]:
        """The def that runs for `meth` on an instance of the class (first in its MRO), and for a module call the
        platform's forward_* beside it. Memoised (the list is shared: callers must not change it)."""
        key = (cls_ref, meth)
        hit = self._meths.get(key)
        if hit is None:
            hit = self._meths[key] = self._class_method_walk(cls_ref, meth)
        return hit

    def _class_method_walk(self, cls_ref: tuple[str, str], meth: str) -> list[tuple[str, str]]:
        names = ["forward", "__call__"] if meth == "__call__" else [meth]
        out: list[tuple[str, str]] = []
        for path, cname in self._mro(cls_ref):
            funcs = self.s[path]["functions"]
            hit = next((f"{cname}.{n}" for n in names if f"{cname}.{n}" in funcs), None)
            if hit:
                out.append((path, hit))
                break
        if meth in ("__call__", "forward"):
            for d in _DISPATCH:          # CustomOp: the platform's forward_* runs whatever forward() says
                for path, cname in self._mro(cls_ref):
                    if f"{cname}.{d}" in self.s[path]["functions"]:
                        if (path, f"{cname}.{d}") not in out:
                            out.append((path, f"{cname}.{d}"))
                        break
        return out

    def instances(self, cls_ref: tuple[str, str] | None, path: str, entry: str, depth: int = 0) -> tuple[list, bool]:
        """Classes an attribute entry constructs, and whether any part of it lies outside the scanned tree.
        Memoised: entries refer to each other (a factory's returns, a method of what it returns), and unmemoised
        the chains of a large tree (torch's) multiply into hundreds of millions of calls. An entry met again
        while it is being resolved (a cycle) is empty there. The list is shared: callers must not change it."""
        key = (cls_ref, path, entry)
        hit = self._insts.get(key)
        if hit is not None:
            return hit
        if depth > 64:          # a bound on the recursion only: memoised, no real chain comes near it
            return [], False
        self._insts[key] = ([], False)
        hit = self._insts[key] = self._instances(cls_ref, path, entry, depth)
        return hit

    def _instances(self, cls_ref: tuple[str, str] | None, path: str, entry: str, depth: int) -> tuple[list, bool]:
        if entry.startswith("reg:"):
            out = []
            for sym in self.s[path].get("registries", {}).get(entry[4:], []):
                ref = self.resolve_symbol(path, sym)
                if ref and ref[1] in self.s[ref[0]]["classes"]:
                    out.append(ref)
            return out, False
        if entry.startswith("ann:"):     # typed by an annotation: that class or any subclass in the tree
            ref = self.resolve_symbol(path, entry[4:])
            if ref is None or ref[1] not in self.s[ref[0]]["classes"]:
                return [], False         # a type outside the tree says nothing about what runs: stays unresolved
            return [ref, *self._subclasses(ref)], False
        if entry.startswith("self:"):
            name = entry[5:]
            out, ext = [], False
            if cls_ref is None:
                return [], False
            for t in self._class_method(cls_ref, name):
                for e in self.s[t[0]]["functions"][t[1]].get("ret_ctors", []):
                    got, x = self.instances(self._cls_of(t), t[0], e, depth + 1)
                    out += [g for g in got if g not in out]
                    ext |= x
            for cpath, cname in self._mro(cls_ref):
                for sym in self.s[cpath]["classes"][cname].get("refs", {}).get(name, []):
                    got, x = self.instances(None, cpath, sym, depth + 1)
                    out += [g for g in got if g not in out]
                    ext |= x
            return out, ext
        if ">" in entry:
            # `call:F>m` / `clsof:F>m`: what method m of what F gave returns (instances it constructs, or the
            # classes it returns): `backend = get_backend(cfg); self.impl = backend.get_impl_cls()(...)`
            head, _, meth = entry.rpartition(">")
            holder = f"call:{head.partition(':')[2]}"
            got, ext = self.instances(cls_ref, path, holder, depth + 1)
            more, x = self.instances(cls_ref, path, f"clsof:{holder[5:]}", depth + 1)
            out: list = []
            for c in dict.fromkeys([*got, *more]):
                for t in self._class_method(c, meth):
                    if entry.startswith("clsof:"):
                        got2, x2 = self._returned_classes(t)
                    else:
                        got2, x2 = [], False
                        for e in self.s[t[0]]["functions"][t[1]].get("ret_ctors", []):
                            g, x3 = self.instances(self._cls_of(t), t[0], e, depth + 1)
                            got2 += [c2 for c2 in g if c2 not in got2]
                            x2 |= x3
                    out += [g for g in got2 if g not in out]
                    ext |= x2
            return out, ext or x
        if entry.startswith("clsof:"):     # an instance of a class that a factory function returns
            # a factory that is no def of the tree (`functools.partial(C, n)(...)`, `torch.compile(...)(fn)`,
            # `lru_cache()(f)`, a lambda) says nothing about what it returns, nor that it is outside the tree: the
            # attribute stays unresolved, as it was before factories were followed
            ref = self.resolve_symbol(path, entry[6:])
            if ref is None or ref[1] not in self.s[ref[0]]["functions"]:
                return [], False
            return self._returned_classes(ref)
        sym = entry[5:] if entry.startswith("call:") else entry
        ref = self.resolve_symbol(path, sym)
        if ref is None:
            return [], self._external(path, sym)
        rpath, q = ref
        summ = self.s[rpath]
        if q in summ["classes"]:
            return [ref], False
        if q in summ["functions"]:          # a factory or helper: what it returns
            out, ext = [], False
            for e in summ["functions"][q].get("ret_ctors", []):
                got, x = self.instances(self._cls_of(ref), rpath, e, depth + 1)
                out += [g for g in got if g not in out]
                ext |= x
            return out, ext
        return [], False

    def _returned_classes(self, ref: tuple[str, str]) -> tuple[list, bool]:
        """The classes of the tree a def returns (`return FlashImpl`, `return A if fast else B`), and whether one
        it returns is outside the tree (`return nn.Linear`)."""
        out, ext = [], False
        for sym in self.s[ref[0]]["functions"][ref[1]].get("ret_classes", []):
            c = self.resolve_symbol(ref[0], sym)
            if c and c[1] in self.s[c[0]]["classes"]:
                if c not in out:
                    out.append(c)
            elif c is None and self._external(ref[0], sym):
                ext = True
        return out, ext

    def _cls_of(self, ref: tuple[str, str]) -> tuple[str, str] | None:
        cls = self.s[ref[0]]["functions"][ref[1]].get("cls")
        return (ref[0], cls) if cls else None

    def _attr_instances(self, cls_ref: tuple[str, str], attr: str) -> tuple[list, bool, bool]:
        """Classes held by self.<attr>; whether some of it is outside the tree; whether the attribute is known.
        Memoised: every attribute read that may be a property asks it, hop by hop (`self.model.config.x`). The list
        is shared: callers must not change it."""
        key = (cls_ref, attr)
        hit = self._attr_insts.get(key)
        if hit is None:
            hit = self._attr_insts[key] = self._attr_instances_uncached(cls_ref, attr)
        return hit

    def _attr_instances_uncached(self, cls_ref: tuple[str, str], attr: str) -> tuple[list, bool, bool]:
        out: list[tuple[str, str]] = []
        ext = known = False
        typed: list[tuple] = []
        for path, cname in self._mro(cls_ref):
            info = self.s[path]["classes"][cname]
            for e in info["attrs"].get(attr, []):
                known = True
                if e.startswith("ann:"):
                    typed.append((path, cname, e))
                    continue
                got, x = self.instances((path, cname), path, e)
                out += [g for g in got if g not in out]
                ext |= x
            for sym in info.get("refs", {}).get(attr, []):
                known = True
                ext |= self.resolve_symbol(path, sym) is None
        concrete = list(out)
        for path, cname, e in typed:
            # an annotation says "this class or any subclass"; a constructor the class also assigns (`self.model =
            # Llama(cfg)` beside `model: BaseModel`) names the one that runs: the annotation adds nothing then
            ref = self.resolve_symbol(path, e[4:])
            if ref is not None and any(ref in self._mro(c) for c in concrete):
                continue
            got, x = self.instances((path, cname), path, e)
            out += [g for g in got if g not in out]
            ext |= x
        getter = self._getter(cls_ref, attr)
        if getter is not None:        # a property: what its getter constructs, else a value from outside the tree
            known = True
            got, x = self.instances(cls_ref, getter[0], f"self:{attr}")
            out += [g for g in got if g not in out]
            ext |= x or not got
        return out, ext, known

    def _hop_instances(self, cls_ref: tuple[str, str], hops: tuple[str, ...]) -> list:
        """Classes held by `self.a.b` (hops a, b), memoised by prefix: the reads and calls of one class share them."""
        if not hops:
            return [cls_ref]
        key = (cls_ref, hops)
        hit = self._hops.get(key)
        if hit is None:
            insts = self._hop_instances(cls_ref, hops[:-1])
            a = hops[-1]
            hit = self._hops[key] = list(dict.fromkeys(c for i in insts for c in self._attr_instances(i, a)[0]))
        return hit

    # -- calls --------------------------------------------------------------------------------------
    def callees(self, path: str, qname: str) -> list[tuple[tuple[str, str], list]]:
        """Resolved callees of one function, with the call record."""
        key = (path, qname)
        if key not in self._callees:
            self._callees[key] = self._resolve_callees(path, qname)
        return self._callees[key]

    def resolve_call(self, path: str, qname: str, call: list) -> tuple[list[tuple[str, str]], str]:
        """Targets of one call record and its status: 'resolved', 'external' (outside the tree) or 'unresolved'.
        `self` is whatever class the def is in, or any subclass (the call graph of every receiver at once)."""
        pairs, status = self.dispatch(path, qname, call, None)
        # the targets, memoised beside dispatch's own entry (keyed by the same call record, which lives as long as
        # the program): the cross-file kinds ask for the same sites' targets again and again
        hit = self._targets.get(id(call))
        if hit is None or hit[0] is not pairs:
            hit = self._targets[id(call)] = (pairs, list(dict.fromkeys(t for t, _ in pairs)))
        return hit[1], status

    def dispatch(self, path: str, qname: str, call: list, recv: tuple[str, str] | None) -> tuple[list, str]:
        """One call record's targets, each with the class its `self` is then known to be, or a subclass of it
        (None: the target's own class), when `self` in qname is `recv` or a subclass of it (None: qname's own
        class). A `self.m()` of a base class reached from a subclass runs that subclass's m or an override below
        it, not a sibling's."""
        own = self._cls_of((path, qname))
        if recv == own:
            recv = None
        key = (id(call), recv)       # call records live as long as the program: their identity names the site
        hit = self._calls.get(key)
        if hit is None:
            pairs, status = self._resolve_call(path, qname, call, recv or own, own)
            seen: dict = {}
            for t, r in pairs:       # one receiver per target: the first found is the widest (R before R's subclasses)
                seen.setdefault(t, r)
            pairs = list(seen.items())
            if pairs and call[0] not in ("ref", "get", "set"):
                # a def whose signature cannot take these arguments is not what runs here: `self.method.apply(
                # self, x, bias=b)` where `method` is annotated with a base class whose subclasses include
                # unrelated `apply(self, layer, dispatch_output)`s (calling one of those would raise TypeError)
                kept = [pr for pr in pairs if self._binds(pr[0], call)]
                if len(kept) != len(pairs):
                    pairs, status = kept, status if kept else "unresolved"
            hit = self._calls[key] = (pairs, status)
        return hit

    def _binds(self, t: tuple[str, str], call: list) -> bool:
        """Whether the call's arguments can bind to the signature of def t (as Python would, without running it).
        Unknown (True) where a decorator may change the signature or the call splats what it passes."""
        fn = self.s[t[0]]["functions"][t[1]]
        sig = fn.get("sig")
        return sig is None or any(_fits(sig, call, sh) for sh in _implicit(fn, t[1], call))

    def _resolve_call(self, path: str, qname: str, call: list, cls_ref: tuple[str, str] | None,  # noqa: C901
                      own: tuple[str, str] | None) -> tuple[list[tuple[tuple[str, str], tuple | None]], str]:
        """(target, receiver) pairs of one call in def qname of class `own`, whose `self` is cls_ref (own or a
        subclass of it) or a subclass of cls_ref."""
        summ = self.s[path]
        kind = call[0]
        if kind == "get" or kind == "set":
            # an attribute read or store: the getter or setter of a property of that name, resolved as a call of it
            # would be (the class's MRO, its subclasses' overrides, a submodule's class); else a plain attribute
            if self._call_key(call) not in self._accessor_names():
                return [], "external"
            t = [x for x in self._resolve_call(path, qname, call[1:], cls_ref, own)[0]
                 if self.s[x[0][0]]["functions"][x[0][1]].get("prop") == kind]
            return t, "resolved" if t else "external"
        if kind == "ref":
            if call[1] == "self" and cls_ref is not None and not self._class_method(cls_ref, call[2]):
                # `helper(self.norm)` hands over a submodule the callee may call (its forward), but it was
                # constructed elsewhere: passing it never runs its __init__
                insts, _, _ = self._attr_instances(cls_ref, call[2])
                t = [(m, c) for c in insts for m in self._class_method(c, "__call__")]
                return t, "resolved" if t else "external"
            t, st = self._resolve_call(path, qname, call[1:], cls_ref, own)
            return t, st if t else "external"
        if kind == "name":
            # a def nested in this function or in an enclosing one (a closure calling its sibling helper: its
            # `self` is the enclosing one's); a class body is not an enclosing scope: a method does not see its
            # class's names
            scope_q = qname
            while scope_q:
                if scope_q in summ["functions"]:
                    nested = f"{scope_q}.{call[1]}"
                    if nested in summ["functions"]:
                        return [((path, nested), cls_ref)], "resolved"
                scope_q = scope_q.rpartition(".")[0]
            ref = self.resolve_symbol(path, call[1])
            if ref:
                t = self._callable(ref)
                return t, "resolved" if t else "external"
            if self._external(path, call[1]) or call[1] in summ["classes"]:
                return [], "external"
            return [], "unresolved"
        if kind == "attr":
            if call[1] == "self" and cls_ref is not None and "." in call[2]:
                # `self.mlp.experts.dispatch(s)`: a method of a submodule of a submodule, hop by hop; a hop that
                # holds no class of the tree (a config, a tensor) leaves it outside, as before
                *hops, meth = call[2].split(".")
                insts = self._hop_instances(cls_ref, tuple(hops))
                t = [(m, c) for c in insts for m in self._class_method(c, meth)]
                if not t:    # `self.block.experts(x)`: the last hop is a submodule too, and calling it runs forward
                    t = [(m, i) for c in insts for i in self._attr_instances(c, meth)[0]
                         for m in self._class_method(i, "__call__")]
                return t, "resolved" if t else "external"
            ref = self.resolve_symbol(path, f"{call[1]}.{call[2]}")
            if ref:
                t = self._callable(ref)
                return t, "resolved" if t else "external"
            return [], "external"        # a module outside the tree, or a method on a value
        if kind == "self":
            if cls_ref is None:
                return [], "external"
            t = [(m, cls_ref) for m in self._class_method(cls_ref, call[1])]
            if t:
                # `self.gemm()` in a base class runs whatever the instance's class defines: the method found from
                # the receiver's class, or an override in a subclass of it (a template method whose base raises
                # NotImplementedError), never a sibling's
                return t + [(o, self._cls_of(o)) for o in self._overrides(cls_ref, call[1])], "resolved"
            insts, ext, known = self._attr_instances(cls_ref, call[1])
            for c in insts:      # `self.ffn(x)` runs a submodule's forward; `self.model_cls(cfg)` its __init__
                t += [(m, c) for m in self._class_method(c, "__call__") or self._class_method(c, "__init__")]
            if not t and not known:
                # a method only the subclasses define (a base without the stub): before "external" from an
                # nn.Module base, which would pass the subclasses' code over in silence
                t = [(o, self._cls_of(o)) for o in self._overrides(cls_ref, call[1])]
            if t:
                return t, "resolved"
            if ext or (not known and self._has_external_base(cls_ref)):
                return [], "external"
            return [], "unresolved"
        if kind == "super":
            if own is None:
                return [], "external"
            # the next class after this def's in the MRO of the class `self` is: the receiver or any subclass of
            # it (in D(B, C), B's super().m() runs C.m)
            t = []
            for sub in [cls_ref, *self._subclasses(cls_ref)]:
                mro = self._mro(sub)
                for b in mro[mro.index(own) + 1:] if own in mro else ():
                    hit = self._class_method(b, call[1])
                    if hit:
                        t += [(m, sub) for m in hit]
                        break
            return t, "resolved" if t else "external"
        if kind == "selfattr":
            if cls_ref is None:
                return [], "external"
            insts, ext, known = self._attr_instances(cls_ref, call[1])
            t = [(m, c) for c in insts for m in self._class_method(c, call[2])]
            if not t and call[2] != "__call__":   # `self.block.experts(x)`: a submodule's submodule, called
                t = [(m, i) for c in insts for i in self._attr_instances(c, call[2])[0]
                     for m in self._class_method(i, "__call__")]
            if t:
                return t, "resolved"
            if any(call[1] in self.s[p]["classes"][c].get("tensors", ()) for p, c in self._mro(cls_ref)):
                return [], "external"     # a method of a tensor attribute (self.inv_freq.float())
            if insts and call[2] != "__call__":
                return [], "external"     # a container method (.append) or an inherited nn.Module method
            return [], "external" if ext else "unresolved"
        if kind == "inst":
            t, ext = [], False
            for e in call[1]:
                insts, x = self.instances(cls_ref, path, e)
                ext |= x
                t += [(m, c) for c in insts for m in self._class_method(c, call[2])]
            return t, "resolved" if t else "external"
        if kind == "reg":
            t = []
            for sym in summ.get("registries", {}).get(call[1], []):
                ref = self.resolve_symbol(path, sym)
                if ref:
                    meth = "__init__" if call[2] == "__call__" else call[2]
                    if meth == "__init__" and ref[1] in self.s[ref[0]]["functions"]:
                        t += self._callable(ref)
                    elif ref[1] in self.s[ref[0]]["classes"]:
                        t += [(m, ref) for m in self._class_method(ref, meth)]
            return t, "resolved" if t else "unresolved"
        return [], "external"

    def _resolve_callees(self, path: str, qname: str) -> list[tuple[tuple[str, str], list]]:
        out = []
        for call in self.s[path]["functions"][qname]["calls"]:
            targets, _ = self.resolve_call(path, qname, call)
            out.extend((t, call) for t in targets)
        return out

    def _callable(self, ref: tuple[str, str] | None) -> list[tuple[tuple[str, str], tuple | None]]:
        """(target, receiver) of calling what a symbol names: a def itself, or a class's __init__ (on that class)."""
        if not ref:
            return []
        path, q = ref
        summ = self.s[path]
        if q in summ["functions"]:
            return [(ref, None)]
        if q in summ["classes"]:  # constructing a class runs its __init__
            return [(m, ref) for m in self._class_method(ref, "__init__")]
        return []

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

    # -- kinds across calls -------------------------------------------------------------------------
    def _call_key(self, call: list) -> str:
        k = call[0]
        if k == "get" or k == "set":
            return self._call_key(call[1:])
        if k == "name":
            return call[1]
        if k == "attr":
            return call[2].rsplit(".", 1)[-1]
        if k in ("self", "super"):
            return call[1]
        return call[2]          # selfattr, inst, reg: the method called

    def _by_key(self) -> dict[str, list]:
        """Call sites that pass arguments, keyed by the name they call, without resolving them: a parameter's
        callers are then found by resolving only the sites that could reach it."""
        if self._callers is None:
            idx: dict[str, list] = {}
            add = idx.setdefault
            for path, summ in self.s.items():
                funcs = summ["functions"]
                for q, fn in funcs.items():
                    for call in fn["calls"]:
                        k = call[0]
                        if k == "ref" or type(call[-1]) is not dict:
                            continue
                        site = (path, q, call)
                        # _call_key, inline: this loop visits every call record of the tree (~300,000 in torch's)
                        key = call[1] if k == "name" or k == "self" or k == "super" else \
                            call[2].rsplit(".", 1)[-1] if k == "attr" else \
                            self._call_key(call) if k == "get" or k == "set" else call[2]
                        add(key, []).append(site)
                        if k == "self" and f"{fn.get('cls')}.{call[1]}" not in funcs or \
                                k == "selfattr" and call[2] != "__call__" or \
                                k == "attr" and call[1] == "self" and "." in call[2]:
                            add("__call__", []).append(site)   # likely a submodule: runs forward
            self._callers = idx
        return self._callers

    def callers(self, path: str, q: str, within: set | None) -> list[tuple[str, str, list]]:  # noqa: C901
        """Resolved call sites (with argument kinds) of one function, restricted to the scope when there is one.
        The sites under one name are resolved once, into a reverse map, whatever number of callees asks."""
        name = q.rsplit(".", 1)[-1]
        keys = [name]
        if name in ("forward", "__call__", "forward_cuda", "forward_native"):
            keys += ["__call__", "forward"]
        if name == "__init__" and "." in q:
            keys.append(q.rsplit(".", 2)[-2])
        out, seen = [], set()
        for key in dict.fromkeys(keys):
            rev = self._rev.get(key)
            if rev is None:
                rev = self._rev[key] = {}
                for site in self._by_key().get(key, ()):
                    cpath, cq, call = site
                    for t in self.resolve_call(cpath, cq, call)[0]:
                        rev.setdefault(t, []).append(site)
            for site in rev.get((path, q), ()):
                if (within is None or (site[0], site[1]) in within) and id(site[2]) not in seen:
                    seen.add(id(site[2]))
                    out.append(site)
        return out

    def callees_of(self, path: str, q: str, call: list) -> list[tuple[str, str]]:
        return self.resolve_call(path, q, call)[0]

    def dep_kind(self, path: str, q: str, dep: str, within: set | None, depth: int = 0):
        """The kind a symbolic dependency resolves to: 'p:x' from the resolved callers' arguments, 'r:i' from the
        resolved callees' returns, 'r:i#k' / 'p:x#k' from element k of those (see ``_element_kind``). Unknown (None)
        when nothing resolves or the chain is too long."""
        key = (path, q, dep)
        if key in self._kinds:
            return self._kinds[key]
        if depth > 12:
            return None
        self._kinds[key] = None          # cycles resolve to unknown
        fn = self.s[path]["functions"].get(q)
        k = None
        base, sep, idx = _split_element(dep)
        if fn is None:
            pass
        elif sep:
            k = self._element_kind(path, q, fn, base, int(idx), sep == "@", within, depth)
        elif dep.startswith("p:"):
            name = dep[2:]
            params = fn.get("params", [])
            pos = params.index(name) if name in params else -1
            sites = self.callers(path, q, within)
            if not sites and ((path, q) in self.roots or self.open_scope):
                # an entry point's un-annotated inputs are the step's tensors: likely on the device; one that
                # defaults to a Python constant (`save_kv_cache=True`) is a flag or a setting
                k = PY if name in fn.get("pydef", ()) else TENSOR
            for cpath, cq, call in sites:
                a = self._argument(call, fn, q, pos, name)
                if a is not _MISSING:
                    k = join(k, self._decode(cpath, cq, a, within, depth + 1))
        elif dep.startswith("a:"):       # a:Cls:attr, a field of a parameter typed Cls
            cls, _, attr = dep[2:].rpartition(":")
            ref = self.resolve_symbol(path, cls)
            if ref and ref[1] in self.s[ref[0]]["classes"]:
                for cpath, cname in self._mro(ref):
                    k = self.s[cpath]["classes"][cname].get("fields", {}).get(attr)
                    if k is not None:
                        break
        elif dep.startswith(("r:", "R:", "g:")):
            i = int(dep[2:])
            calls = fn["calls"]
            if i < len(calls):
                targets = [t for t in self.callees_of(path, q, calls[i]) if not t[1].endswith(".__init__")]
                for t in targets:
                    r = self.s[t[0]]["functions"][t[1]].get("ret")
                    k = join(k, self._decode(t[0], t[1], r, within, depth + 1))
                if not targets and dep[0] == "R" and self._opaque_module(path, q, calls[i]):
                    k = TENSOR       # a submodule outside the tree (nn.Linear): calling it returns a tensor
        self._kinds[key] = k
        return k

    def _opaque_module(self, path: str, q: str, call: list) -> bool:
        """Whether a module call that resolves to no def of the tree runs a module outside it (and returns a
        tensor). Not a call of what an unknown factory returned (`run = lru_cache()(count); run(cfg)`,
        `step = torch.enable_grad()(closure)`): nothing says that is a module at all."""
        if call[0] != "inst" or not all(e.startswith("clsof:") for e in call[1]):
            return True
        cls_ref = self._cls_of((path, q))
        return any(self.instances(cls_ref, path, e)[1] for e in call[1])

    def _element_kind(self, path: str, q: str, fn: dict, base: str, i: int, strict: bool, within, depth: int):
        """Element i of a parameter or a call's return (`x, y = f()`, `f()[1]`, `a, b = param`): of a callee, what
        its tuple returns hold at i (`ret_elts`), else (not strict) its whole return; of a parameter, element i of
        what each resolved caller passes (an entry point's inputs are tensors)."""
        k = None
        if base.startswith("p:"):
            name = base[2:]
            params = fn.get("params", [])
            pos = params.index(name) if name in params else -1
            sites = self.callers(path, q, within)
            if not sites and ((path, q) in self.roots or self.open_scope) and not strict:
                return TENSOR
            for cpath, cq, call in sites:
                a = self._argument(call, fn, q, pos, name)
                if a is not _MISSING:
                    k = join(k, self._element(cpath, cq, a, i, strict, within, depth + 1))
            return k
        calls = fn["calls"]
        n = int(base[2:])
        if n >= len(calls):
            return None
        targets = [t for t in self.callees_of(path, q, calls[n]) if not t[1].endswith(".__init__")]
        for t in targets:
            callee = self.s[t[0]]["functions"][t[1]]
            elts = callee.get("ret_elts")
            if elts is not None:
                if -len(elts) <= i < len(elts):
                    k = join(k, self._decode(t[0], t[1], elts[i], within, depth + 1))
            elif base[0] == "g" and callee.get("ret") == PY:
                continue     # an element of the list or dict a getter returns: unknown, as the attribute read was
            else:
                k = join(k, self._element(t[0], t[1], callee.get("ret"), i, strict, within, depth + 1))
        if not targets and base[0] == "R" and not strict and self._opaque_module(path, q, calls[n]):
            k = TENSOR       # a submodule outside the tree: a tensor, or a tuple of them
        return k

    def _element(self, path: str, q: str, enc, i: int, strict: bool, within, depth: int):
        """Element i of an encoded kind: a dependency's element, or (not strict) the concrete kind itself."""
        if not isinstance(enc, list):
            return None if strict else TENSOR if enc == SEQ else enc
        k = None
        for d in enc:
            if d[:2] in ("p:", "r:", "R:", "g:") and not _split_element(d)[1]:
                k = join(k, self.dep_kind(path, q, f"{d}{'@' if strict else '#'}{i}", within, depth))
            elif not strict:
                k = join(k, self.dep_kind(path, q, d, within, depth))
        return k

    @staticmethod
    def _argument(call: list, fn: dict, q: str, pos: int, name: str):
        """The encoded argument a call site passes for parameter `name` (at `pos`) of def q, or _MISSING. Only the
        first `npos` parameters take positional arguments: a keyword-only one (after `*` or `*args`) is passed by
        name or not at all."""
        args, kw = call[-2], call[-1]
        if name in kw:
            return kw[name]
        shifts = _implicit(fn, q, call)
        sig = fn.get("sig")
        if len(shifts) > 1 and sig is not None:
            shifts = [sh for sh in shifts if _fits(sig, call, sh)] or shifts
        # one answer where both still bind: the signature cannot tell `obj.m(x)` from `Cls.m(obj, x)`, the call kind
        # can: through a name other than self it is a class's (a local instance is an `inst` call, and a module-level
        # one resolves to nothing), any other call is an instance's
        shift = shifts[0] if len(shifts) == 1 else 0 if _plain(call)[0] == "attr" else 1
        if shift <= pos < fn.get("npos", len(fn.get("params", []))) and pos - shift < len(args):
            return args[pos - shift]
        return _MISSING

    def _decode(self, path: str, q: str, enc, within, depth: int):
        if isinstance(enc, list):
            k = None
            for d in enc:
                k = join(k, self.dep_kind(path, q, d, within, depth))
            return k
        return enc

    def holds(self, path: str, q: str, when: dict, within: set | None) -> bool:
        """Whether a conditional finding holds once its dependencies are resolved."""
        if not all(self.holds(path, q, c, within) for c in when.get("and", ())):
            return False
        k = self._decode(path, q, when["deps"], within, 0)
        if when.get("mode") == "host":      # a copy to the device from pageable host memory
            return k == HOST
        if when.get("mode") == "data":      # host data a constructor copies: a list, a NumPy array
            return k in (PY, NP)
        if when.get("mode") == "maybe":
            return k not in HOST_KINDS
        if when.get("mode") == "not":       # `x.cuda()` of what may be a property: a copy unless it is on the device
            return k not in ON_DEVICE
        return k in ON_DEVICE or k == TENSOR


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


_MISSING = object()
_BOUND = ("self", "super", "selfattr")     # calls on self, super() or a submodule: bound to an instance


def _unbound_init(call: list) -> bool:
    """`Base.__init__(self, n)`, `mod.Base.__init__(self, n)`: the initialiser named and called through the class,
    which passes the object as its first argument (a constructor call `Base(n)` or `super().__init__(n)` does not)."""
    return call[0] == "attr" and call[1] != "self" and call[2].rpartition(".")[2] == "__init__"


def _plain(call: list) -> list:
    """A property's read or store (`["get", *call]`, `["set", *call]`) as the call of its getter or setter."""
    return call[1:] if call[0] in ("get", "set") else call


def _implicit(fn: dict, q: str, call: list) -> tuple[int, ...]:
    """How many leading parameters of def q (its summary fn) the call fills implicitly: `self` of a bound method,
    `cls` of a classmethod, the new object of a constructor; `Cls.m(obj, x)` passes it itself. (0, 1) where the
    call does not tell: the decorators and the call kind decide, never the parameter's name (`def m(this, x)`, a
    staticmethod `def f(cls, x)`), except where a decorator hides how the def binds and the name is all there is."""
    sig = fn.get("sig")
    how = sig[-1] if sig is not None else {"self": "inst", "cls": "class"}.get(next(iter(fn.get("params", [])), ""), "")
    call = _plain(call)
    if how in ("", "static") or _unbound_init(call):
        return (0,)
    if how == "class" or q.endswith(".__init__") or call[0] in _BOUND or call[0] == "attr" and call[1] == "self":
        return (1,)
    return (0, 1)


def _fits(sig: list, call: list, shift: int) -> bool:
    """Whether the call's arguments bind to the signature record once `shift` leading parameters are filled."""
    pos, ndef, var, varkw, kwonly, kwreq, _ = sig
    args, kw = (call[-2], call[-1]) if isinstance(call[-1], dict) else ([], {})
    star, dstar = "*" in kw, "**" in kw
    p = pos[shift:]
    nreq = max(len(p) - ndef, 0)
    if not varkw and any(k not in p and k not in kwonly for k in kw if k not in ("*", "**")):
        return False
    if not star and not var and len(args) > len(p):
        return False
    return star or dstar or not (any(i >= len(args) and n not in kw for i, n in enumerate(p[:nreq]))
                                 or any(n not in kw for n in kwreq))


def _split_element(dep: str) -> tuple[str, str, str]:
    """'r:3#1' -> ('r:3', '#', '1'); 'r:3@1' -> ('r:3', '@', '1'); a dependency that is no element -> (dep, '', '')."""
    for sep in ("#", "@"):
        base, s, idx = dep.rpartition(sep)
        if s and idx.lstrip("-").isdigit():
            return base, sep, idx
    return dep, "", ""


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
