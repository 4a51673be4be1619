"""Analyse one file in one pass: collect each function's nodes, infer tensors, run the rule checkers.

The result is a JSON-serialisable summary (findings by function, call sites for the call graph, class
attribute types, imports, suppressions) that depends only on the file's text — so it is cached by content hash
and the cross-file work (scope, suppression matching) happens later, in ``scope.py`` and ``scanner.py``.
"""
from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass, field

from ..rules import FAMILIES, RULES, format_message
from .inference import TensorScope, class_tensor_attrs, dotted, infer_function

ENGINE_VERSION = "3"
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_FUNC_TYPES = set(_FUNCS)
_CHECKERS: dict[type, list] = {}
for _fam in FAMILIES:
    for _t, _fns in _fam.checkers.items():
        _CHECKERS.setdefault(_t, []).extend(_fns)
_SUPPRESS = re.compile(r"#\s*(?:graphcheck:\s*ignore\[(?P<codes>[^\]]*)\]|noqa:\s*(?P<noqa>GC\d+(?:\s*,\s*GC\d+)*))"
                       r"(?:\s*--\s*(?P<reason>.*\S))?")
_LOGGER_NAMES = {"logger", "log", "logging", "_logger", "_log", "LOGGER", "LOG", "warnings", "wandb", "writer", "tb"}
_READBACK_FAMILIES = ("GC1", "GC6")
# Node types a checker, the tensor inference or the call graph looks at; everything else is only traversed.
_KEEP = set(_CHECKERS) | {ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.NamedExpr, ast.Call, ast.Import,
                          ast.ImportFrom}
_LEAVES = {ast.Name, ast.Constant, ast.Pass, ast.Break, ast.Continue, ast.Load, ast.Store, ast.Del}
_SKIP_FIELDS = {"ctx", "op", "ops", "type_comment", "type_ignores", "type_params"}
_FIELDS: dict[type, tuple[str, ...]] = {}


@dataclass
class _Func:
    qname: str
    node: ast.AST | None
    cls: str | None
    nodes: list = field(default_factory=list)


def _comments(lines: list[str]) -> dict[int, tuple[int, str]]:
    """Real comments (line -> (column, text)), so a suppression-like string literal is not taken for one."""
    out: dict[int, tuple[int, str]] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline):
            if tok.type == tokenize.COMMENT:
                out[tok.start[0]] = (tok.start[1], tok.string)
    except (tokenize.TokenError, SyntaxError):
        pass
    return out


def parse_suppressions(lines: list[str]) -> list[dict]:
    """Suppression comments: the codes, the reason, and the line they apply to (same line, or the next one)."""
    out = []
    comments: dict[int, tuple[int, str]] | None = None
    for i, text in enumerate(lines, 1):
        if "graphcheck" not in text and "noqa" not in text:
            continue
        if not _SUPPRESS.search(text):
            continue
        if comments is None:
            comments = _comments(lines)
        if i not in comments:
            continue
        col, comment = comments[i]
        m = _SUPPRESS.search(comment)
        if not m:
            continue
        raw = m.group("codes") if m.group("codes") is not None else m.group("noqa")
        codes = [c.strip().upper() for c in raw.split(",") if c.strip()]
        own_line = text[:col].strip() == ""
        out.append({"line": i, "target": i + 1 if own_line else i, "codes": codes, "reason": m.group("reason") or "",
                    "source": text.strip()})
    return out


class _Ctx:
    """What a rule checker sees: the current function's tensor scope, file facts, and ``report``."""

    def __init__(self, analyzer: "FileAnalyzer"):
        self.a = analyzer
        self.scope: TensorScope | None = None
        self.func: _Func | None = None

    # file facts ------------------------------------------------------------------------------------
    @property
    def function_name(self) -> str:
        return self.func.qname.rsplit(".", 1)[-1] if self.func else "<module>"

    @property
    def in_method(self) -> bool:
        return bool(self.func and self.func.cls and isinstance(self.func.node, _FUNCS))

    def module_alias(self, name: str) -> str:
        return self.a.imports.get(name, {}).get("target", "") if name else ""

    def is_numpy_call(self, f: ast.AST) -> bool:
        name = dotted(f)
        return bool(name) and "." in name and self.module_alias(name.split(".")[0]).split(".")[0] == "numpy"

    def is_logger(self, node: ast.AST) -> bool:
        name = dotted(node)
        return bool(name) and (name.split(".")[-1] in _LOGGER_NAMES or name.lower().endswith("logger"))

    def is_host_sequence(self, node: ast.AST) -> bool:
        if isinstance(node, (ast.List, ast.Tuple, ast.ListComp)):
            return True
        return isinstance(node, ast.Name) and node.id in self.a.host_seqs.get(id(self.func), set())

    def mentions_nan_guard(self, test: ast.AST) -> bool:
        for n in ast.walk(test):
            if isinstance(n, ast.Call):
                name = dotted(n.func)
                if name.split(".")[-1] in ("isnan", "isinf", "isfinite", "isneginf", "isposinf"):
                    return True
        return False

    def is_host_tensor(self, node: ast.AST) -> bool:
        """A module-level tensor built on the host (`TABLE = torch.tensor([...])`), or a slice of one."""
        while isinstance(node, ast.Subscript):
            node = node.value
        return isinstance(node, ast.Name) and node.id in self.a.host_tensors and not (
            self.func and node.id in self.scope.names)

    def is_stream_or_event(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id in self.a.stream_names

    def is_shadowed(self, name: str) -> bool:
        return name in self.a.module_defs

    def from_einops(self, f: ast.AST) -> bool:
        name = dotted(f)
        head = name.split(".")[0]
        return self.module_alias(head).startswith("einops")

    def is_kernel(self, f: ast.AST) -> bool:
        if isinstance(f, ast.Name):
            return f.id in self.a.kernel_names
        return isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self" \
            and f.attr in self.a.kernel_attrs

    # reporting -------------------------------------------------------------------------------------
    def report(self, code: str, node: ast.AST, **fmt: str) -> None:
        line = getattr(node, "lineno", 0)
        key = (code, line, getattr(node, "col_offset", 0))
        if key in self.a.seen:
            return
        self.a.seen.add(key)
        self.a.findings.append({
            "rule": code, "line": line, "col": getattr(node, "col_offset", 0),
            "function": self.func.qname if self.func else "<module>",
            "message": format_message(code, **fmt), "source": self.a.line(line),
        })


class FileAnalyzer:
    def __init__(self, text: str):
        self.text = text
        self.lines = text.splitlines()
        self.imports: dict[str, dict] = {}
        self.findings: list[dict] = []
        self.seen: set = set()
        self.host_seqs: dict[int, set[str]] = {}
        self.stream_names: set[str] = set()
        self.kernel_names: set[str] = set()
        self.kernel_attrs: set[str] = set()
        self.module_defs: set[str] = set()
        self.host_tensors: set[str] = set()     # module-level tensors built on the host (no device=)

    _HOST_CTORS = {"tensor", "as_tensor", "arange", "zeros", "ones", "full", "empty", "linspace", "eye", "rand", "randn"}

    def _host_tensors(self, tree: ast.Module, torch_names: set[str]) -> None:
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
                name = dotted(node.value.func)
                head, _, last = name.partition(".")
                if head in torch_names and last in self._HOST_CTORS and not any(k.arg == "device" for k in node.value.keywords):
                    for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                        if isinstance(t, ast.Name):
                            self.host_tensors.add(t.id)

    def line(self, n: int) -> str:
        return self.lines[n - 1].strip() if 0 < n <= len(self.lines) else ""

    def run(self) -> dict:
        tree = ast.parse(self.text)
        funcs, classes = self._collect(tree)
        torch_names = {a for a, v in self.imports.items() if v["target"] in ("torch", "torch.nn.functional")} | {"torch"}
        self._file_facts(funcs)
        self._host_tensors(tree, torch_names)
        class_info: dict[str, dict] = {}
        class_scopes: dict[str, tuple[set, set, set]] = {}
        for cname, (cnode, methods) in classes.items():
            class_scopes[cname] = class_tensor_attrs([(f.node, f.nodes) for f in methods], torch_names)
            class_info[cname] = {"line": cnode.lineno, "bases": [dotted(b) for b in cnode.bases if dotted(b)],
                                 "attrs": _attr_types(methods)}
        ctx = _Ctx(self)
        functions: dict[str, dict] = {}
        for f in funcs:
            attrs, bools, mods = class_scopes.get(f.cls or "", (set(), set(), set()))
            ctx.func = f
            ctx.scope = infer_function(f.node if isinstance(f.node, _FUNCS) else ast.Pass(), f.nodes, attrs, bools, torch_names, mods)
            calls = []
            local_types: dict[str, list] = {}
            for n in f.nodes:
                for chk in _CHECKERS.get(type(n), ()):
                    chk(ctx, n)
                if isinstance(n, (ast.Assign, ast.For)):
                    _bind_local_types(n, local_types)
                elif isinstance(n, ast.Call):
                    d = _call_descriptor(n.func, local_types)
                    if d:
                        calls.append([*d, n.lineno, n.col_offset])
            node = f.node
            functions[f.qname] = {
                "line": getattr(node, "lineno", 0), "cls": f.cls, "calls": calls,
                "capturable": isinstance(node, _FUNCS) and any(dotted(d.func if isinstance(d, ast.Call) else d).split(".")[-1]
                                                               == "capturable" for d in node.decorator_list),
            }
        self.findings.sort(key=lambda d: (d["line"], d["col"], d["rule"]))
        return {"imports": self.imports, "functions": functions, "classes": class_info, "findings": self.findings,
                "suppressions": parse_suppressions(self.lines)}

    # -- collection ---------------------------------------------------------------------------------
    def _collect(self, tree: ast.Module):
        module = _Func("<module>", None, None)
        funcs = [module]
        classes: dict[str, tuple[ast.ClassDef, list[_Func]]] = {}
        keep = _KEEP
        fields = _FIELDS
        # pre-order DFS; children pushed reversed so each function's nodes come out in source order
        stack: list[tuple[ast.AST, _Func, str, str | None]] = [(s, module, "", None) for s in reversed(tree.body)]
        pop, push = stack.pop, stack.append
        while stack:
            node, owner, prefix, cls = pop()
            t = type(node)
            if t in _FUNC_TYPES:
                q = f"{prefix}{node.name}"
                fn = _Func(q, node, cls)
                funcs.append(fn)
                if cls is not None and prefix == f"{cls}.":
                    classes[cls][1].append(fn)
                if owner is module:
                    self.module_defs.add(node.name)
                for s in reversed(node.body):
                    push((s, fn, q + ".", cls))
                for b in [*node.decorator_list, *node.args.defaults, *[d for d in node.args.kw_defaults if d is not None]]:
                    push((b, owner, prefix, cls))  # decorators and defaults run where the def is
                continue
            if t is ast.ClassDef:
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
            if t in keep:
                owner.nodes.append(node)
                if t is ast.Import or t is ast.ImportFrom:
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
                        if isinstance(c, ast.AST) and type(c) not in _LEAVES:
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

    def _file_facts(self, funcs: list[_Func]) -> None:
        for f in funcs:
            seqs: set[str] = set()
            for n in f.nodes:
                if isinstance(n, ast.Assign) and len(n.targets) == 1:
                    t, v = n.targets[0], n.value
                    if isinstance(t, ast.Name):
                        if isinstance(v, (ast.List, ast.Tuple, ast.ListComp)) or (
                                isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id in ("list", "tuple")):
                            seqs.add(t.id)
                    fname = dotted(v.func) if isinstance(v, ast.Call) else ""
                    last = fname.split(".")[-1]
                    if last in ("Event", "Stream", "current_stream", "default_stream", "ExternalStream"):
                        if isinstance(t, ast.Name):
                            self.stream_names.add(t.id)
                    if fname.endswith("cute.compile") or fname == "compile" and self.imports.get("compile", {}).get("target", "").startswith("cutlass"):
                        if isinstance(t, ast.Name):
                            self.kernel_names.add(t.id)
                        elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                            self.kernel_attrs.add(t.attr)
            self.host_seqs[id(f)] = seqs
            node = f.node
            if isinstance(node, _FUNCS) and any(dotted(d.func if isinstance(d, ast.Call) else d).endswith(("cute.jit",))
                                                 for d in node.decorator_list):
                self.kernel_names.add(node.name)


def _ctor_symbols(v: ast.AST) -> list[str]:
    """Class symbols constructed by an expression: C(...), [C(...) for ...], nn.ModuleList([...]), a if c else b."""
    if isinstance(v, ast.Call):
        name = dotted(v.func)
        last = name.split(".")[-1]
        if last in ("ModuleList", "Sequential", "ModuleDict", "list", "tuple"):
            out = []
            for a in v.args:
                out += _ctor_symbols(a)
            return out
        return [name] if name and name[:1].isupper() or "." in name and last[:1].isupper() else []
    if isinstance(v, (ast.List, ast.Tuple)):
        return [s for e in v.elts for s in _ctor_symbols(e)]
    if isinstance(v, (ast.ListComp, ast.GeneratorExp)):
        return _ctor_symbols(v.elt)
    if isinstance(v, ast.IfExp):
        return _ctor_symbols(v.body) + _ctor_symbols(v.orelse)
    if isinstance(v, ast.Dict):
        return [s for e in v.values for s in _ctor_symbols(e)]
    return []


def _attr_types(methods: list[_Func]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in methods:
        for n in f.nodes:
            if isinstance(n, ast.Assign):
                syms = _ctor_symbols(n.value)
                if not syms:
                    continue
                for t in n.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        cur = out.setdefault(t.attr, [])
                        cur.extend(s for s in syms if s not in cur)
    return out


def _bind_local_types(n: ast.AST, local: dict[str, list]) -> None:
    """Remember what a local name holds: a constructed class, or an element/alias of a self attribute."""
    if isinstance(n, ast.For):
        tgt, v = n.target, n.iter
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id in ("enumerate", "zip", "reversed") and v.args:
            v = v.args[0] if v.func.id != "zip" else v.args[0]
            if isinstance(tgt, ast.Tuple) and tgt.elts:
                tgt = tgt.elts[-1] if n.iter.func.id == "enumerate" else tgt.elts[0]
    else:
        if len(n.targets) != 1:
            return
        tgt, v = n.targets[0], n.value
    if not isinstance(tgt, ast.Name):
        return
    while isinstance(v, ast.Subscript):
        v = v.value
    if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == "self":
        local[tgt.id] = ["selfattr", v.attr]
    elif isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr in ("values", "items") \
            and isinstance(v.func.value, ast.Attribute) and isinstance(v.func.value.value, ast.Name) and v.func.value.value.id == "self":
        local[tgt.id] = ["selfattr", v.func.value.attr]
    else:
        syms = _ctor_symbols(v)
        if syms:
            local[tgt.id] = ["class", syms[0]]
        else:
            local.pop(tgt.id, None)


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
        if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == "self":
            return ["selfattr", v.attr, f.attr]
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super":
            return ["super", f.attr]
        if isinstance(v, ast.Subscript) and isinstance(v.value, ast.Attribute) and isinstance(v.value.value, ast.Name) \
                and v.value.value.id == "self":
            return ["selfattr", v.value.attr, f.attr]
        name = dotted(f)
        if name:
            head, _, rest = name.partition(".")
            return ["attr", head, rest]
    if isinstance(f, ast.Subscript) and isinstance(f.value, ast.Attribute) and isinstance(f.value.value, ast.Name) \
            and f.value.value.id == "self":
        return ["selfattr", f.value.attr, "__call__"]
    return None


def analyse_text(text: str) -> dict:
    """Summary of one file; a syntax error becomes a GC903 finding rather than an exception."""
    try:
        return FileAnalyzer(text).run()
    except SyntaxError as e:
        line = e.lineno or 0
        lines = text.splitlines()
        return {"imports": {}, "functions": {}, "classes": {}, "suppressions": [],
                "findings": [{"rule": "GC903", "line": line, "col": max((e.offset or 1) - 1, 0), "function": "<module>",
                              "message": format_message("GC903", error=e.msg),
                              "source": lines[line - 1].strip() if 0 < line <= len(lines) else ""}]}
    except RecursionError:
        return {"imports": {}, "functions": {}, "classes": {}, "suppressions": [],
                "findings": [{"rule": "GC903", "line": 0, "col": 0, "function": "<module>",
                              "message": format_message("GC903", error="nesting too deep to analyse"), "source": ""}]}


def is_readback(code: str) -> bool:
    return code.startswith(_READBACK_FAMILIES) and code in RULES
