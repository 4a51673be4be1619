"""The cross-file half of the device lattice: a finding whose value depends on a parameter or a callee's return
(see ``inference``) holds where the kinds the resolved callers pass, or the resolved callees return, make it hold
(``holds``, ``dep_kind``, ``callers``). ``Conditions`` is a part of ``scope.Program``: it resolves calls through
the ``Resolver`` beside it and reads the caches that ``Program.__init__`` sets up."""
from __future__ import annotations

from .inference import HOST, HOST_KINDS, NP, ON_DEVICE, PY, SEQ, TENSOR, TENSORS, join
from .resolve import _fits, _implicit, _plain

_MISSING = object()


class Conditions:
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
                # a call through a name its file neither defines, imports nor nests a def under (`d.get(k)`,
                # `len(x)`) resolves to nothing (`_resolve_call`): a quarter of torch's sites, left out unresolved
                known = self._head_names(path)
                for q, fn in funcs.items():
                    # a kernel's calls (engine: _compiled_summary) are callers too, passing nothing known
                    for call in (fn["calls"] + fn["dsl_calls"]) if "dsl_calls" in fn else fn["calls"]:
                        k = call[0]
                        if k == "ref" or type(call[-1]) is not dict:
                            continue
                        if (k == "name" or k == "attr" and call[1] != "self") and call[1] not in known:
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
                if not targets and dep[0] == "g":
                    k = self._inherited_field(path, q, calls[i])
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
        if not targets and base[0] == "g":
            k = self._inherited_field(path, q, calls[n])
            if k not in TENSORS:
                k = None     # an element of a list or a dict the base class holds: unknown, as the read was
        return k

    def _inherited_field(self, path: str, q: str, call: list):
        """`self.X` that the method's own class never assigns and no getter returns: what a base class assigns to
        it (`Base.__init__: self.count = torch.zeros(..., device=d)`, read in a subclass as `range(self.count[0])`),
        in another file or this one. The classes' own kinds only: unknown where no base in the tree assigns it."""
        if call[0] != "get" or call[1] != "self":
            return None
        own = self._cls_of((path, q))
        if own is None:
            return None
        for cpath, cname in self._mro(own):
            k = self.s[cpath]["classes"][cname].get("fields", {}).get(call[2])
            if k is not None:
                return k
        return None

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


def _split_element(dep: str) -> tuple[str, str, str]:
    """'r:3#1' -> ('r:3', '#', '1'); 'r:3@1' -> ('r:3', '@', '1'); a dependency that is no element -> (dep, '', '')."""
    for sep in ("#", "@"):
        base, s, idx = dep.rpartition(sep)
        if s and idx.lstrip("-").isdigit():
            return base, sep, idx
    return dep, "", ""
