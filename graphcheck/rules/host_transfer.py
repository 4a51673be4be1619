"""GC4xx — host-to-device traffic and per-step state allocation."""
from __future__ import annotations

import ast

from ._base import Family, Rule
from ..static.inference import dotted

_WHY_H2D = ("A host-to-device copy from pageable memory blocks the CPU, and during capture it fails with "
            "`Cannot copy between CPU and CUDA tensors during CUDA graph capture unless the CPU tensor is pinned`. "
            "Even when it captures, the graph copies the host data seen at capture time on every replay.")
FAMILY = Family("Host-to-device traffic and per-step allocation", [
    Rule("GC401", "tensor-from-host-data", "`{call}` builds a tensor from host data every step", "allocate a static buffer once and `copy_` into it",
         "Flags `torch.tensor`, `torch.as_tensor`, `torch.from_numpy` and the legacy `torch.LongTensor(...)` constructors.", _WHY_H2D,
         "pos = torch.tensor([p], device='cuda')", "self.pos_buf.fill_(p)   # outside the graph; or advance it on device: self.pos_buf += 1"),
    Rule("GC402", "host-to-device-copy", "`{call}` copies host memory to the device", "keep inputs in static device buffers written outside the graph",
         "Flags `.cuda()`, `.to('cuda')` and `.pin_memory()` in the captured region.", _WHY_H2D,
         "ids = ids.cuda()", "static_ids.copy_(ids_host, non_blocking=True)   # before replay, from pinned memory"),
    Rule("GC403", "non-blocking-unpinned", "`non_blocking=True` copy from a tensor not known to be pinned", "copy from a `pin_memory()` buffer, or drop `non_blocking`",
         "Flags `non_blocking=True` copies whose source is not visibly pinned (`pin_memory()` or `pin_memory=True`).",
         "A `non_blocking` copy from pageable memory silently becomes synchronous, and a device-to-host one races with "
         "the host reading the buffer; the CUDA sync-debug mode reports neither.",
         "host = x.to('cpu', non_blocking=True)\nuse(host)", "pinned = torch.empty(n, pin_memory=True)\npinned.copy_(x, non_blocking=True); event.record()"),
    Rule("GC404", "host-scalar-index-write", "writing host data into a device tensor by index (`{call}`)", "use `fill_`/`index_fill_`/`masked_fill_` with device indices",
         "Flags index assignment of Python scalars or lists into tensors (`x[3] = 1.0`, `x[[1, 2]] = v`).",
         "The scalar or index list is materialised on the host and copied to the device on every call (a sync); "
         "under capture the copy fails or is frozen.",
         "cache[3] = 0.0", "cache.select(0, 3).zero_()"),
    Rule("GC405", "numpy-in-region", "`{call}` runs NumPy inside the captured region", "do the math in torch on the device, or move it to load time",
         "Flags NumPy calls in the captured region.", "NumPy works on host memory: its inputs must be read back and its "
         "results copied in; a graph records neither.", "w = np.exp(x)", "w = torch.exp(x)"),
    Rule("GC406", "state-rebind", "`self.{attr}` is rebound to a new tensor inside the captured step", "write in place (`self.{attr}.copy_(...)`, `index_copy_`)",
         "Flags assigning a tensor to `self.<attr>` outside `__init__` in the captured region (`self.cache = torch.cat(...)`).",
         "A graph replays into the memory it captured. A state tensor rebound to a fresh allocation is never updated "
         "by replay, and a growing `cat` changes the shape every step.",
         "self.k_cache = torch.cat([self.k_cache, k], dim=1)", "self.k_cache.index_copy_(1, pos, k)   # fixed capacity, device pos"),
])
on = FAMILY.on
_FROM_HOST = {"tensor", "as_tensor", "from_numpy", "LongTensor", "FloatTensor", "IntTensor", "BoolTensor",
              "HalfTensor", "BFloat16Tensor", "DoubleTensor", "ByteTensor", "Tensor"}
_INIT = {"__init__", "__post_init__", "__new__", "__setstate__"}


def _is_host_literal(v: ast.AST) -> bool:
    if isinstance(v, ast.Constant):
        return isinstance(v.value, (int, float, bool, complex)) and v.value is not None
    if isinstance(v, ast.UnaryOp) and isinstance(v.op, (ast.USub, ast.UAdd)):
        return _is_host_literal(v.operand)
    if isinstance(v, (ast.List, ast.Tuple)):
        return bool(v.elts) and all(_is_host_literal(e) for e in v.elts)
    return False


@on(ast.Call)
def _calls(ctx, node: ast.Call) -> None:
    s = ctx.scope
    f = node.func
    tname = s.is_torch_call(f)
    if tname and tname in _FROM_HOST:
        ctx.report("GC401", node, call=f"torch.{tname}")
        return
    if isinstance(f, ast.Attribute):
        m = f.attr
        if m == "cuda" and not tname and dotted(f) not in {f"{t}.cuda" for t in s.torch_names}:
            ctx.report("GC402", node, call=".cuda()")
        elif m == "to" and _to_cuda(node):
            ctx.report("GC402", node, call=".to('cuda')")
        elif m == "to" and ctx.is_host_tensor(f.value) and _to_some_device(node):
            base = f.value
            while isinstance(base, ast.Subscript):
                base = base.value
            ctx.report("GC402", node, call=f"{dotted(base)}.to(device)")
        elif m == "pin_memory" and not node.args:
            ctx.report("GC402", node, call=".pin_memory()")
        elif not tname and ctx.is_numpy_call(f) and ".random." not in f".{dotted(f)}." and not (
                m in ("asarray", "array") and node.args and s.is_tensor(node.args[0])):  # that one is GC109
            ctx.report("GC405", node, call=dotted(f) + "(...)")
    if any(k.arg == "non_blocking" and isinstance(k.value, ast.Constant) and k.value.value is True for k in node.keywords):
        src = node.args[0] if isinstance(f, ast.Attribute) and f.attr == "copy_" and node.args else (
            f.value if isinstance(f, ast.Attribute) else None)
        if not (isinstance(src, ast.Name) and src.id in s.pinned):
            ctx.report("GC403", node)


def _to_some_device(node: ast.Call) -> bool:
    """`.to(x.device)`, `.to(device=d)`, `.to(dev)` — a move whose target is a device, not a dtype."""
    if any(k.arg == "device" for k in node.keywords):
        return True
    if not node.args:
        return False
    a = node.args[0]
    return (isinstance(a, ast.Attribute) and a.attr == "device") or (isinstance(a, ast.Name) and "dev" in a.id.lower()) or (
        isinstance(a, ast.Constant) and isinstance(a.value, str) and not a.value.startswith("cpu"))


def _to_cuda(node: ast.Call) -> bool:
    vals = list(node.args[:1]) + [k.value for k in node.keywords if k.arg == "device"]
    return any(isinstance(v, ast.Constant) and isinstance(v.value, str) and v.value.startswith("cuda") for v in vals)


@on(ast.Assign)
def _assign(ctx, node: ast.Assign) -> None:
    s = ctx.scope
    for t in node.targets:
        if isinstance(t, ast.Subscript) and s.is_tensor(t.value):
            list_index = isinstance(t.slice, ast.List) or (isinstance(t.slice, ast.Tuple) and any(isinstance(e, ast.List) for e in t.slice.elts))
            if list_index or (_is_host_literal(node.value) and not s.is_bool_tensor(t.slice)):
                ctx.report("GC404", t, call="x[[i, j]] = v" if list_index else "x[i] = scalar")
        elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" \
                and ctx.function_name not in _INIT and s.is_tensor(node.value) and ctx.in_method:
            ctx.report("GC406", t, attr=t.attr)
