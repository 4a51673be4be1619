"""How one function's calls, references, attribute reads and stores are written into a file's summary, so the
cross-file scope (``scope.py``) can resolve them without the syntax tree: call descriptors (`self.gate(x)`,
`Cls.method(...)`, a call of what a local was constructed from), references to functions passed as values,
property reads and stores that run a getter or a setter (accessor calls), a function's signature and decorators."""
from __future__ import annotations

import ast

from ..rules._base import dotted
from .classtypes import _ctor_symbols, _self_attr
from .context import _Func
from .inference import unpack_targets

_PROPERTIES = ("property", "cached_property", "abstractproperty")
_ACCESSORS = ("setter", "deleter")     # `@x.getter` is the getter again


# decorators that keep the signature a call binds to (anything else may wrap it in `*args, **kwargs` or add a
# parameter: such a def is never ruled out by its arguments)
_SIG_KEEPING = frozenset({"staticmethod", "classmethod", "abstractmethod", "override", "final", "no_grad",
                          "inference_mode", "cache", "lru_cache", "compile", "capturable"})


def _decorators(node: ast.AST) -> list[str]:
    """The dotted name of each decorator of a def, called or not (`@torch.compile(mode=m)` -> 'torch.compile';
    '' for one that is no plain name)."""
    return [dotted(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list]


def _host_defaults(node: ast.AST) -> list[str]:
    """Parameters whose default is a Python number, bool or string (`save_kv_cache=True`, `eps=1e-6`): a flag or
    a setting, not one of the step's tensors, where no caller says otherwise."""
    a = node.args
    pos = [*a.posonlyargs, *a.args]
    pairs = [*zip(pos[len(pos) - len(a.defaults):], a.defaults), *zip(a.kwonlyargs, a.kw_defaults)]
    out = []
    for p, d in pairs:
        if type(d) is ast.UnaryOp and type(d.op) in (ast.USub, ast.UAdd):
            d = d.operand
        if type(d) is ast.Constant and type(d.value) in (bool, int, float, str, bytes):
            out.append(p.arg)
    return out


def _signature(f: _Func, node: ast.AST) -> list | None:
    """What a call must pass to bind to this def: [positional parameter names, how many of them have defaults,
    *args?, **kwargs?, keyword-only names, the required ones, how it binds: 'static' / 'class' / 'inst' for a
    method, '' for a function]. None when a decorator may change it."""
    names = {d.rpartition(".")[2] for d in _decorators(node)}
    if not names <= _SIG_KEEPING:
        return None
    a = node.args
    is_method = f.cls is not None and f.qname == f"{f.cls}.{node.name}"
    how = ("static" if "staticmethod" in names else "class" if "classmethod" in names else "inst") if is_method else ""
    kwonly = [x.arg for x in a.kwonlyargs]
    return [[x.arg for x in [*a.posonlyargs, *a.args]], len(a.defaults), a.vararg is not None, a.kwarg is not None,
            kwonly, [n for n, d in zip(kwonly, a.kw_defaults) if d is None], how]


def _call_descriptor(f: ast.AST, local: dict[str, list]) -> list | None:
    if isinstance(f, ast.Name):
        if f.id in local:
            return [*local[f.id], "__call__"]
        return ["name", f.id]
    if isinstance(f, ast.Attribute):
        v = f.value
        if isinstance(v, ast.Name):
            if v.id == "self":
                return ["self", f.attr]
            if v.id in local:
                return [*local[v.id], f.attr]
            return ["attr", v.id, f.attr]
        if _self_attr(v):
            return ["selfattr", v.attr, f.attr]
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super":
            return ["super", f.attr]
        if isinstance(v, ast.Subscript) and _self_attr(v.value):
            return ["selfattr", v.value.attr, f.attr]
        if isinstance(v, ast.Call) and (type(v.func) is ast.Name and v.func.id not in local or _self_attr(v.func)):
            # a method of what a call returns (`get_backend().forward(q)`, `self.pick(x).run(x)`, `Cls(cfg).step()`):
            # an instance of what the function returns or constructs (only calls of a module-level name or of
            # `self.m`: a chain on a value, `x.float().sum()`, is a tensor's and would only cost lookups). `local`
            # holds what locals are (["inst", ...]), not the constructor map _ctor_symbols reads: it gets none
            syms = _ctor_symbols(v, {})
            return ["inst", syms, f.attr] if syms else None
        name = dotted(f)
        if name:
            head, _, rest = name.partition(".")
            return ["attr", head, rest]
    if isinstance(f, ast.Subscript) and _self_attr(f.value):
        return ["selfattr", f.value.attr, "__call__"]
    return None


# builtins that inspect their arguments and never call them
_INSPECTS = frozenset({"isinstance", "issubclass", "hasattr", "getattr", "setattr", "delattr", "type", "id", "len",
                       "repr", "str", "print", "callable", "vars", "dir", "hash", "format", "bool"})


def _ref_descriptor(a: ast.AST, local: dict[str, list], defs: set[str], imports: dict) -> list | None:
    """A function passed by reference (`run(self._step, x)`, `apply(helper)`): the callee will call it."""
    if isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name) and a.value.id == "self":
        return ["self", a.attr]
    if isinstance(a, ast.Name) and a.id not in local and a.id[:1].islower() and (a.id in defs or a.id in imports):
        return ["name", a.id]
    return None


def _accessor_role(qname: str, node: ast.AST) -> str:
    """'get' for a property getter (`@property`, `functools.cached_property`), 'set' for its setter; '' else."""
    if qname.endswith("@setter"):
        return "set"
    if "@" in qname.rpartition(".")[2]:
        return ""
    for d in node.decorator_list:
        name = dotted(d)
        if name and (name.rpartition(".")[2] in _PROPERTIES or name.endswith(".getter")):
            return "get"
    return ""


def _read_descriptor(a: ast.Attribute, local: dict[str, list]) -> list | None:
    """A read of `self.x`, `self.a.x`, `obj.x` (obj a local of a known class) described as a call of `x` would be;
    None for the reads no getter of the tree can answer (`torch.x`, `t.shape` of an unknown `t`)."""
    v = a.value
    if type(v) is ast.Name:          # the common shapes first: `self.x`, and `torch.x` / `t.shape` (skipped)
        if v.id == "self":
            return ["self", a.attr]
        if v.id in local and local[v.id][0] != "reg":
            return [*local[v.id], a.attr]
        return None
    return _accessor_target(a, local)


def _accessor_target(a: ast.Attribute, local: dict[str, list]) -> list | None:
    """An attribute (read or assigned) described as a call of it would be, where a property of the tree could be
    behind it: on self, a submodule or a local of a known class; not a plain name, a registry or a module path."""
    d = _call_descriptor(a, local)
    if d is None or d[0] in ("name", "reg") or d[0] == "attr" and d[1] != "self":
        return None
    return d


def _store_descriptors(n: ast.AST, local: dict[str, list]) -> list:
    """The attribute targets of an assignment that may run a property's setter: (target, value or None, the
    target described as a call of it would be)."""
    t = type(n)
    if t is ast.Assign:
        pairs = [(x, n.value) for tgt in n.targets for x in unpack_targets(tgt)]
    else:
        pairs = [(n.target, n.value)] if n.value is not None else []
    out = []
    for tgt, v in pairs:
        d = _accessor_target(tgt, local) if type(tgt) is ast.Attribute else None
        if d is None:
            continue
        # an unpacked target takes an element of the value: its kind is not the whole value's
        out.append((n, tgt, v if v is not None and tgt in getattr(n, "targets", [tgt]) else None, d))
    return out


def _accessor_calls(reads: list, stores: list, calls: list, index: dict, called: set[int]) -> list:
    """Attribute reads and stores that may run a property's getter or setter, as call records after the
    function's calls: `["get", *descriptor]` for a read of `self.x`, `self.a.x`, `obj.x` (obj a local of a known
    class) and `["set", *descriptor + "@setter"]` for `self.x = v`, described as a call of `x` would be. Whether
    `x` is a property is the scope's business (the class may live in another file); for a plain attribute the
    record resolves to nothing and stays quiet. A read that is a call's function is the call itself. Returns the
    setter records with the value assigned, for its kind."""
    for a, d in reads:
        if id(a) in called:
            continue
        index[id(a)] = len(calls)
        calls.append(["get", *d, a.lineno, a.col_offset])
    sets = []
    for n, tgt, v, d in stores:
        if type(n) is ast.AugAssign:      # `self.x += 1` reads it first
            calls.append(["get", *d, tgt.lineno, tgt.col_offset])
        rec = ["set", *d[:-1], f"{d[-1]}@setter", tgt.lineno, tgt.col_offset]
        calls.append(rec)
        sets.append((rec, v))
    return sets
