"""GC1xx — host readback: the host waits for the device to hand a value back."""
from __future__ import annotations

import ast

from ._base import Family, Rule
from ..static.inference import dotted

_WHY = ("Reading a device value on the host blocks the CPU until every queued kernel has finished (a "
        "device-to-host sync). During CUDA-graph capture nothing has run yet, so the read fails with "
        "`operation failed due to a previous error during capture` — which names neither the op nor the line.")

FAMILY = Family("Host readback", [
    Rule("GC101", "tensor-item", "`.item()` reads a device value back to the host", "keep the value on the device; use it as a 0-d tensor",
         "Flags `.item()` calls.", _WHY,
         "n = counts.sum().item()\nout = x[:n]", "n = counts.sum()              # stays a 0-d device tensor\nout = torch.where(idx < n, x, 0)"),
    Rule("GC102", "tensor-tolist", "`.{method}()` copies a tensor to host memory", "keep the data on the device, or move this out of the captured step",
         "Flags `.tolist()` and `.numpy()`.", _WHY + " `tolist()` is a blocking device-to-host copy.",
         "for e in counts.tolist():\n    ...", "grouped = torch.ops.my.grouped_gemm(x, offsets)   # offsets stay on device"),
    Rule("GC103", "tensor-to-cpu", "`{call}` moves a tensor to the host", "keep it on the device; copy to a pinned host buffer outside the graph",
         "Flags `.cpu()` and `.to('cpu')`.", _WHY,
         "logits_host = logits.cpu()", "out_buf.copy_(logits)   # static device buffer; read it after replay"),
    Rule("GC104", "tensor-scalar-cast", "`{call}()` of a tensor reads it back to the host", "keep the value as a tensor; compute with it on the device",
         "Flags `int(t)`, `float(t)`, `bool(t)` and `complex(t)` where `t` is a tensor.", _WHY,
         "scale = float(x.abs().max())", "scale = x.abs().amax()      # 0-d tensor, broadcasts"),
    Rule("GC105", "tensor-as-index", "a tensor used as a host integer in `{call}`", "use device-side indexing (`index_select`, `gather`, masking)",
         "Flags `range(t)` and Python sequences indexed by a tensor (`lst[t]`), which call `__index__`.", _WHY,
         "for i in range(n_tokens):\n    ...", "i = torch.arange(max_tokens, device=x.device)\nvalid = i < n_tokens"),
    Rule("GC106", "tensor-format", "formatting a tensor (`{call}`) reads it back to the host", "format `.shape`/`.dtype`, or log outside the captured step",
         "Flags `print(t)`, `str(t)`/`repr(t)`, f-strings, `%`-formatting, `.format()` and logging calls with a tensor argument.",
         _WHY + " Formatting prints the values, so it copies them to the host first.",
         "logger.debug(f\"router scores {scores}\")", "logger.debug(f\"router scores {scores.shape}\")"),
    Rule("GC107", "device-assert", "`assert` on a device value reads it back to the host", "check shapes only, or validate outside the captured step",
         "Flags `assert` statements whose condition is a tensor.", _WHY,
         "assert (idx >= 0).all()", "idx = idx.clamp_min(0)       # or torch._assert_async(...) outside capture"),
    Rule("GC108", "tensor-compare-host", "`{call}` returns a host bool", "compare on the device (`(a - b).abs().amax()`), outside the step",
         "Flags `torch.equal`, `torch.allclose` and their method forms.", _WHY,
         "if torch.allclose(a, b):\n    ...", "close = ((a - b).abs() <= atol + rtol * b.abs()).all()   # device bool"),
    Rule("GC109", "numpy-from-tensor", "`{call}` converts a tensor to a NumPy array", "do the math in torch on the device",
         "Flags `np.asarray(t)` / `np.array(t)` where `t` is a tensor.", _WHY,
         "arr = np.asarray(probs)", "probs.cumsum(-1)"),
])
on = FAMILY.on
_LOG_METHODS = {"debug", "info", "warning", "warn", "error", "critical", "exception", "log"}


@on(ast.Call)
def _calls(ctx, node: ast.Call) -> None:
    f = node.func
    s = ctx.scope
    if isinstance(f, ast.Attribute):
        m = f.attr
        if m == "item" and not node.args:
            ctx.report("GC101", node)
        elif m in ("tolist", "numpy") and not node.args:
            ctx.report("GC102", node, method=m)
        elif m == "cpu" and not node.args:
            ctx.report("GC103", node, call=".cpu()")
        elif m == "to" and _to_cpu(node):
            ctx.report("GC103", node, call=".to('cpu')")
        elif m in ("equal", "allclose") and (dotted(f.value) in {f"{t}" for t in s.torch_names} or s.is_tensor(f.value)):
            ctx.report("GC108", node, call=f"{dotted(f) or m}")
        elif m in ("asarray", "array") and ctx.is_numpy_call(f) and node.args and s.is_tensor(node.args[0]):
            ctx.report("GC109", node, call=f"{dotted(f)}(...)")
        elif m in _LOG_METHODS and ctx.is_logger(f.value) and any(s.is_tensor(a) for a in node.args):
            ctx.report("GC106", node, call=f"{dotted(f)}(...)")
        elif m == "format" and isinstance(f.value, ast.Constant) and any(s.is_tensor(a) for a in [*node.args, *(k.value for k in node.keywords)]):
            ctx.report("GC106", node, call="str.format")
    elif isinstance(f, ast.Name):
        if f.id in ("int", "float", "bool", "complex") and len(node.args) == 1 and s.is_tensor(node.args[0]):
            ctx.report("GC104", node, call=f.id)
        elif f.id == "range" and any(s.is_tensor(a) for a in node.args):
            ctx.report("GC105", node, call="range(...)")
        elif f.id in ("print", "str", "repr") and any(s.is_tensor(a) for a in node.args):
            ctx.report("GC106", node, call=f"{f.id}(...)")


def _to_cpu(node: ast.Call) -> bool:
    vals = list(node.args[:1]) + [k.value for k in node.keywords if k.arg == "device"]
    for v in vals:
        if isinstance(v, ast.Constant) and isinstance(v.value, str) and v.value.startswith("cpu"):
            return True
        if isinstance(v, ast.Call) and dotted(v.func).endswith("device") and v.args and \
                isinstance(v.args[0], ast.Constant) and v.args[0].value == "cpu":
            return True
    return False


@on(ast.JoinedStr)
def _fstring(ctx, node: ast.JoinedStr) -> None:
    if any(isinstance(v, ast.FormattedValue) and ctx.scope.is_tensor(v.value) for v in node.values):
        ctx.report("GC106", node, call="f-string")


@on(ast.BinOp)
def _percent(ctx, node: ast.BinOp) -> None:
    if isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
        r = node.right
        items = r.elts if isinstance(r, ast.Tuple) else [r]
        if any(ctx.scope.is_tensor(i) for i in items):
            ctx.report("GC106", node, call="%-format")


@on(ast.Assert)
def _assert(ctx, node: ast.Assert) -> None:
    if ctx.scope.is_tensor(node.test) and not ctx.mentions_nan_guard(node.test):
        ctx.report("GC107", node)


@on(ast.Subscript)
def _index_host_seq(ctx, node: ast.Subscript) -> None:
    # lst[t] where lst is a host sequence and t a tensor calls t.__index__
    if isinstance(node.ctx, ast.Load) and not ctx.scope.is_tensor(node.value) and ctx.is_host_sequence(node.value) \
            and ctx.scope.is_tensor(node.slice):
        ctx.report("GC105", node, call="sequence[tensor]")
