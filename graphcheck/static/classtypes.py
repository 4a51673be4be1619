"""What a name or an attribute holds, read from one file without running it: the classes a local or a `self.X`
was constructed from (``_ctor_symbols``, ``_local_ctors``, ``_attr_types``), module-level registries of classes,
class attributes naming a class or function (``_class_refs``), and the tensor kinds of `self.X`
(``_class_kinds``, ``_field_kinds``). The engine records them in each file's summary; the call descriptors and
the cross-file scope resolve calls through them."""
from __future__ import annotations

import ast

from ..rules._base import dotted
from .context import _Func
from .inference import DEV, HOST, TENSOR, TENSORS, Env, annotation_classes, annotation_kind, infer, join, name_hint
from .placement import NO_PLACEMENT, Placement


def _registries(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level dicts/lists/tuples of class or function names (`_MODELS = {"llama": Llama, ...}`)."""
    out: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            v = node.value
            elts = v.values if isinstance(v, ast.Dict) else v.elts if isinstance(v, (ast.List, ast.Tuple)) else None
            if not elts:
                continue
            syms = []
            for e in elts:
                if isinstance(e, ast.Tuple) and e.elts:   # {"a": ("mod", "Cls")} is not resolvable; (Cls, cfg) is
                    e = e.elts[0]
                d = dotted(e)
                if d:
                    syms.append(d)
            if syms:
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    if isinstance(t, ast.Name):
                        out[t.id] = syms
    return out


def _class_kinds(imports: dict, aliases: dict, module_kinds: dict, methods: list[_Func],
                 placement: Placement = NO_PLACEMENT, cname: str | None = None) -> tuple[dict, set]:
    """Kinds of `self.X` (the join of everything the methods assign; buffers and parameters live on the device),
    and the attributes holding constructed modules (`self.gate = nn.Linear(...)`: calling them returns a tensor)."""
    kinds: dict[str, object] = {}
    mods: set[str] = set()
    for fn in methods:
        for n in fn.nodes:
            if type(n) is ast.Call and isinstance(n.func, ast.Attribute) and n.func.attr == "register_buffer" \
                    and n.args and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str):
                kinds[n.args[0].value] = DEV
    for fn in methods:
        if fn.compiled:
            continue      # a kernel's assignments hold the DSL's values, no tensor
        if not any((type(n) is ast.Assign and any(_self_attr(t) for t in n.targets)) or
                   (type(n) is ast.AnnAssign and _self_attr(n.target)) for n in fn.nodes):
            continue      # assigns no attribute: nothing to learn about the class
        env = Env(imports, aliases, module_kinds, kinds, mods, {}, placement, cname)
        infer(env, fn.node, fn.nodes)
        for n in fn.nodes:
            if type(n) is ast.Assign:
                targets, value = n.targets, n.value
            elif type(n) is ast.AnnAssign and n.value is not None:
                targets, value = [n.target], n.value
            else:
                continue
            for t in targets:
                if not (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"):
                    continue
                if isinstance(value, ast.Call) and "Parameter" in dotted(value.func):
                    k = DEV
                else:
                    k = env.kind(value)
                    if isinstance(k, frozenset):
                        k = None
                    hint = name_hint(t.attr)
                    if hint is not None and k in (None, "tensor"):
                        k = hint
                if k is not None:
                    kinds[t.attr] = join(kinds.get(t.attr), k) if t.attr in kinds and kinds[t.attr] != DEV else (kinds.get(t.attr) or k)
                elif isinstance(value, ast.Call) and dotted(value.func).split(".")[-1][:1].isupper():
                    mods.add(t.attr)
    return kinds, mods - {a for a, k in kinds.items() if k in TENSORS}


def _class_refs(cnode: ast.ClassDef, methods: list[_Func]) -> dict[str, list[str]]:
    """Attributes holding a class or function itself: class variables (`model_cls = LlamaModel`) and
    `self.model_cls = LlamaModel`; calling them constructs or calls what they name."""
    out: dict[str, list[str]] = {}
    for s in cnode.body:
        if isinstance(s, (ast.Assign, ast.AnnAssign)) and s.value is not None and dotted(s.value):
            for t in (s.targets if isinstance(s, ast.Assign) else [s.target]):
                if isinstance(t, ast.Name):
                    out.setdefault(t.id, []).append(dotted(s.value))
    for f in methods:
        for n in f.nodes:
            if type(n) is ast.Assign and isinstance(n.value, (ast.Name, ast.Attribute)) and dotted(n.value) \
                    and not dotted(n.value).startswith("self."):
                for t in n.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        out.setdefault(t.attr, []).append(dotted(n.value))
    return out


_CONTAINERS = ("ModuleList", "Sequential", "ModuleDict", "list", "tuple", "ParameterList")


def _ctor_symbols(v: ast.AST, local: dict[str, list]) -> list[str]:
    """What an expression constructs, as scope entries: `Cls` (an instance of Cls), `self:m` (what `self.m(...)`
    returns or constructs), `call:f` (what function `f` returns), `reg:R` (an instance of a class from registry R).
    Sees through containers, comprehensions, conditionals, lambdas and locals filled by `.append` in a loop."""
    t = type(v)
    if t is ast.Call:
        f = v.func
        name = dotted(f)
        last = name.split(".")[-1]
        if last in _CONTAINERS:
            return [s for a in v.args for s in _ctor_symbols(a, local)]
        if isinstance(f, ast.Subscript) and isinstance(f.value, ast.Name):   # ATTENTION_CLASSES[impl](config)
            return [f"reg:{f.value.id}"]
        if isinstance(f, ast.Name) and f.id in local:
            # `C = pick_cls(cfg); C(...)`: an instance of a class the function returned
            return [e[4:] if e.startswith("ref:") else f"clsof:{e[5:]}" if e.startswith("call:") else e
                    for e in local[f.id] if e.startswith(("ref:", "reg:", "call:"))]
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
            return [f"self:{f.attr}"]
        via = _method_of_held(f, local)
        if via:
            # `backend = get_backend(cfg); impl_cls = backend.get_impl_cls()`: what a method of what the factory
            # gave returns (backend dispatch: the class picked in __init__ is what `self.impl.forward()` runs)
            return via
        if last[:1].isupper():
            return [name]
        out = [f"call:{name}"] if name else []
        if isinstance(f, ast.Call) and type(f.func) in (ast.Name, ast.Attribute) and dotted(f.func):
            # get_impl_class(cfg)(...): a class the factory returns; and, as for any other call, the classes
            # handed to it (`wrap(opts)(Block)`, `make(n)(lambda: Block())`)
            out.append(f"clsof:{dotted(f.func)}")
        elif isinstance(f, ast.Call):
            # get_backend(cfg).get_impl_cls()(...): a class a method of the factory's result returns
            out += [f"clsof:{e[5:]}" for e in _ctor_symbols(f, local) if e.startswith("call:") and ">" in e]
        for a in [*v.args, *(k.value for k in v.keywords)]:   # make_layers(n, lambda prefix: Block(...)), build(Block)
            if isinstance(a, ast.Lambda):
                out += _ctor_symbols(a.body, local)
            elif isinstance(a, (ast.Name, ast.Attribute)) and dotted(a).split(".")[-1][:1].isupper():
                out.append(dotted(a))
        return out
    if t is ast.List or t is ast.Tuple:
        return [s for e in v.elts for s in _ctor_symbols(e, local)]
    if t is ast.ListComp or t is ast.GeneratorExp:
        return _ctor_symbols(v.elt, local)
    if t is ast.DictComp:
        return _ctor_symbols(v.value, local)
    if t is ast.IfExp:
        return _ctor_symbols(v.body, local) + _ctor_symbols(v.orelse, local)
    if t is ast.Dict:
        return [s for e in v.values if e is not None for s in _ctor_symbols(e, local)]
    if t is ast.Name:
        return [e for e in local.get(v.id, ()) if not e.startswith("ref:")]
    if t is ast.Lambda:
        return _ctor_symbols(v.body, local)
    return []


def _method_of_held(f: ast.AST, local: dict[str, list]) -> list[str]:
    """`x.m` where x is a local holding what a factory returned or an instance (`x = get_backend(cfg)`,
    `x = Backend()`), or `factory(...).m` itself: `call:HOLDER>m`, what m returns (`clsof:HOLDER>m`, the classes it
    returns, where the result is called). HOLDER is the factory's `call:` entry or the class; chains nest
    (`call:F>m>n`)."""
    if not isinstance(f, ast.Attribute):
        return []
    v = f.value
    held: list[str] = []
    if isinstance(v, ast.Name) and v.id in local:
        for e in local[v.id]:
            if e.startswith(("call:", "clsof:")):
                held.append(f"call:{e.partition(':')[2]}")
            elif e.startswith("ref:"):
                held.append(f"call:{e[4:]}")
            elif ":" not in e:
                held.append(f"call:{e}")          # an instance of a class constructed here
    elif isinstance(v, ast.Call) and type(v.func) in (ast.Name, ast.Attribute) and dotted(v.func) \
            and not _self_attr(v.func):
        held.append(f"call:{dotted(v.func)}")
        held += [e for e in _method_of_held(v.func, local)]
    return [f"{h}>{f.attr}" for h in dict.fromkeys(held)]


def _class_names(v: ast.AST) -> list[str]:
    """The classes a returned expression may name (`return FusedMoE`, `return A if fast else B`): capitalised
    names, resolved later (a name that is no class of the tree drops out there)."""
    if type(v) is ast.IfExp:
        return _class_names(v.body) + _class_names(v.orelse)
    if type(v) in (ast.Name, ast.Attribute):
        name = dotted(v)
        if name and name.rpartition(".")[2][:1].isupper():
            return [name]
    return []


class _LazyCtors:
    """A function's local constructor map, computed only when a returned name needs it."""

    def __init__(self, f: _Func, registries: dict):
        self.f, self.registries, self.d = f, registries, None

    def _load(self) -> dict:
        if self.d is None:
            self.d = _local_ctors(self.f, self.registries)
        return self.d

    def __contains__(self, k) -> bool:
        return k in self._load()

    def __getitem__(self, k):
        return self._load()[k]

    def get(self, k, default=None):
        return self._load().get(k, default)


def _local_ctors(f: _Func, registries: dict) -> dict[str, list]:
    """Locals that hold constructed modules, lists filled with them, or classes taken from a registry."""
    cached = getattr(f, "_ctors", None)
    if cached is not None:
        return cached
    local: dict[str, list] = {}
    for n in f.nodes:
        t = type(n)
        if t is ast.Assign and len(n.targets) == 1 and isinstance(n.targets[0], ast.Tuple) \
                and not isinstance(n.value, (ast.Tuple, ast.List)):
            # layers, start, end = make_layers(n, lambda i: Block(i)): any of the names may hold the modules
            syms = _ctor_symbols(n.value, local)
            for e in n.targets[0].elts:
                e = e.value if isinstance(e, ast.Starred) else e
                if syms and isinstance(e, ast.Name):
                    cur = local.setdefault(e.id, [])
                    cur.extend(s for s in syms if s not in cur)
        elif t is ast.Assign and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            name, v = n.targets[0].id, n.value
            if isinstance(v, ast.Subscript) and isinstance(v.value, ast.Name) and v.value.id in registries:
                local[name] = [f"reg:{v.value.id}"]
            elif isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "get" \
                    and isinstance(v.func.value, ast.Name) and v.func.value.id in registries:
                local[name] = [f"reg:{v.func.value.id}"]
            else:
                syms = _ctor_symbols(v, local)
                if syms:
                    cur = local.setdefault(name, [])
                    cur.extend(s for s in syms if s not in cur)
        elif t is ast.Call and isinstance(n.func, ast.Attribute) and n.func.attr in ("append", "extend", "insert") \
                and isinstance(n.func.value, ast.Name) and n.args:
            syms = _ctor_symbols(n.args[-1], local)
            if syms:
                cur = local.setdefault(n.func.value.id, [])
                cur.extend(s for s in syms if s not in cur)
    f._ctors = local  # type: ignore[attr-defined]
    return local


def _self_attr(t: ast.AST) -> str:
    return t.attr if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" else ""


def _field_kinds(cnode: ast.ClassDef, kinds: dict, placement: Placement = NO_PLACEMENT) -> dict[str, str]:
    """What each attribute is, for code that holds an instance (`batch: InputBatch` -> batch.seq_lens): the class
    body's annotations (a dataclass's fields), else what the methods assign; declared host-resident (a marker on
    the field, a `Class.ATTR` pattern) over both."""
    out = {a: k for a, k in kinds.items() if isinstance(k, str)}
    for n in cnode.body:
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            k = annotation_kind(n.annotation)
            hint = name_hint(n.target.id)       # `seq_lens_cpu: torch.Tensor` is a host tensor, as for self.X
            if hint is not None and k in (None, TENSOR):
                k = hint
            if placement and (placement.marked(n.value) or placement.attr((cnode.name,), n.target.id)):
                k = HOST
            if k is not None and k != "none":
                out[n.target.id] = k
    return out


def _attr_types(cnode: ast.ClassDef, methods: list[_Func], registries: dict) -> dict[str, list[str]]:
    """self.X -> scope entries: assigned in any method, appended to, extended, or set by key; typed by an
    annotation (`x: Cls` in the class body, `self.x: Cls = ...`) or assigned a parameter annotated with a class
    (`def __init__(self, dec: Decoder): self.dec = dec`)."""
    out: dict[str, list[str]] = {}

    def add(attr: str, syms: list[str]) -> None:
        if attr and syms:
            cur = out.setdefault(attr, [])
            cur.extend(s for s in syms if s not in cur)

    for s in cnode.body:
        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name):
            add(s.target.id, annotation_classes(s.annotation))
    for f in methods:
        # what the locals and the assigned values construct is worked out only for an assignment to a self
        # attribute: most of a method's assignments are to locals
        local = _LazyCtors(f, registries)
        args = f.node.args if isinstance(f.node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        params = {a.arg: annotation_classes(a.annotation)
                  for a in ([*args.posonlyargs, *args.args, *args.kwonlyargs] if args else []) if a.annotation}
        for n in f.nodes:
            t = type(n)
            if t is ast.Assign:
                syms = None
                for tgt in n.targets:
                    attr = _self_attr(tgt)
                    item = _self_attr(tgt.value) if isinstance(tgt, ast.Subscript) else ""  # self.experts[str(i)] = E()
                    if attr or item:
                        syms = _ctor_symbols(n.value, local) if syms is None else syms
                        add(attr, syms)
                        add(item, syms)
                    pairs = zip(tgt.elts, n.value.elts) if isinstance(tgt, ast.Tuple) and isinstance(n.value, ast.Tuple) \
                        and len(tgt.elts) == len(n.value.elts) else [(tgt, n.value)]
                    for one, v in pairs:                        # self.dec, self.sampler = dec, sampler
                        if isinstance(v, ast.Name) and v.id in params:
                            add(_self_attr(one), params[v.id])
                        elif one is not tgt:
                            attr = _self_attr(one)
                            if attr:
                                add(attr, _ctor_symbols(v, local))
                        elif isinstance(tgt, ast.Tuple):
                            # self.layers, self.start, self.end = make_layers(n, lambda i: Block(i)): which element
                            # holds the modules is the callee's business; each self attribute may be it
                            for e in tgt.elts:
                                attr = _self_attr(e.value if isinstance(e, ast.Starred) else e)
                                if attr:
                                    syms = _ctor_symbols(n.value, local) if syms is None else syms
                                    add(attr, syms)
            elif t is ast.AnnAssign:
                attr = _self_attr(n.target)
                if attr:
                    add(attr, annotation_classes(n.annotation) +
                        (_ctor_symbols(n.value, local) if n.value is not None else []))
            elif t is ast.AugAssign:
                attr = _self_attr(n.target)
                if attr:
                    add(attr, _ctor_symbols(n.value, local))
            elif t is ast.Call and isinstance(n.func, ast.Attribute) and n.func.attr in ("append", "extend", "insert") and n.args:
                attr = _self_attr(n.func.value)
                if attr:
                    add(attr, _ctor_symbols(n.args[-1], local))
            elif t is ast.Call and isinstance(n.func, ast.Attribute) and n.func.attr == "add_module" and len(n.args) == 2 \
                    and _self_attr(n.func) == "add_module" and isinstance(n.args[0], ast.Constant):
                add(str(n.args[0].value), _ctor_symbols(n.args[1], local))
    return out


def _bind_local_types(n: ast.AST, local: dict[str, list], registries: dict) -> None:
    """Remember what a local name holds: constructed instances, an element/alias of a self attribute, or a class
    taken from a registry."""
    if isinstance(n, ast.For):
        tgt, v = n.target, n.iter
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id in ("enumerate", "zip", "reversed") and v.args:
            v = v.args[0] if v.func.id != "zip" else v.args[0]
            if isinstance(tgt, ast.Tuple) and tgt.elts:
                tgt = tgt.elts[-1] if n.iter.func.id == "enumerate" else tgt.elts[0]
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "items" \
                and isinstance(tgt, ast.Tuple) and tgt.elts:
            tgt = tgt.elts[-1]
    else:
        if len(n.targets) != 1:
            return
        tgt, v = n.targets[0], n.value
    if not isinstance(tgt, ast.Name):
        return
    while isinstance(v, ast.Subscript) and not (isinstance(v.value, ast.Name) and v.value.id in registries):
        v = v.value
    if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == "self":
        local[tgt.id] = ["selfattr", v.attr]
    elif isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr in ("values", "items", "children", "modules") \
            and _self_attr(v.func.value):
        local[tgt.id] = ["selfattr", v.func.value.attr]
    elif isinstance(v, ast.Subscript) and isinstance(v.value, ast.Name):
        local[tgt.id] = ["reg", v.value.id]
    elif isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "get" \
            and isinstance(v.func.value, ast.Name) and v.func.value.id in registries:
        local[tgt.id] = ["reg", v.func.value.id]
    else:
        syms = [e for e in _ctor_symbols(v, {}) if not e.startswith("call:")] if isinstance(n, ast.Assign) else []
        if syms:
            local[tgt.id] = ["inst", syms]
        else:
            local.pop(tgt.id, None)
