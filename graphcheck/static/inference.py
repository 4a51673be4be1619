"""A small, local "is this a tensor?" inference.

Flow-insensitive per function: a name is a tensor if it is a tensor-annotated parameter, or assigned from a
torch call, a tensor method, arithmetic on a tensor, or indexing a tensor. Class attributes are tensors when
any method of the class assigns them such a value, wraps them in ``nn.Parameter`` or registers them as a
buffer. Host values derived from tensors (``.shape``, ``.size()``, ``.numel()``, ``.dim()``, ``len(t)``)
are never tensors, so branching on them is never flagged.
"""
from __future__ import annotations

import ast

# torch.* callables that return something other than a tensor.
TORCH_NON_TENSOR = {
    "is_tensor", "is_floating_point", "is_complex", "numel", "device", "dtype", "Size", "get_default_dtype",
    "is_grad_enabled", "no_grad", "inference_mode", "enable_grad", "manual_seed", "seed", "set_grad_enabled",
    "finfo", "iinfo", "get_device", "is_nonzero", "Generator", "typename", "compile", "jit", "set_printoptions",
    "use_deterministic_algorithms", "are_deterministic_algorithms_enabled", "autocast", "broadcast_shapes",
    "is_inference_mode_enabled", "result_type", "promote_types", "can_cast", "load", "save", "from_file",
}
TORCH_NON_TENSOR_MODULES = {"cuda", "backends", "distributed", "utils", "jit", "fx", "library", "profiler",
                            "accelerator", "cpu", "mps", "overrides", "testing", "hub", "onnx", "export",
                            "compiler", "_dynamo", "_C", "nn", "optim", "autograd", "version", "types"}
# Tensor methods / attributes whose result lives on the host.
HOST_METHODS = {"item", "tolist", "numpy", "size", "dim", "ndimension", "numel", "nelement", "element_size",
                "data_ptr", "stride", "storage_offset", "is_contiguous", "is_floating_point", "is_complex",
                "get_device", "untyped_storage", "__len__", "equal", "allclose", "is_pinned", "is_shared",
                "register_hook", "backward", "type", "is_set_to", "has_names", "nbytes", "itemsize", "dim_order",
                "element_size", "is_nonzero"}
HOST_ATTRS = {"shape", "dtype", "device", "ndim", "layout", "is_cuda", "is_cpu", "is_sparse", "requires_grad",
              "names", "itemsize", "nbytes", "is_leaf", "is_quantized", "is_meta", "grad_fn"}
TENSOR_ATTRS = {"T", "mT", "H", "mH", "data", "grad", "real", "imag"}
# Methods that, called on a tensor, give a tensor (everything not host-valued and not a known non-tensor).
NON_TENSOR_METHODS = HOST_METHODS | {"chunk", "split", "unbind", "tensor_split", "hsplit", "vsplit", "max_pool"}
BOOL_PRODUCERS = {"isnan", "isinf", "isfinite", "isneginf", "isposinf", "logical_and", "logical_or", "logical_not",
                  "logical_xor", "eq", "ne", "gt", "lt", "ge", "le", "greater", "less", "isin", "isclose", "bool",
                  "signbit", "greater_equal", "less_equal", "not_equal"}
TENSOR_ANNOTATIONS = {"Tensor", "torch.Tensor", "FloatTensor", "LongTensor", "BoolTensor", "nn.Parameter",
                      "Parameter", "torch.nn.Parameter"}
MODULE_ALIASES_TORCH = {"torch"}
FUNCTIONAL_ALIASES = {"F", "functional"}


def dotted(node: ast.AST) -> str:
    """'torch.cuda.synchronize' for an attribute chain, '' if it is not a plain chain."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


class TensorScope:
    """Tensor-valued names of one function, plus the enclosing class's tensor attributes."""

    def __init__(self, tensor_names: set[str], bool_names: set[str], self_attrs: set[str],
                 self_bool_attrs: set[str], torch_names: set[str], pinned: set[str]):
        self.names = tensor_names
        self.bool_names = bool_names
        self.self_attrs = self_attrs
        self.self_bool_attrs = self_bool_attrs
        self.torch_names = torch_names    # local aliases of torch / torch.nn.functional
        self.pinned = pinned
        self.module_attrs: set[str] = set()   # self.X holding a constructed module/object: self.X(...) returns tensors

    # -- queries ------------------------------------------------------------------------------------
    def is_torch_call(self, func: ast.AST) -> str:
        """Return the torch function name ('zeros', 'nn.functional.relu') if func is a torch callable."""
        name = dotted(func)
        if not name:
            return ""
        head, _, rest = name.partition(".")
        if head in self.torch_names and rest:
            return rest
        return ""

    def is_tensor(self, node: ast.AST | None) -> bool:
        if node is None:
            return False
        if isinstance(node, ast.Name):
            return node.id in self.names
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                return node.attr in self.self_attrs
            if node.attr in HOST_ATTRS:
                return False
            if node.attr in TENSOR_ATTRS:
                return self.is_tensor(node.value)
            return False
        if isinstance(node, ast.Subscript):
            return self.is_tensor(node.value)
        if isinstance(node, ast.BinOp):
            return self.is_tensor(node.left) or self.is_tensor(node.right)
        if isinstance(node, ast.UnaryOp):
            return not isinstance(node.op, ast.Not) and self.is_tensor(node.operand)
        if isinstance(node, ast.Compare):
            return any(self.is_tensor(x) for x in [node.left, *node.comparators]) and not any(
                isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in node.ops)
        if isinstance(node, ast.Call):
            return self._call_is_tensor(node)
        if isinstance(node, ast.IfExp):
            return self.is_tensor(node.body) and self.is_tensor(node.orelse)
        return False

    def _call_is_tensor(self, node: ast.Call) -> bool:
        tname = self.is_torch_call(node.func)
        if tname:
            first = tname.split(".")[0]
            if first in TORCH_NON_TENSOR_MODULES and not tname.startswith("nn.functional."):
                return False
            last = tname.split(".")[-1]
            if last in TORCH_NON_TENSOR or last in {"chunk", "split", "unbind", "topk", "sort", "max", "min",
                                                    "median", "mode", "kthvalue", "aminmax", "std_mean",
                                                    "var_mean", "tensor_split", "meshgrid", "broadcast_tensors"}:
                # tuple-returning ops are tensors once unpacked/indexed, handled by the assignment pass
                return last in {"max", "min"} and len(node.args) == 1 and not node.keywords
            return True
        if isinstance(node.func, ast.Attribute):
            m = node.func.attr
            if isinstance(node.func.value, ast.Name) and node.func.value.id == "self" and m in self.module_attrs:
                return True
            if m in NON_TENSOR_METHODS or m in {"topk", "sort", "max", "min", "median", "mode", "aminmax"}:
                return m in {"max", "min"} and not node.args and not node.keywords and self.is_tensor(node.func.value)
            return self.is_tensor(node.func.value)
        return False

    def is_bool_tensor(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.bool_names
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            return node.attr in self.self_bool_attrs
        if isinstance(node, ast.Compare):
            return self.is_tensor(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
            return self.is_bool_tensor(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
            return self.is_bool_tensor(node.left) or self.is_bool_tensor(node.right)
        if isinstance(node, ast.Call):
            tname = self.is_torch_call(node.func)
            if tname and tname.split(".")[-1] in BOOL_PRODUCERS:
                return True
            if isinstance(node.func, ast.Attribute) and node.func.attr in BOOL_PRODUCERS and self.is_tensor(node.func.value):
                return True
        return False


def annotation_is_tensor(ann: ast.AST | None) -> bool:
    if ann is None:
        return False
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        return ann.value in TENSOR_ANNOTATIONS
    if isinstance(ann, ast.BinOp):  # Tensor | None
        return annotation_is_tensor(ann.left) or annotation_is_tensor(ann.right)
    if isinstance(ann, ast.Subscript) and dotted(ann.value) in {"Optional", "typing.Optional"}:
        return annotation_is_tensor(ann.slice)
    return dotted(ann) in TENSOR_ANNOTATIONS


def _targets(t: ast.AST):
    if isinstance(t, (ast.Tuple, ast.List)):
        for e in t.elts:
            yield from _targets(e)
    elif isinstance(t, ast.Starred):
        yield from _targets(t.value)
    else:
        yield t


def _tuple_of_tensors(scope: TensorScope, value: ast.AST) -> bool:
    """Calls that return a tuple of tensors: unpacking them binds tensors."""
    if not isinstance(value, ast.Call):
        return False
    tname = scope.is_torch_call(value.func)
    method = value.func.attr if isinstance(value.func, ast.Attribute) else ""
    tuple_ops = {"chunk", "split", "unbind", "topk", "sort", "max", "min", "median", "mode", "kthvalue",
                 "aminmax", "std_mean", "var_mean", "tensor_split", "meshgrid", "broadcast_tensors"}
    if tname and tname.split(".")[-1] in tuple_ops:
        return True
    return bool(method in tuple_ops and scope.is_tensor(value.func.value))


_BINDERS = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.NamedExpr)


def infer_function(fn: ast.AST, nodes: list[ast.AST], self_attrs: set[str], self_bool_attrs: set[str],
                   torch_names: set[str], module_attrs: set[str] | None = None) -> TensorScope:
    """Tensor names of one function; ``nodes`` are the function's own nodes, collected by the engine."""
    scope = TensorScope(set(), set(), self_attrs, self_bool_attrs, torch_names, set())
    scope.module_attrs = module_attrs or set()
    args = getattr(fn, "args", None)
    if args is not None:
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if a is not None and annotation_is_tensor(a.annotation):
                scope.names.add(a.arg)
    body_nodes = [n for n in nodes if isinstance(n, _BINDERS)]
    for _ in range(2):  # two passes settle chains like a = torch.x(); b = a + 1; c = b.view(...)
        for n in body_nodes:
            if isinstance(n, ast.Assign):
                bind(scope, n.targets, n.value)
            elif isinstance(n, ast.AnnAssign):
                if annotation_is_tensor(n.annotation) and isinstance(n.target, ast.Name):
                    scope.names.add(n.target.id)
                if n.value is not None:
                    bind(scope, [n.target], n.value)
            elif isinstance(n, ast.NamedExpr):
                bind(scope, [n.target], n.value)
            elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and scope.is_tensor(n.value):
                scope.names.add(n.target.id)
            elif isinstance(n, ast.For) and scope.is_tensor(n.iter):
                for t in _targets(n.target):  # iterating a tensor yields tensors
                    if isinstance(t, ast.Name):
                        scope.names.add(t.id)
    return scope


def bind(scope: TensorScope, targets: list[ast.AST], value: ast.AST) -> None:
    multi = _tuple_of_tensors(scope, value)
    for tgt in targets:
        for t in _targets(tgt):
            if not isinstance(t, ast.Name):
                continue
            if multi and isinstance(tgt, (ast.Tuple, ast.List)):
                scope.names.add(t.id)
            elif scope.is_tensor(value):
                scope.names.add(t.id)
                if scope.is_bool_tensor(value):
                    scope.bool_names.add(t.id)
            elif isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "pin_memory":
                scope.names.add(t.id)
                scope.pinned.add(t.id)
        if isinstance(value, ast.Call) and any(
                isinstance(k.value, ast.Constant) and k.arg == "pin_memory" and k.value.value is True
                for k in value.keywords):
            for t in _targets(tgt):
                if isinstance(t, ast.Name):
                    scope.pinned.add(t.id)


def class_tensor_attrs(methods: list[tuple[ast.AST, list[ast.AST]]], torch_names: set[str]) -> tuple[set[str], set[str], set[str]]:
    """self.X attributes that hold tensors (assigned a tensor, a Parameter, or registered as a buffer), their
    boolean subset, and the attributes holding constructed modules (`self.gate = nn.Linear(...)`)."""
    attrs: set[str] = set()
    bools: set[str] = set()
    modules: set[str] = set()
    for fn, nodes in methods:
        local = infer_function(fn, nodes, attrs, bools, torch_names)
        for n in nodes:
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "register_buffer" \
                    and n.args and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str):
                attrs.add(n.args[0].value)
            targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
            value = getattr(n, "value", None)
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" and value is not None:
                    if local.is_tensor(value) or "Parameter" in dotted(getattr(value, "func", ast.Pass())) or (
                            isinstance(n, ast.AnnAssign) and annotation_is_tensor(n.annotation)):
                        attrs.add(t.attr)
                        if local.is_bool_tensor(value):
                            bools.add(t.attr)
                    elif isinstance(value, ast.Call) and dotted(value.func).split(".")[-1][:1].isupper():
                        modules.add(t.attr)
    return attrs, bools, modules - attrs
