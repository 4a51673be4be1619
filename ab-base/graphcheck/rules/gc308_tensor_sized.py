"""GC308 tensor-sized — Flags slices bounded by a tensor (`x[:n]`) and creation/reshape ops sized by a tensor (`torch.arange(n)`, `x.view(n, -1)`)."""
from __future__ import annotations

import ast

from ._base import Rule, on
from ..static.inference import TENSORS, symbolic

RULE = Rule(
    code='GC308',
    name='tensor-sized',
    message='a tensor used as a size or slice bound in `{call}`',
    hint='size buffers by a host-known bound and mask the tail',
    what='Flags slices bounded by a tensor (`x[:n]`) and creation/reshape ops sized by a tensor (`torch.arange(n)`, `x.view(n, -1)`).',
    why="The output's size is known only after the kernel has run, so the host must read the count back (a sync) before it can allocate. A CUDA graph records fixed sizes: capture fails, or replay reuses the size seen at capture time. A 0-d tensor used as a size is read back with `_local_scalar_dense` first.",
    example='k = kv_cache[:, :seq_len_t]',
    instead='k = kv_cache                   # full capacity\nvalid = torch.arange(cap, device=d) < seq_len_t',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code.
RUNTIME: tuple[str, ...] = ()


_SIZED = {"zeros", "ones", "empty", "full", "arange", "randn", "rand", "randint", "eye", "linspace"}
_SIZE_METHODS = {"view", "reshape", "expand", "repeat", "narrow", "new_zeros", "new_ones", "new_empty", "new_full",
                 "unflatten", "resize_"}


@on(ast.Call, names=(*_SIZED, *_SIZE_METHODS, "topk", "kthvalue"))
def check_call(ctx, node: ast.Call) -> None:
    t = ctx.torch(node)
    m = ctx.method(node)
    if t in _SIZED and ctx.any_dev(node.args):
        ctx.report(RULE.code, node, call=f"torch.{t}")
    elif t in ("topk", "kthvalue") and len(node.args) > 1 and ctx.dev(node.args[1]):
        ctx.report(RULE.code, node, call=f"torch.{t}")
    elif m in ("topk", "kthvalue") and node.args and not _module_call(ctx, node) and ctx.dev(node.args[0]):
        ctx.report(RULE.code, node, call=f".{m}()")
    elif m in _SIZE_METHODS and ctx.any_dev(node.args) and ctx.sliced_tensor(node.func.value):
        ctx.report(RULE.code, node, call=f".{m}()")


def _module_call(ctx, node: ast.Call) -> bool:
    """`self.topk(hidden, logits)`, `moe.topk(hidden, logits)`: a method or submodule of that name, not
    Tensor.topk(k, dim): its receiver is the object itself, or a receiver not known to be a tensor gets a tensor
    where Tensor.topk takes the dimension. A tensor receiver is Tensor.topk, whatever the second argument (a `dim`
    parameter's kind is only known at the call site)."""
    recv = node.func.value
    if isinstance(recv, ast.Name) and recv.id in ("self", "cls"):
        return True
    if ctx.kind(recv) in TENSORS or len(node.args) < 2:      # known to be a tensor (not merely maybe)
        return False
    k = ctx.kind(node.args[1])          # a tensor, or a value that follows the caller's (the hidden/logits pair)
    return k in TENSORS or symbolic(k)


@on(ast.Subscript)
def check_slice(ctx, node: ast.Subscript) -> None:
    parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    for p in parts:
        if isinstance(p, ast.Slice) and ctx.any_dev(b for b in (p.lower, p.upper, p.step) if b is not None) \
                and ctx.sliced_tensor(node.value):
            ctx.report(RULE.code, node, call="x[a:b]")
            return
