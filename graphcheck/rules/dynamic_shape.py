"""GC3xx — data-dependent shapes: the output size depends on tensor values."""
from __future__ import annotations

import ast

from ._base import Family, Rule

_WHY = ("The output's size is known only after the kernel has run, so the host must read the count back (a "
        "sync) before it can allocate. A CUDA graph records fixed sizes: capture fails, or replay reuses the size "
        "seen at capture time.")
_SIZED = {"zeros", "ones", "empty", "full", "arange", "randn", "rand", "randint", "eye", "linspace"}
_SIZE_METHODS = {"view", "reshape", "expand", "repeat", "narrow", "new_zeros", "new_ones", "new_empty", "new_full",
                 "unflatten", "resize_"}

FAMILY = Family("Data-dependent shapes", [
    Rule("GC301", "nonzero", "`{call}` returns a data-dependent number of indices", "use a fixed-size mask, or `nonzero_static(size=...)`",
         "Flags `torch.nonzero`, `.nonzero()` and `torch.argwhere`.", _WHY,
         "idx = mask.nonzero()", "idx = torch.nonzero_static(mask.flatten(), size=max_n, fill_value=-1)"),
    Rule("GC302", "where-one-arg", "one-argument `torch.where` returns data-dependent indices", "use three-argument `torch.where(cond, a, b)`",
         "Flags `torch.where(cond)` with a single argument (it is `nonzero` in disguise).", _WHY,
         "rows, cols = torch.where(mask)", "out = torch.where(mask, x, 0)"),
    Rule("GC303", "unique", "`{call}` has a data-dependent output size", "use a fixed-size one-hot or scatter over the known value range",
         "Flags `torch.unique`, `.unique()` and `unique_consecutive`.", _WHY,
         "experts = topk_idx.unique()", "hit = torch.zeros(n_experts, dtype=torch.bool, device=d).scatter_(0, topk_idx.flatten(), True)"),
    Rule("GC304", "bincount", "`{call}` sizes its output from the data", "use `scatter_add_` into a buffer of known size",
         "Flags `torch.bincount` and `.bincount()` (its length is `max(x) + 1` unless `minlength` alone decides, and it reads the max back).",
         _WHY, "counts = torch.bincount(idx, minlength=E)", "counts = torch.zeros(E, dtype=torch.long, device=d).scatter_add_(0, idx, torch.ones_like(idx))"),
    Rule("GC305", "boolean-mask-index", "boolean-mask indexing `x[mask]` has a data-dependent size", "use `torch.where(mask, x, fill)` or `masked_fill`",
         "Flags reading `x[mask]` where `mask` is a boolean tensor (a comparison, `isnan`, `~m`, `m & n`).", _WHY,
         "kept = scores[scores > thr]", "kept = scores.masked_fill(scores <= thr, float('-inf'))"),
    Rule("GC306", "masked-select", "`masked_select` has a data-dependent output size", "use `torch.where` / `masked_fill` at full size",
         "Flags `torch.masked_select` and `.masked_select()`.", _WHY, "v = x.masked_select(m)", "v = x.masked_fill(~m, 0)"),
    Rule("GC307", "repeat-interleave-tensor", "`repeat_interleave` with tensor repeats and no `output_size`", "pass `output_size=` (a host int bound)",
         "Flags `repeat_interleave` whose repeats are a tensor and that does not pass `output_size`.", _WHY,
         "rows = torch.repeat_interleave(ids, counts)", "rows = torch.repeat_interleave(ids, counts, output_size=max_rows)"),
    Rule("GC308", "tensor-sized", "a tensor used as a size or slice bound in `{call}`", "size buffers by a host-known bound and mask the tail",
         "Flags slices bounded by a tensor (`x[:n]`) and creation/reshape ops sized by a tensor (`torch.arange(n)`, `x.view(n, -1)`).",
         _WHY + " A 0-d tensor used as a size is read back with `_local_scalar_dense` first.",
         "k = kv_cache[:, :seq_len_t]", "k = kv_cache                   # full capacity\nvalid = torch.arange(cap, device=d) < seq_len_t"),
])
on = FAMILY.on


@on(ast.Call)
def _calls(ctx, node: ast.Call) -> None:
    s = ctx.scope
    f = node.func
    tname = s.is_torch_call(f)
    last = tname.split(".")[-1] if tname else (f.attr if isinstance(f, ast.Attribute) else "")
    method = isinstance(f, ast.Attribute) and not tname
    if not last:
        return
    if last in ("nonzero", "argwhere") and (tname or not node.args):
        ctx.report("GC301", node, call=f"torch.{last}" if tname else ".nonzero()")
    elif last == "where" and tname and len(node.args) == 1 and not node.keywords:
        ctx.report("GC302", node)
    elif last in ("unique", "unique_consecutive") and (tname or s.is_tensor(f.value)):
        ctx.report("GC303", node, call=f"torch.{last}" if tname else f".{last}()")
    elif last == "bincount" and (tname or s.is_tensor(f.value)):
        ctx.report("GC304", node, call="torch.bincount" if tname else ".bincount()")
    elif last == "masked_select":
        ctx.report("GC306", node)
    elif last == "repeat_interleave" and not any(k.arg == "output_size" for k in node.keywords):
        reps = [k.value for k in node.keywords if k.arg == "repeats"]
        reps += node.args[1:2] if tname else node.args[:1]
        if reps and s.is_tensor(reps[0]):
            ctx.report("GC307", node)
    elif (tname and last in _SIZED and any(s.is_tensor(a) for a in node.args)) or (
            method and last in _SIZE_METHODS and s.is_tensor(f.value) and any(s.is_tensor(a) for a in node.args)):
        ctx.report("GC308", node, call=f"torch.{last}" if tname else f".{last}()")


@on(ast.Subscript)
def _subscript(ctx, node: ast.Subscript) -> None:
    s = ctx.scope
    if not s.is_tensor(node.value):
        return
    parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    if isinstance(node.ctx, ast.Load) and any(s.is_bool_tensor(p) for p in parts):
        ctx.report("GC305", node)
    for p in parts:
        if isinstance(p, ast.Slice) and any(s.is_tensor(b) for b in (p.lower, p.upper, p.step)):
            ctx.report("GC308", node, call="x[a:b]")
            break
