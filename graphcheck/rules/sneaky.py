"""GC7xx — sneaky syncs: Python builtins and helpers that read tensors without saying so."""
from __future__ import annotations

import ast

from ._base import Family, Rule

FAMILY = Family("Sneaky syncs", [
    Rule("GC701", "builtin-over-tensor", "builtin `{call}()` iterates a tensor on the host", "use the torch reduction (`t.sum()`, `t.amax()`, `t.any()`)",
         "Flags the Python builtins `sum`, `min`, `max`, `any`, `all`, `sorted`, `list`, `tuple` applied to a tensor.",
         "The builtin unbinds the tensor into 0-d tensors and combines them in Python; `min`/`max`/`any`/`all`/`sorted` "
         "also compare each element on the host (a readback per element). It is slow eagerly and freezes or fails under capture.",
         "total = sum(expert_out)", "total = expert_out.sum(0)"),
    Rule("GC702", "tensor-iteration", "iterating a tensor in a Python `for` loop", "vectorise over the dimension, or iterate over a host range",
         "Flags `for v in t:` where `t` is a tensor.", "Each iteration slices on the host; the loop count is the tensor's "
         "length, and any use of `v` as a host value reads it back.", "for tok in tokens:\n    emb.append(table[tok])", "emb = table[tokens]"),
    Rule("GC703", "einops-tensor-dim", "`{call}` takes a dimension from a tensor", "pass a host int (a static shape) as the einops axis size",
         "Flags einops `rearrange`/`repeat`/`reduce` calls whose axis-size keywords are tensors.",
         "einops needs the axis size as a Python int, so it reads the tensor back.", "rearrange(x, '(b n) d -> b n d', n=n_t)", "rearrange(x, '(b n) d -> b n d', n=x.shape[0] // b)"),
    Rule("GC704", "readback-in-callee", "`{callee}` reads back from the device ({where})", "move the readback out of the helper, or out of the step",
         "Flags a call in the captured region to a function (in the scanned tree) that itself contains a readback or an "
         "explicit sync, such as a logging or metrics helper.",
         "A `.item()` hidden in a telemetry helper syncs every step, and the capture error points at neither the helper "
         "nor the call.", "self.stats.record(scores)   # record() does scores.max().item()", "self.stats.record_device(scores)   # keeps a device accumulator"),
])
on = FAMILY.on
_BUILTINS = {"sum", "min", "max", "any", "all", "sorted", "list", "tuple"}


@on(ast.Call)
def _calls(ctx, node: ast.Call) -> None:
    f = node.func
    s = ctx.scope
    if isinstance(f, ast.Name) and f.id in _BUILTINS and node.args and s.is_tensor(node.args[0]) and not ctx.is_shadowed(f.id):
        ctx.report("GC701", node, call=f.id)
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    if name in ("rearrange", "repeat", "reduce", "pack", "unpack") and ctx.from_einops(f) and any(
            s.is_tensor(k.value) for k in node.keywords):
        ctx.report("GC703", node, call=f"einops.{name}")


@on(ast.For)
def _for(ctx, node: ast.For) -> None:
    if ctx.scope.is_tensor(node.iter):
        ctx.report("GC702", node.iter)
