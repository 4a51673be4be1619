"""Where the code means a tensor to live, asked of its source: on a CPU run every device is "cpu".

A run on the CPU cannot tell `torch.arange(n, device="cpu")` (a host tensor on every machine) from
`torch.arange(n, device=DEV)` with `DEV = "cuda" if torch.cuda.is_available() else "cpu"` (the run's device) by
value. The call that is running can: the frame's current instruction names the exact call expression
(`co_positions`), and its `device=` argument is judged as written:
- a literal host device (`"cpu"`, `torch.device("cpu")`) is HOST, a literal accelerator DEV;
- `x.device` is where the tensor `x` lives (asked of the audit, which follows host tensors);
- a name is what it was bound to: the function's own assignments (all of them: a name bound to the host on one
  path and the device on another is the device), a parameter's argument at the call that is running in the caller's
  frame — or the parameter's default where the caller passed none (`SuppressTokensLogitsProcessor(ids)` with
  `device: str = "cpu"` is the host) — and module-level assignments for a global;
- `a if c else b`, `a or b`: the device where either side is (the expression picks the run's device).
Anything else, or a value handed in from outside the user's code (graphcheck calling a factory with --device, torch
calling back), is None: not known, which the audit treats as the run's device.
"""
from __future__ import annotations

import ast
import functools
import inspect
import linecache
import types
from typing import Callable

from ..placement import DEV, HOST, device_literal
from .attribution import is_internal

_MAX_DEPTH = 8
TensorPlacement = Callable[[object], "str | None"]     # a live object -> HOST/DEV where it is a tensor, else None


@functools.lru_cache(maxsize=256)
def _index(filename: str) -> tuple[dict, dict, ast.Module] | None:
    """(calls by exact position, function definitions by first line, module) of a source file."""
    text = "".join(linecache.getlines(filename))
    if not text:
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    calls, defs = {}, {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            calls[(node.lineno, node.end_lineno, node.col_offset, node.end_col_offset)] = node   # as co_positions()
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())])
            defs.setdefault(first, node)
            defs.setdefault(node.lineno, node)
    return calls, defs, tree


@functools.lru_cache(maxsize=4096)
def _positions(code: types.CodeType) -> tuple:
    return tuple(code.co_positions())


def call_at(frame: types.FrameType) -> ast.Call | None:
    """The call expression the frame is executing now."""
    idx = _index(frame.f_code.co_filename)
    if idx is None or frame.f_lasti < 0:
        return None
    pos = _positions(frame.f_code)
    i = frame.f_lasti // 2
    if i >= len(pos):
        return None
    return idx[0].get(pos[i])


def callee_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def argument(call: ast.Call, keyword: str | None, position: int | None) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    if position is not None and position < len(call.args):
        if not any(isinstance(a, ast.Starred) for a in call.args[: position + 1]):
            return call.args[position]
    return None


def device_of_call(frame: types.FrameType, names: tuple[str, ...], keyword: str | None, position: int | None,
                   tensor_placement: TensorPlacement) -> str | None:
    """HOST/DEV of the device argument of the call the frame is running, where it is one of `names` (a torch
    function called from Python code between is not the user's call: None)."""
    call = call_at(frame)
    if call is None or callee_name(call) not in names:
        return None
    expr = argument(call, keyword, position)
    return None if expr is None else resolve(expr, frame, tensor_placement)


def resolve(expr: ast.AST, frame: types.FrameType | None, tensor_placement: TensorPlacement,
            filename: str | None = None, depth: int = 0) -> str | None:
    lit = device_literal(expr)
    if lit is not None or depth > _MAX_DEPTH:
        return lit
    filename = frame.f_code.co_filename if frame is not None else filename
    go = lambda e, fr=frame: resolve(e, fr, tensor_placement, filename, depth + 1)  # noqa: E731
    if isinstance(expr, ast.IfExp):
        return _either([go(expr.body), go(expr.orelse)])
    if isinstance(expr, ast.BoolOp):
        return _either([go(v) for v in expr.values])
    if isinstance(expr, ast.Call) and callee_name(expr) == "device" and len(expr.args) == 1:
        return go(expr.args[0])                           # torch.device(dev)
    if isinstance(expr, ast.Attribute) and expr.attr == "device" and frame is not None:
        return tensor_placement(_value(expr.value, frame))
    if isinstance(expr, ast.Name):
        return _name(expr.id, frame, tensor_placement, filename, depth)
    return None


def _either(found: list[str | None]) -> str | None:
    """A value bound on several paths: the device where any path is, the host only where every path is."""
    if DEV in found:
        return DEV
    return HOST if found and all(f == HOST for f in found) else None


def _value(node: ast.AST, frame: types.FrameType):
    """The live object a plain name / attribute chain refers to in the frame (no code runs: properties are not
    called)."""
    if isinstance(node, ast.Name):
        if node.id in frame.f_locals:
            return frame.f_locals[node.id]
        return frame.f_globals.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _value(node.value, frame)
        if base is None:
            return None
        try:
            v = inspect.getattr_static(base, node.attr)
        except AttributeError:
            return None
        return None if isinstance(v, (property, types.FunctionType)) else v
    return None


def _name(name: str, frame: types.FrameType | None, tp: TensorPlacement, filename: str, depth: int) -> str | None:
    idx = _index(filename)
    if idx is None:
        return None
    first = frame.f_code.co_firstlineno if frame is not None and frame.f_code.co_name != "<module>" else None
    fn = idx[1].get(first) if first is not None else None
    found: list[str | None] = []
    if fn is not None:
        found += [resolve(v, frame, tp, filename, depth + 1) for v in _assigned(filename, first, name)]
        if name in _params(fn):
            found.append(_incoming(name, fn, frame, tp, depth))
        elif not found:            # a global (or a closure's name: not followed)
            found += [resolve(v, None, tp, filename, depth + 1) for v in _assigned(filename, None, name)]
    else:
        found += [resolve(v, None, tp, filename, depth + 1) for v in _assigned(filename, None, name)]
    return _either(found) if found else None


@functools.lru_cache(maxsize=8192)
def _assigned(filename: str, first: int | None, name: str) -> tuple[ast.expr, ...]:
    """Every expression assigned to `name` in the function defined at line `first` of the file, or at module level
    (None); nested functions and classes excluded. Cached: asked on every factory call of a step."""
    idx = _index(filename)
    if idx is None:
        return ()
    body = idx[1][first].body if first is not None else idx[2].body
    out = []
    stack = list(body) if isinstance(body, list) else [body]        # a lambda's body is one expression
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            out.append(node.value)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name) \
                and node.target.id == name and node.value is not None:
            out.append(node.value)
        elif isinstance(node, ast.NamedExpr) and node.target.id == name:
            out.append(node.value)
        stack.extend(ast.iter_child_nodes(node))
    return tuple(out)


def _params(fn) -> list[str]:
    a = fn.args
    return [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]


def _incoming(name: str, fn, frame: types.FrameType, tp: TensorPlacement, depth: int) -> str | None:
    """A parameter's value: the argument the caller's running call passes, or the default where it passes none.
    A caller outside the user's code (graphcheck building the target with --device, torch dispatching) hands in
    the run's device, which is not known here."""
    caller = frame.f_back
    if caller is None or is_internal(caller.f_code.co_filename):
        return None
    call = call_at(caller)
    if call is None:
        return None
    callee = callee_name(call)
    if callee != frame.f_code.co_name and frame.f_code.co_name != "__init__":
        return None                # a wrapper in between: not the call that bound this parameter
    a = fn.args
    positional = [p.arg for p in (*a.posonlyargs, *a.args)]
    implicit = 1 if positional and positional[0] in ("self", "cls") else 0
    expr = None
    for kw in call.keywords:
        if kw.arg == name:
            expr = kw.value
    if expr is None and name in positional:
        i = positional.index(name) - implicit
        if i >= 0 and any(isinstance(x, ast.Starred) for x in call.args[: i + 1]):
            return None
        if 0 <= i < len(call.args):
            expr = call.args[i]
    if expr is not None:
        return resolve(expr, caller, tp, None, depth + 1)
    if any(kw.arg is None for kw in call.keywords) or any(isinstance(x, ast.Starred) for x in call.args):
        return None                # perhaps passed through *args / **kwargs
    default = _default(name, fn)
    return None if default is None else resolve(default, None, tp, frame.f_code.co_filename, depth + 1)


def _default(name: str, fn) -> ast.expr | None:
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    for p, d in zip(positional[len(positional) - len(a.defaults):], a.defaults):
        if p.arg == name:
            return d
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        if p.arg == name:
            return d
    return None
