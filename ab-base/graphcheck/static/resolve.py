"""Static call resolution for the cross-file scope: dotted names and imports to their definitions (through
package-dir mappings and re-exports), classes' method resolution order and subclasses, the classes an attribute or
a factory's return may hold, and each call record of a file summary to the functions it may run (``resolve_call``,
``dispatch``). ``Resolver`` is a part of ``scope.Program``: it reads the summaries and fills the caches that
``Program.__init__`` sets up."""
from __future__ import annotations

_DISPATCH = ("forward_cuda", "forward_native")     # CustomOp: forward() picks one of these per platform
_BUILTINS = set(dir(__import__("builtins")))


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


class Resolver:
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

    def _head_names(self, path: str) -> set[str]:
        """Every name a `name` or `attr` call (other than through `self`) of this file can resolve through: its
        imports, its defs and classes, and the last part of each def's name (a nested def a closure calls). A call
        whose head is none of them resolves to nothing."""
        summ = self.s[path]
        funcs = summ["functions"]
        return {*summ["imports"], *funcs, *summ["classes"], *(q.rpartition(".")[2] for q in funcs)}

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
