"""Analyse one file in one pass: collect each function's nodes, infer tensors, run the rule checkers.

The result is a JSON-serialisable summary (findings by function, call sites for the call graph, class
attribute types, imports, suppressions) that depends only on the file's text — so it is cached by content hash
and the cross-file work (scope, suppression matching) happens later, in ``scope.py`` and ``scanner.py``. The parts it is built from are listed in the package's
docstring (``graphcheck/static/__init__.py``).
"""
from __future__ import annotations

import ast
import functools
import re
import sys

from ..rules import CALLS_ANY as _CALLS_ANY
from ..rules import CALLS_BY_NAME as _CALLS_BY_NAME
from ..rules import CALLS_BY_PREFIX as _CALLS_BY_PREFIX
from ..rules import CHECKERS, format_message
from ..rules._base import dotted
from .regions import blocks as region_blocks
from .regions import once_decorator
from .inference import NP, TENSORS, Env, children, element, infer, join, unpack_targets
from .classtypes import (_LazyCtors, _attr_types, _bind_local_types, _class_kinds, _class_names, _class_refs,
                         _ctor_symbols, _field_kinds, _registries)
from .context import _FUNCS, _NAN_GUARDS, _NO_DEPS, _STREAM_CTORS, _Ctx, _Func, _splits, compiled_body, stream_call
from .descriptors import (_ACCESSORS, _INSPECTS, _accessor_calls, _accessor_role, _call_descriptor, _decorators,
                          _host_defaults, _read_descriptor, _ref_descriptor, _signature, _store_descriptors)
from .placement import NO_PLACEMENT, Placement
from .suppressions import _may_suppress, parse_suppressions

ENGINE_VERSION = "41"
_FUNC_TYPES = set(_FUNCS)
_CHECKERS = CHECKERS
# attribute loads are kept apart from a function's nodes (they may be property reads: _accessor_calls), so a rule
# registered on them would silently never run
if ast.Attribute in _CHECKERS:
    raise RuntimeError("a rule registers on ast.Attribute: the engine keeps attribute loads from the rules")
# Node types a checker, the tensor inference or the call graph looks at; everything else is only traversed.
_KEEP = set(_CHECKERS) | {ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.NamedExpr, ast.Call, ast.Import,
                          ast.ImportFrom, ast.Return, ast.comprehension, ast.Lambda}
_LEAVES = {ast.Name, ast.Constant, ast.Pass, ast.Break, ast.Continue, ast.Load, ast.Store, ast.Del}
_SKIP_FIELDS = {"ctx", "op", "ops", "type_comment", "type_ignores", "type_params"}
_FIELDS: dict[type, tuple[str, ...]] = {}


@functools.lru_cache(maxsize=1 << 16)
def _call_checkers(name: str, q: str) -> tuple:
    """The checkers for a call of `name` (the called name or method) whose qualified name is `q` ('' when not a
    module path): those for every call, those for the name or the last part of `q`, those for a prefix of `q`; each
    once. Cached: torch's tree makes about 300,000 calls through about 31,000 distinct (name, q) pairs."""
    todo = list(_CALLS_ANY)
    todo += _CALLS_BY_NAME.get(name, ())
    last = q.rsplit(".", 1)[-1] if q else ""
    if last and last != name:
        todo += [c for c in _CALLS_BY_NAME.get(last, ()) if c not in todo]
    if q:
        todo += [c for p, c in _CALLS_BY_PREFIX if q.startswith(p) and c not in todo]
    return tuple(todo)


_GLOBAL_STMT = re.compile(r"^[ \t]*global[ \t]", re.M)     # a `global` statement starts its line (or follows `;`: rare)


def _says_global(text: str) -> bool:
    """Whether `_GLOBAL_STMT` matches: the word where it occurs, instead of the regular expression trying every line
    of the file (most files say `global` only in prose, or not at all)."""
    i = text.find("global")
    while i >= 0:
        j = i
        while j and text[j - 1] in " \t":
            j -= 1
        if (not j or text[j - 1] == "\n") and text[i + 6:i + 7] in (" ", "\t"):
            return True
        i = text.find("global", i + 1)
    return False


class FileAnalyzer:
    def __init__(self, text: str, placement: Placement = NO_PLACEMENT):
        self.text = text
        self.placement = placement
        self.imports: dict[str, dict] = {}
        self.findings: list[dict] = []
        self.seen: set = set()
        self.host_seqs: dict[int, set[str]] = {}
        self.stream_names: set[str] = set()
        self.launch_streams: dict[int, set[str]] = {}  # per def: locals bound to a stream a launch can take
        self.generator_names: set[str] = set()     # locals bound to torch.Generator(...)
        self.kernel_names: set[str] = set()
        self.kernel_attrs: set[str] = set()
        self.module_defs: set[str] = set()
        self.says_global = _says_global(text)
        self.sets_default_device = "set_default_device" in text

    # read off the text only when a finding, a suppression-like comment or a condition asks: most of a large
    # tree's files need neither (splitting torch's 46 MB into lines was 2 % of a scan's CPU)
    @functools.cached_property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    @functools.cached_property
    def names_nan_guard(self) -> bool:
        return any(g in self.text for g in _NAN_GUARDS)

    def line(self, n: int) -> str:
        return self.lines[n - 1].strip() if 0 < n <= len(self.lines) else ""

    def run(self) -> dict:
        tree = ast.parse(self.text)
        funcs, classes = self._collect(tree)
        self._file_facts(funcs)
        module = funcs[0]
        # the module body first: its aliases, host tensors and NumPy arrays are visible in every function
        aliases: dict[str, str] = {}
        menv = Env(self.imports, aliases, {}, {}, set(), {}, self.placement)
        _aliases(menv, module.nodes, aliases)
        infer(menv, None, module.nodes)
        module_kinds = {k: v for k, v in menv.names.items() if not isinstance(v, frozenset) and k not in aliases}
        registries = _registries(tree)
        class_info: dict[str, dict] = {}
        class_kinds: dict[str, tuple[dict, set]] = {}
        for cname, (cnode, methods) in classes.items():
            kinds, mods = _class_kinds(self.imports, aliases, module_kinds, methods, self.placement, cname)
            class_kinds[cname] = (kinds, mods)
            class_info[cname] = {"line": cnode.lineno, "bases": [dotted(b) for b in cnode.bases if dotted(b)],
                                 "attrs": _attr_types(cnode, methods, registries), "refs": _class_refs(cnode, methods),
                                 "tensors": sorted(a for a, k in kinds.items() if k in TENSORS or k == NP),
                                 "fields": _field_kinds(cnode, kinds, self.placement)}
        ctx = _Ctx(self)
        functions: dict[str, dict] = {}
        envs: dict[str, Env] = {}     # each def's names, for the closures nested in it (pre-order: outer first)
        lambdas: dict[str, set] = {}  # each def's local lambdas, also for the closures nested in it
        for f in funcs:
            node = f.node
            if f.compiled:
                functions[f.qname] = _compiled_summary(f, node, registries)
                continue
            is_def = isinstance(node, _FUNCS)
            lam = _local_lambdas(f, lambdas) if is_def else set()
            kinds, mods = class_kinds.get(f.cls or "", ({}, set()))
            local_types: dict[str, list] = {}
            local_ctors = _LazyCtors(f, registries)
            calls: list[list] = []
            call_nodes: list[ast.Call] = []
            index: dict[int, int] = {}
            called: set[int] = set()      # the attribute reads that are a call's function
            # attribute reads and stores that may run a property's getter or setter, described with what the
            # locals hold at that point of the function (`o = A(); v = o.n; o = B()` reads A's n, not B's)
            reads = iter(f.reads)
            pending = next(reads, None)
            got: list = []
            stores: list = []

            def take_reads(upto: float) -> None:
                """Describe the reads that fall before kept node `upto`, with the locals as they are bound now."""
                nonlocal pending
                while pending is not None and pending[0] <= upto:
                    d = _read_descriptor(pending[1], local_types)
                    if d is not None:
                        got.append((pending[1], d))
                    pending = next(reads, None)

            for j, n in enumerate(f.nodes):
                t = type(n)
                if t is ast.Assign or t is ast.For:
                    take_reads(j)                                   # the reads before this binding
                    if t is ast.Assign and any(type(x) is not ast.Name for x in n.targets):
                        stores += _store_descriptors(n, local_types)
                    _bind_local_types(n, local_types, registries)
                elif t is ast.AugAssign or t is ast.AnnAssign:
                    if type(n.target) is ast.Attribute:
                        stores += _store_descriptors(n, local_types)
                elif t is ast.Call:
                    called.add(id(n.func))
                    d = _call_descriptor(n.func, local_types)
                    if d and d[0] == "name" and d[1] in lam:
                        d = None         # a local lambda: its body is this function's own code, scanned here
                    if d:
                        index[id(n)] = len(calls)
                        calls.append([*d, n.lineno, n.col_offset])
                        call_nodes.append(n)
                    # a function passed as an argument, by position or by keyword (`run(xs, fn=self._step)`), is
                    # (likely) called by the callee
                    for a in [*n.args, *(k.value for k in n.keywords if k.arg is not None)]:
                        if type(n.func) is ast.Name and n.func.id in _INSPECTS and n.func.id not in self.module_defs:
                            break        # isinstance(self.m, C), getattr(self.m, "x"): looked at, never called
                        r = _ref_descriptor(a, local_types, self.module_defs, self.imports)
                        if r:
                            calls.append(["ref", *r, n.lineno, n.col_offset])
                            call_nodes.append(None)
            module_calls = {i for i, c in enumerate(calls) if (c[0] == "self" and c[1] in mods) or (
                c[0] == "selfattr" and c[2] == "__call__") or (c[0] == "inst" and c[2] == "__call__")}
            ncalls = len(calls)
            take_reads(float("inf"))
            sets = _accessor_calls(got, stores, calls, index, called) if got or stores else ()
            local_aliases = dict(aliases)
            _aliases(Env(self.imports, aliases, module_kinds, kinds, mods, {}), f.nodes, local_aliases)
            env = Env(self.imports, local_aliases, module_kinds, kinds, mods, index, self.placement, f.cls)
            env.default_device_set = self.sets_default_device
            env.module_calls = module_calls
            if is_def:
                _closure_kinds(env, f, envs)
            params = infer(env, node if is_def else None, f.nodes) if is_def or f.qname != "<module>" else []
            if is_def:
                envs[f.qname] = env
            if not is_def and f.qname == "<module>":
                env.names = dict(menv.names)
            env.memo = {}
            ctx.func, ctx.env = f, env
            decorators = _decorators(node) if is_def else []
            checkers = _CHECKERS
            qual = env.qual
            for n in f.nodes:
                t = type(n)
                if t is ast.Call:
                    fn = n.func
                    todo = _call_checkers(fn.attr if type(fn) is ast.Attribute else fn.id if type(fn) is ast.Name
                                          else "", qual(fn))
                else:
                    todo = checkers.get(t, ())
                for chk in todo:
                    ctx._deps = _NO_DEPS
                    ctx._mode = "dev"
                    ctx._also = ()
                    chk(ctx, n)
            for rec, cn in zip(calls[:ncalls], call_nodes):
                if cn is not None and (cn.args or cn.keywords):
                    _append_arguments(rec, cn, env)
            for rec, v in sets:          # `self.x = v` passes v to the setter
                rec.append([_enc(env.kind(v))] if v is not None else [])
                rec.append({})
            ret = None
            ret_ctors: list[str] = []
            rets: list[ast.AST] = []
            for n in f.nodes:
                if type(n) is ast.Return and n.value is not None:
                    ret = join(ret, env.kind(n.value))
                    ret_ctors += [s for s in _ctor_symbols(n.value, local_ctors) if s not in ret_ctors]
                    rets.append(n.value)
            functions[f.qname] = fsum = {
                "line": getattr(node, "lineno", 0), "cls": f.cls, "calls": calls, "params": params,
                # how many of them a positional argument can fill: those after `*` or `*args` are keyword-only
                "npos": len(node.args.posonlyargs) + len(node.args.args) if is_def else 0,
                "ret": _enc(ret), "ret_elts": _ret_elts(env, rets), "ret_ctors": ret_ctors,
                "ret_classes": [c for r in rets for c in _class_names(r)],
                "capturable": any(d.rpartition(".")[2] == "capturable" for d in decorators),
            }
            if is_def:
                pydef = _host_defaults(node)
                if pydef:
                    fsum["pydef"] = pydef
                # regions (regions.py): where the def ends (a runtime row's line is placed in its innermost def),
                # the blocks that run in another region, and decorators that change the def's own region
                fsum["end"] = node.end_lineno or node.lineno
                blk = region_blocks(node, [n for n in f.nodes if type(n) is ast.If or type(n) is ast.With],
                                    self.says_global)
                if blk:
                    fsum["blocks"] = blk
                once = once_decorator(node, self.imports)
                if once:
                    fsum["once"] = once
                decos = [d for d in decorators if d]
                if decos:
                    fsum["decos"] = decos
                sig = _signature(f, node)
                if sig is not None:
                    fsum["sig"] = sig
            if is_def and f.cls is not None and f.qname.startswith(f"{f.cls}."):
                role = _accessor_role(f.qname, node)
                if role:
                    fsum["prop"] = role
        self.findings.sort(key=lambda d: (d["line"], d["col"], d["rule"]))
        return {"v": ENGINE_VERSION, "imports": self.imports, "functions": functions, "classes": class_info,
                "registries": registries, "findings": self.findings,
                "suppressions": parse_suppressions(self.lines) if _may_suppress(self.text) else []}

    # -- collection ---------------------------------------------------------------------------------
    def _collect(self, tree: ast.Module):
        module = _Func("<module>", None, None)
        funcs = [module]
        classes: dict[str, tuple[ast.ClassDef, list[_Func]]] = {}
        keep = _KEEP | {ast.Attribute}     # attribute reads are kept apart (see _accessor_calls)
        fields = _FIELDS
        # pre-order DFS; children pushed reversed so each function's nodes come out in source order
        stack: list[tuple[ast.AST, _Func, str, str | None]] = [(s, module, "", None) for s in reversed(tree.body)]
        pop, push = stack.pop, stack.append
        while stack:
            node, owner, prefix, cls = pop()
            t = type(node)
            if owner.compiled:
                if t is ast.Call or t is ast.AnnAssign or t is ast.Assign:    # calls; what `self.x` holds
                    owner.nodes.append(node)
                    if t is ast.Assign and type(node.value) is ast.Lambda:
                        owner.lambdas.update(x.id for x in node.targets if type(x) is ast.Name)
                elif t is ast.Import or t is ast.ImportFrom:
                    self._import(node)
                elif t in _FUNC_TYPES or t is ast.ClassDef:
                    owner.lambdas.add(node.name)     # the kernel's own code: a call of it is no call out
            elif t in _FUNC_TYPES:
                # `@x.setter` / `@x.deleter` redefine the name: they get their own entry (`C.x@setter`), or the
                # last one would stand for the getter
                acc = next((a for d in node.decorator_list for a in (dotted(d).rpartition(".")[2],)
                            if a in _ACCESSORS and "." in dotted(d)), None) if cls is not None else None
                q = f"{prefix}{node.name}@{acc}" if acc else f"{prefix}{node.name}"
                fn = _Func(q, node, cls)
                funcs.append(fn)
                if cls is not None and prefix == f"{cls}.":
                    classes[cls][1].append(fn)
                if owner is module:
                    self.module_defs.add(node.name)
                # a kernel's body (with the defs nested in it) is the DSL's code, not the step's: the def stays a
                # function (calls and launches resolve to it); of its body only the calls are kept
                fn.compiled = compiled_body(self._decorator_targets(node))
                for s in reversed(node.body):
                    push((s, fn, q + ".", cls))
                for b in [*node.decorator_list, *node.args.defaults, *[d for d in node.args.kw_defaults if d is not None]]:
                    push((b, owner, prefix, cls))  # decorators and defaults run where the def is
                continue
            elif t is ast.ClassDef:
                q = f"{prefix}{node.name}"
                cfn = _Func(f"<class {q}>", node, q)
                funcs.append(cfn)
                classes[q] = (node, [])
                if owner is module:
                    self.module_defs.add(node.name)
                for s in reversed(node.body):
                    push((s, cfn, q + ".", q))
                for b in node.bases:
                    push((b, owner, prefix, cls))
                continue
            elif t in keep:
                if t is ast.Attribute:
                    if type(node.ctx) is ast.Load:
                        owner.reads.append((len(owner.nodes), node))    # where it falls among the kept nodes
                else:
                    owner.nodes.append(node)
                    if t is ast.Assign and type(node.value) is ast.Lambda:
                        owner.lambdas.update(x.id for x in node.targets if type(x) is ast.Name)
                    elif t is ast.Import or t is ast.ImportFrom:
                        self._import(node)
                        continue
            names = fields.get(t)
            if names is None:
                names = fields[t] = tuple(f for f in t._fields if f not in _SKIP_FIELDS)
            for name in reversed(names):
                v = getattr(node, name, None)
                if v is None:
                    continue
                if type(v) is list:
                    for c in reversed(v):
                        tc = type(c)
                        if tc not in _LEAVES and tc is not str and c is not None:
                            push((c, owner, prefix, cls))
                elif isinstance(v, ast.AST) and type(v) not in _LEAVES:
                    push((v, owner, prefix, cls))
        return funcs, classes

    def _import(self, node) -> None:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    self.imports[a.asname] = {"target": a.name, "level": 0}
                else:
                    head = a.name.split(".")[0]
                    self.imports[head] = {"target": head, "level": 0}
        else:
            base = node.module or ""
            for a in node.names:
                if a.name == "*":
                    continue
                tgt = f"{base}.{a.name}" if base else a.name
                self.imports[a.asname or a.name] = {"target": tgt, "level": node.level}

    def _decorator_targets(self, node: ast.AST) -> list[str]:
        """A def's decorators by what they name once the file's imports are applied (`@ct.kernel` after `import
        cutlass.cute as ct` is 'cutlass.cute.kernel'; `@functools.partial(cute.jit, ...)` names cute.jit). A bare
        name the file does not import (`jit = torch.compile`) is left out: nothing says what it is."""
        out = []
        for d in node.decorator_list:
            if type(d) is ast.Call and d.args and dotted(d.func).rpartition(".")[2] == "partial":
                d = d.args[0]
            name = self._through_imports(dotted(d.func if type(d) is ast.Call else d))
            if name:
                out.append(name)
        return out

    def _through_imports(self, name: str) -> str:
        """A dotted name as the file's imports make it (`ct.compile` after `import cutlass.cute as ct` is
        'cutlass.cute.compile'); a dotted name whose head the file does not import as written; '' for a bare name
        the file does not import (nothing says what it is)."""
        head, dot, rest = name.partition(".")
        imp = self.imports.get(head)
        if imp is not None:     # a relative import keeps its dots: `from . import warp` is the package's, not Warp
            return "." * imp.get("level", 0) + imp["target"] + dot + rest
        return name if dot else ""

    def _file_facts(self, funcs: list[_Func]) -> None:
        for f in funcs:
            seqs: set[str] = set()
            streams: set[str] = set()
            for n in f.nodes:
                if isinstance(n, ast.Assign) and len(n.targets) == 1:
                    t, v = n.targets[0], n.value
                    if isinstance(t, ast.Name):
                        if isinstance(v, (ast.List, ast.Tuple, ast.ListComp)) or _splits(v) or (
                                isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id in ("list", "tuple")):
                            seqs.add(t.id)
                    fname = dotted(v.func) if isinstance(v, ast.Call) else ""
                    last = fname.split(".")[-1]
                    if last in _STREAM_CTORS and isinstance(t, ast.Name):
                        self.stream_names.add(t.id)
                    if isinstance(t, ast.Name) and stream_call(v):
                        streams.add(t.id)
                    if last == "Generator" and isinstance(t, ast.Name):
                        self.generator_names.add(t.id)
                    # CuTeDSL's compile by what the imports make the call (`ct.compile`, `compile` imported from
                    # cutlass.cute under any name), or spelled `cute.compile` where the file's imports do not say
                    resolved = self._through_imports(fname)
                    if resolved.startswith("cutlass.") and resolved.rpartition(".")[2] == "compile" \
                            or fname.endswith("cute.compile"):
                        if isinstance(t, ast.Name):
                            self.kernel_names.add(t.id)
                        elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                            self.kernel_attrs.add(t.attr)
            self.host_seqs[id(f)] = seqs
            self.launch_streams[id(f)] = streams
            node = f.node
            # a CuTeDSL launcher by what its decorator names through the imports (`@ct.jit`, `@jit` from
            # cutlass.cute), as compiled_body judges it
            if isinstance(node, _FUNCS) and any(d.endswith("cute.jit") for d in self._decorator_targets(node)):
                self.kernel_names.add(node.name)


def _append_arguments(rec: list, call: ast.Call, env: Env | None) -> None:
    """Append what a call passes to its record: each positional argument's kind in `env` (None without one: a
    kernel's arguments are the DSL's values), then {keyword: kind}, with '*' / '**' where `f(*xs)` / `f(**opts)`
    pass a number (and names) of arguments nothing says."""
    rec.append([_enc(env.kind(a)) if env is not None else None for a in call.args])
    kw = {k.arg: _enc(env.kind(k.value)) if env is not None else None for k in call.keywords if k.arg}
    if any(type(a) is ast.Starred for a in call.args):
        kw["*"] = True
    if any(k.arg is None for k in call.keywords):
        kw["**"] = True
    rec.append(kw)


def _compiled_summary(f: _Func, node: ast.AST, registries: dict) -> dict:
    """A kernel's summary: its signature, and the calls of its body under `dsl_calls`, apart from `calls` so that
    the captured region does not follow them (a helper the DSL traces is the DSL's code). They still count as the
    callers of what they call, passing arguments of no known kind: a helper only kernels call is not taken for an
    entry point whose inputs are the step's tensors (`--all-functions`)."""
    calls: list[list] = []
    stores: list = []
    local_types: dict[str, list] = {}     # `r = Role()` before `r.setup(a)`
    for n in f.nodes:
        if type(n) is ast.Assign or type(n) is ast.AnnAssign:
            stores += _store_descriptors(n, local_types)     # `self.cfg.scale = a` runs a setter
            if type(n) is ast.Assign:
                _bind_local_types(n, local_types, registries)
            continue
        if type(n) is not ast.Call:
            continue
        d = _call_descriptor(n.func, local_types)
        if d and d[0] == "name" and d[1] in f.lambdas:
            d = None          # a def or lambda of the kernel's own body
        if d:
            calls.append([*d, n.lineno, n.col_offset])
            _append_arguments(calls[-1], n, None)
    for rec, _ in _accessor_calls([], stores, calls, {}, set()):
        rec += [[None], {}]
    a = node.args
    fsum = {"line": node.lineno, "cls": f.cls, "calls": [], "dsl_calls": calls,
            "params": [x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if x is not None],
            "npos": len(a.posonlyargs) + len(a.args), "ret": None, "ret_elts": None, "ret_ctors": [],
            "ret_classes": [], "capturable": False, "end": node.end_lineno or node.lineno,
            "decos": [d for d in _decorators(node) if d], "compiled": True}
    sig = _signature(f, node)
    if sig is not None:
        fsum["sig"] = sig
    return fsum


def _closure_kinds(env: Env, f: _Func, envs: dict[str, Env]) -> None:
    """A nested def reads its enclosing function's names (`nonlocal sizes`, or a free name): they start with the
    kinds the enclosing function settled on. Only concrete kinds: a symbolic one names the enclosing function's
    parameters and calls, which mean something else here. A name the nested def binds itself is its own local,
    unless it is declared nonlocal (then both bindings join)."""
    q = f.qname.rpartition(".")[0]
    while q and q not in envs:
        q = q.rpartition(".")[0]
    outer = envs.get(q) if q else None
    if outer is None or not f.qname.startswith(q + ".") or "." in f.qname[len(q) + 1:]:
        return      # no enclosing def, or a class body between them (a method does not see the function's names)
    node = f.node
    inherit = [(name, k) for name, k in outer.names.items() if isinstance(k, str)]
    if not inherit:
        return
    bound = _own_bindings(node)
    # the nonlocal declarations matter only for a name the nested def also binds (most bind none of them)
    shared = {name for st in ast.walk(node) if isinstance(st, ast.Nonlocal) for name in st.names} \
        if any(name in bound for name, _ in inherit) else ()
    for name, k in inherit:
        if name not in bound or name in shared:
            env.names[name] = k
            if name in outer.bools:
                env.bools.add(name)


def _own_bindings(fn: ast.AST) -> set[str]:
    """The names a def binds in its own scope: parameters, assignment and loop targets, `with ... as`, `except ...
    as`, imports, nested defs and classes, and `global` names (module globals, not the enclosing function's);
    nested defs, classes and lambdas are their own scopes and are not entered."""
    a = fn.args
    out = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if x is not None}
    stack = list(fn.body)
    while stack:
        n = stack.pop()
        t = type(n)
        if t in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            out.add(n.name)
            continue
        if t is ast.Lambda:
            continue
        tgts = n.targets if t is ast.Assign else [n.target] if t in (ast.AnnAssign, ast.AugAssign, ast.For,
                                                                        ast.AsyncFor, ast.NamedExpr) else \
            [i.optional_vars for i in n.items if i.optional_vars is not None] if t in (ast.With, ast.AsyncWith) else []
        for tg in tgts:
            out.update(x.id for x in unpack_targets(tg) if isinstance(x, ast.Name))
        if t is ast.ExceptHandler and n.name:
            out.add(n.name)
        elif t in (ast.Import, ast.ImportFrom):
            out.update((x.asname or x.name).split(".")[0] for x in n.names)
        elif t is ast.Global:
            out.update(n.names)
        stack += children(n)
    return out


def _ret_elts(env: Env, rets: list[ast.AST]) -> list | None:
    """The kinds of a returned tuple's elements, by position: `return a, b` (or a local bound to tuple literals),
    joined over the tuple returns of one length. Another path's value that is symbolic (`return self.inner(x)`)
    adds its own elements, as far as its tuple returns show them (`r:i@k`); one that is a tensor, None or a
    Python value adds nothing, so unpacking the tuple does not take the other path's kind for every name. None
    when no return is a tuple, or tuples of different lengths are returned."""
    elts: list | None = None
    others: list = []
    for v in rets:
        ks = env.tuple_elts(v)
        if ks is None:
            if type(v) is ast.Tuple or type(v) is ast.Name and v.id in env.tuples:
                return None             # a starred tuple or literals of different lengths: no fixed positions
            k = env.kind(v)
            if isinstance(k, frozenset):
                others.append(k)
            continue
        if elts is None:
            elts = list(ks)
        elif len(elts) != len(ks):
            return None
        else:
            elts = [join(a, b) for a, b in zip(elts, ks)]
    if elts is None:
        return None
    for k in others:
        elts = [join(e, element(k, i, strict=True)) for i, e in enumerate(elts)]
    return [_enc(e) for e in elts]


def _enc(k):
    """A kind as JSON: its name, null, or the sorted list of its symbolic dependencies."""
    return sorted(k) if isinstance(k, frozenset) else k


def _aliases(env: Env, nodes: list, out: dict[str, str]) -> None:
    """`name = torch.cuda.synchronize`: names bound to a module path stand for it (flow-insensitive)."""
    for n in nodes:
        if type(n) is ast.Assign and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                and isinstance(n.value, (ast.Attribute, ast.Name)):
            q = env.qual(n.value)
            if q and q != n.targets[0].id:
                out[n.targets[0].id] = q


def _local_lambdas(f: _Func, outer: dict[str, set]) -> set[str]:
    """Names the def binds only to lambdas, its own and those of the defs it is nested in (unless it binds the
    name itself): calling one runs the lambda's body, which is scanned as part of the def that holds it."""
    q = f.qname.rpartition(".")[0]
    while q and q not in outer:
        q = q.rpartition(".")[0]
    inherited = outer.get(q, set()) if q else set()
    own = f.lambdas
    if not own and not inherited:
        outer[f.qname] = own
        return own
    out = set(inherited) - _own_bindings(f.node) if inherited else set()
    if own:
        args = f.node.args
        params = {x.arg for x in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if x}
        other = set()
        for n in f.nodes:
            t = type(n)
            if t is ast.Assign and type(n.value) is not ast.Lambda or t in (ast.AnnAssign, ast.AugAssign, ast.For,
                                                                           ast.NamedExpr, ast.comprehension):
                for tgt in (n.targets if t is ast.Assign else [n.target]):
                    other.update(x.id for x in unpack_targets(tgt) if type(x) is ast.Name)
        out |= own - other - params
    outer[f.qname] = out
    return out


def _too_deep(text: str) -> bool:
    """Cheap guard before parsing: a run of thousands of prefix operators or brackets is what exhausts the parser.
    Counting those characters first skips the regular expression for any file with fewer than a run needs (most:
    the search cost a cold scan of torch's tree about 0.4 s)."""
    if sum(text.count(c) for c in _DEEP_CHARS) < _DEEP_RUN:
        return False
    return bool(_DEEP.search(text))


_DEEP_CHARS = "-+~([{"
_DEEP_RUN = 3000
_DEEP = re.compile(r"[-+~(\[{]\s*(?:[-+~(\[{]\s*){%d}" % (_DEEP_RUN - 1))


def analyse_text(text: str, placement: Placement = NO_PLACEMENT) -> dict:
    """Summary of one file; a syntax error, or input too deep or too large to analyse, becomes one GC903 finding
    for the file rather than an exception."""
    def parse_error(line: int, col: int, msg: str) -> dict:
        lines = text.splitlines()
        return {"v": ENGINE_VERSION, "imports": {}, "functions": {}, "classes": {}, "registries": {}, "suppressions": [],
                "findings": [{"rule": "GC903", "line": line, "col": col, "function": "<module>",
                              "message": format_message("GC903", error=msg),
                              "source": lines[line - 1].strip() if 0 < line <= len(lines) else ""}]}
    if _too_deep(text):
        return parse_error(0, 0, "expression nested too deeply to analyse")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 12000))   # what the parser accepts (~3,000 levels), the inference can follow
    try:
        return FileAnalyzer(text, placement).run()
    except SyntaxError as e:
        return parse_error(e.lineno or 0, max((e.offset or 1) - 1, 0), e.msg)
    except (RecursionError, MemoryError):
        return parse_error(0, 0, "expression nested too deeply to analyse")
    except ValueError as e:     # source with NUL bytes
        return parse_error(0, 0, str(e)[:80])
    finally:
        sys.setrecursionlimit(limit)
