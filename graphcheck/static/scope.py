"""The captured region: functions reachable from the entry points through statically resolved calls.

Resolution is deliberately modest: same-module names, imports within the scanned tree, ``self.method()``,
``self.attr(...)`` where ``attr`` was assigned a class instance (also inside ``nn.ModuleList``), locals bound
to such attributes or instances, and ``super().method()``. ``module(...)`` means ``forward``.
"""
from __future__ import annotations

from collections import deque


class ScopeError(ValueError):
    pass


class Program:
    def __init__(self, summaries: dict[str, dict], modules: dict[str, str]):
        self.s = summaries            # path -> summary
        self.mod_of = modules         # path -> module name
        self.path_of = {m: p for p, m in modules.items()}
        self._memo: dict[str, tuple[str, str] | None] = {}
        self._callees: dict[tuple[str, str], list] = {}

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
                # re-exported names: follow the package's own import of it
                head = parts[i]
                if head not in self.s[path]["functions"] and head not in self.s[path]["classes"]:
                    tgt = self._import_target(path, head)
                    if tgt and tgt != full:
                        return self.resolve_dotted(".".join([tgt, *parts[i + 1:]]), depth + 1)
                return (path, rest)
        return None

    def resolve_symbol(self, path: str, sym: str) -> tuple[str, str] | None:
        head, _, rest = sym.partition(".")
        summ = self.s[path]
        if head in summ["functions"] or head in summ["classes"]:
            return (path, sym)
        tgt = self._import_target(path, head)
        if tgt:
            return self.resolve_dotted(f"{tgt}.{rest}" if rest else tgt)
        return None

    def _class_method(self, cls_ref: tuple[str, str], meth: str, depth: int = 0) -> list[tuple[str, str]]:
        path, cname = cls_ref
        summ = self.s.get(path)
        if summ is None or cname not in summ["classes"] or depth > 8:
            return []
        names = ["forward", "__call__"] if meth == "__call__" else [meth]
        for n in names:
            q = f"{cname}.{n}"
            if q in summ["functions"]:
                return [(path, q)]
        for b in summ["classes"][cname]["bases"]:
            ref = self.resolve_symbol(path, b)
            if ref:
                hit = self._class_method(ref, meth, depth + 1)
                if hit:
                    return hit
        return []

    def _attr_classes(self, cls_ref: tuple[str, str], attr: str, depth: int = 0) -> list[tuple[str, str]]:
        path, cname = cls_ref
        summ = self.s.get(path)
        if summ is None or cname not in summ["classes"] or depth > 8:
            return []
        info = summ["classes"][cname]
        out = [r for sym in info["attrs"].get(attr, []) if (r := self.resolve_symbol(path, sym))]
        if not out:
            for b in info["bases"]:
                ref = self.resolve_symbol(path, b)
                if ref:
                    out += self._attr_classes(ref, attr, depth + 1)
        return out

    def callees(self, path: str, qname: str) -> list[tuple[tuple[str, str], list]]:
        """Resolved callees of one function, with the call record (for call-site findings)."""
        key = (path, qname)
        if key not in self._callees:
            self._callees[key] = self._resolve_callees(path, qname)
        return self._callees[key]

    def _resolve_callees(self, path: str, qname: str) -> list[tuple[tuple[str, str], list]]:
        summ = self.s[path]
        fn = summ["functions"][qname]
        cls = fn.get("cls")
        cls_ref = (path, cls) if cls else None
        out = []
        for call in fn["calls"]:
            kind = call[0]
            targets: list[tuple[str, str]] = []
            if kind == "name":
                # a nested function of this one shadows module-level names
                nested = f"{qname}.{call[1]}"
                if nested in summ["functions"]:
                    targets = [(path, nested)]
                else:
                    ref = self.resolve_symbol(path, call[1])
                    targets = self._callable(ref)
            elif kind == "attr":
                ref = self.resolve_symbol(path, f"{call[1]}.{call[2]}")
                targets = self._callable(ref)
            elif kind == "self" and cls_ref:
                targets = self._class_method(cls_ref, call[1])
                if not targets:   # `self.ffn(x)`: calling a submodule attribute runs its forward
                    for cref in self._attr_classes(cls_ref, call[1]):
                        targets += self._class_method(cref, "__call__")
            elif kind == "super" and cls_ref:
                for b in summ["classes"].get(cls, {}).get("bases", []):
                    ref = self.resolve_symbol(path, b)
                    if ref:
                        targets += self._class_method(ref, call[1])
            elif kind == "selfattr" and cls_ref:
                for cref in self._attr_classes(cls_ref, call[1]):
                    targets += self._class_method(cref, call[2])
            elif kind == "class":
                ref = self.resolve_symbol(path, call[1])
                if ref:
                    targets = self._class_method(ref, call[2])
            out.extend((t, call) for t in targets)
        return out

    def _callable(self, ref: tuple[str, str] | None) -> list[tuple[str, str]]:
        if not ref:
            return []
        path, q = ref
        summ = self.s[path]
        if q in summ["functions"]:
            return [ref]
        if q in summ["classes"]:  # constructing a class runs its __init__
            return self._class_method(ref, "__init__")
        return []

    # -- reachability -------------------------------------------------------------------------------
    def entry(self, spec: str) -> tuple[str, str]:
        mod, sep, qual = spec.partition(":")
        if not sep or not mod or not qual:
            raise ScopeError(f"entry point {spec!r} is not of the form 'package.module:Class.method'")
        path = self.path_of.get(mod)
        if path is None:
            raise ScopeError(f"entry point {spec!r}: module {mod!r} is not among the scanned files")
        funcs = self.s[path]["functions"]
        if qual in funcs:
            return (path, qual)
        if qual in self.s[path]["classes"]:
            hit = self._class_method((path, qual), "__call__")
            if hit:
                return hit[0]
        raise ScopeError(f"entry point {spec!r}: no function {qual!r} in {path}")

    def reachable(self, entry_points: list[str]) -> set[tuple[str, str]]:
        roots = [self.entry(e) for e in entry_points]
        for path, summ in self.s.items():
            roots += [(path, q) for q, f in summ["functions"].items() if f.get("capturable")]
        seen: set[tuple[str, str]] = set()
        todo = deque(roots)
        while todo:
            node = todo.popleft()
            if node in seen:
                continue
            seen.add(node)
            path, q = node
            # nested functions of a reachable function are part of it
            for other in self.s[path]["functions"]:
                if other.startswith(q + ".") and "." not in other[len(q) + 1:] and (path, other) not in seen:
                    todo.append((path, other))
            for target, _ in self.callees(path, q):
                if target not in seen:
                    todo.append(target)
        return seen
