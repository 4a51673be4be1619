"""Where each value lives: a small, local device lattice, evaluated per function.

Kinds: ``DEV`` (a tensor on the accelerator), ``TENSOR`` (a tensor whose placement is unknown: treated as likely
on the device), ``HOST`` (a CPU tensor), ``PINNED`` (a pinned CPU tensor), ``NP`` (a NumPy array), ``SEQ`` (a
Python tuple or list of tensors: `x.split(n)`), ``PY`` (a plain Python value) and ``None`` (unknown, not known to
be a tensor). Readback rules fire on ``DEV``/``TENSOR`` (or a symbolic value that resolves to one) only. A value that depends on an un-annotated parameter
or on the result of a call into the scanned tree is *symbolic*: a frozenset of dependencies (``"p:<param>"``,
``"r:<call index>"``) that the cross-file pass (``scope.Program``) resolves through the call graph, in both
directions (arguments at resolved call sites, returns of resolved callees). An attribute read that may be a property
(``self.n``, ``self.cache.length``, not an attribute this class assigns) is ``"g:<call index>"``: what the getter
returns where the scope finds one, unknown otherwise, so it counts as unknown wherever an unknown attribute used to
(``soft``): a concrete kind joined with it wins, and it is no tensor for the checks that stay quiet on tensors.

Tuples: an element of a symbolic value is a dependency of its own, ``"<dep>#<i>"`` (``x, y = f()``, ``f()[1]``,
``a, b = param``): the scope takes element i of what the callee returns where its ``return a, b`` statements show
the elements (``ret_elts``), and the whole value where they do not (unpacking a tensor yields tensors). A callee's
own elements are kept with ``"<dep>@<i>"``: element i as tuple returns show it, nothing otherwise, so a path that
returns a tensor does not lend its kind to the names unpacked from another path's tuple. A local bound to a tuple
literal keeps its elements too (``t = (a, b)``).

A name's kind is the join of everything assigned to it, except where one binding reaches a read (``_Flow``): a
name rebound from a list to a tensor (`ids = [..]; ids = torch.tensor(ids, device=d)`) is a list where the
constructor reads it. Host values derived from
tensors (``.shape``, ``.size()``, ``.numel()``, ``len(t)``) are Python values, so branching on them is never a
hazard. Nothing here imports torch.
"""
from __future__ import annotations

import ast
import functools
import re

from ..placement import DEV, HOST, NP, ON_DEVICE, PINNED, PY, TENSOR, TENSORS  # noqa: F401 (re-exported)
from ..vocab import dotted
from .placement import NO_PLACEMENT, Placement

# the placements are the one vocabulary the runtime layers use too (graphcheck/placement.py); SEQ is the scan's own
# A Python tuple or list of tensors (`x.split(n)`, `torch.unbind(x)`): no tensor itself, so `not parts`,
# `len(parts)` and `for t in parts` read nothing back; its elements are tensors.
SEQ = "seq"
HOST_KINDS = (HOST, PINNED, NP, PY, SEQ)     # known not to be a device tensor
# torch functions / tensor methods that return a Python tuple or list of tensors (views, no readback)
SPLITS = frozenset({"split", "tensor_split", "chunk", "unbind", "hsplit", "vsplit", "dsplit", "split_with_sizes",
                    "unsafe_split", "unsafe_chunk", "meshgrid", "broadcast_tensors", "atleast_1d", "atleast_2d"})

# torch.* callables that return something other than a tensor.
TORCH_NON_TENSOR = {
    "is_tensor", "is_floating_point", "is_complex", "numel", "device", "dtype", "Size", "get_default_dtype",
    "is_grad_enabled", "no_grad", "inference_mode", "enable_grad", "manual_seed", "seed", "set_grad_enabled",
    "finfo", "iinfo", "get_device", "is_nonzero", "Generator", "typename", "compile", "jit", "set_printoptions",
    "use_deterministic_algorithms", "are_deterministic_algorithms_enabled", "autocast", "broadcast_shapes",
    "is_inference_mode_enabled", "result_type", "promote_types", "can_cast", "load", "save", "from_file", "equal",
    "allclose", "is_same_size", "get_rng_state", "set_default_device", "set_default_dtype",
}
TORCH_NON_TENSOR_MODULES = {"cuda", "backends", "distributed", "utils", "jit", "fx", "library", "profiler",
                            "accelerator", "cpu", "mps", "overrides", "testing", "hub", "onnx", "export", "xpu",
                            "compiler", "_dynamo", "_C", "nn", "optim", "autograd", "version", "types", "ops", "_ops"}
FACTORIES = {"zeros", "ones", "empty", "full", "arange", "range", "linspace", "logspace", "eye", "rand", "randn",
             "randint", "randperm", "tensor", "as_tensor", "empty_strided", "scalar_tensor", "LongTensor",
             "FloatTensor", "IntTensor", "BoolTensor", "HalfTensor", "BFloat16Tensor", "DoubleTensor", "ByteTensor"}
_FROM_HOST_DATA = {"tensor", "as_tensor", "LongTensor", "FloatTensor", "IntTensor", "BoolTensor", "HalfTensor",
                   "BFloat16Tensor", "DoubleTensor", "ByteTensor", "scalar_tensor"}
LIKE = {"zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like"}
# Tensor methods / attributes whose result lives on the host.
HOST_METHODS = {"item", "tolist", "size", "dim", "ndimension", "numel", "nelement", "element_size",
                "data_ptr", "stride", "storage_offset", "is_contiguous", "is_floating_point", "is_complex",
                "get_device", "untyped_storage", "__len__", "equal", "allclose", "is_pinned", "is_shared",
                "register_hook", "backward", "type", "is_set_to", "has_names", "dim_order", "is_nonzero",
                "keys", "items", "values", "get", "startswith", "endswith", "join", "split", "format", "count",
                "index", "append", "extend", "pop", "insert", "copy", "update", "setdefault", "strip"}
TENSOR_METHOD_ONLY_HOST = {"item", "tolist", "size", "dim", "numel", "element_size", "data_ptr", "stride",
                           "is_contiguous", "is_floating_point", "get_device", "equal", "allclose", "is_pinned",
                           # metadata: host ints, and the storage object (whose data_ptr()/nbytes() are host ints)
                           "storage_offset", "ndimension", "nelement", "untyped_storage", "dim_order", "is_shared"}
HOST_ATTRS = {"shape", "dtype", "device", "ndim", "layout", "is_cuda", "is_cpu", "is_sparse", "requires_grad",
              "names", "itemsize", "nbytes", "is_leaf", "is_quantized", "is_meta", "grad_fn", "size"}
TENSOR_ATTRS = {"T", "mT", "H", "mH", "data", "grad", "real", "imag", "values", "indices"}
BOOL_PRODUCERS = {"isnan", "isinf", "isfinite", "isneginf", "isposinf", "logical_and", "logical_or", "logical_not",
                  "logical_xor", "eq", "ne", "gt", "lt", "ge", "le", "greater", "less", "isin", "isclose", "bool",
                  "signbit", "greater_equal", "less_equal", "not_equal"}
TENSOR_ANNOTATIONS = {"Tensor", "torch.Tensor", "FloatTensor", "LongTensor", "BoolTensor", "nn.Parameter",
                      "Parameter", "torch.nn.Parameter", "torch.FloatTensor", "torch.LongTensor", "torch.BoolTensor"}
NP_ANNOTATIONS = {"np.ndarray", "numpy.ndarray", "ndarray", "npt.NDArray", "NDArray"}
PY_ANNOTATIONS = {"int", "float", "bool", "str", "list", "tuple", "dict", "set", "List", "Tuple", "Dict", "Set",
                  "Sequence", "Iterable", "bytes", "torch.dtype", "dtype", "torch.device", "device", "Optional[int]",
                  "typing.List", "typing.Dict", "typing.Tuple"}
_PY_BUILTINS = {"int", "float", "bool", "str", "len", "repr", "isinstance", "hasattr", "getattr", "id", "hash",
                "round", "abs", "divmod", "range", "enumerate", "zip", "list", "tuple", "dict", "set", "sorted",
                "frozenset", "type", "format", "ord", "chr", "callable"}


@functools.lru_cache(maxsize=1 << 14)
def name_hint(name: str) -> str | None:
    """What a name says about where it lives: serving engines name their host shadows `*_cpu`, `*_np`, `*_host`.
    Cached: asked for every binding and `self.` attribute, mostly of the same few thousand names."""
    low = name.lower()
    if low.endswith(("_np", "_numpy")) or low.startswith(("np_", "numpy_")):
        return NP
    if "pinned" in low:
        return PINNED
    if "cpu" in low or low.endswith("_host") or low.startswith("host_"):
        return HOST
    return None




def soft(k) -> bool:
    """Only attribute reads that may be properties (`g:`): unknown unless the scope finds a getter, so a concrete
    kind joined with one keeps its own, and the checks that took an unknown attribute for a non-tensor still do."""
    return type(k) is frozenset and all(d[0] == "g" for d in k)


def symbolic(k) -> bool:
    """A symbolic value that follows a parameter or a call, so it may be a tensor: not only attribute reads that may
    be properties (`soft`), which count as the unknown attribute they were."""
    return isinstance(k, frozenset) and not soft(k)


def join(a, b):
    """Least upper bound: the device wins (a value that is sometimes on the device can sync), symbols are kept."""
    if a == b or b is None:
        return a
    if a is None:
        return b
    if isinstance(a, frozenset) or isinstance(b, frozenset):
        if a in ON_DEVICE or b in ON_DEVICE:
            return a if a in ON_DEVICE else b
        if type(a) is str and soft(b):
            return a
        if type(b) is str and soft(a):
            return b
        sa = a if isinstance(a, frozenset) else frozenset()
        sb = b if isinstance(b, frozenset) else frozenset()
        return sa | sb
    if a in ON_DEVICE or b in ON_DEVICE:
        return DEV if a == DEV and b == DEV else TENSOR
    for k in (HOST, PINNED, NP, SEQ, PY):
        if k in (a, b):
            return HOST if k == PINNED and HOST in (a, b) else k
    return a


@functools.lru_cache(maxsize=4096)
def _string_annotation(text: str):
    try:
        return annotation_kind(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def annotation_kind(ann: ast.AST | None):
    if ann is None:
        return None
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        return _string_annotation(ann.value) if len(ann.value) < 200 else None
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):   # X | None; a `dtype | Tensor` union is not a tensor
        kinds = {annotation_kind(x) for x in (ann.left, ann.right)} - {"none"}
        return kinds.pop() if len(kinds) == 1 else None
    if isinstance(ann, ast.Constant) and ann.value is None:
        return "none"
    if isinstance(ann, ast.Subscript):
        head = dotted(ann.value)
        if head in ("Optional", "typing.Optional"):
            return annotation_kind(ann.slice)
        if head in ("Union", "typing.Union") and isinstance(ann.slice, ast.Tuple):
            kinds = {annotation_kind(x) for x in ann.slice.elts} - {"none"}
            return kinds.pop() if len(kinds) == 1 else None
        return PY if head.split(".")[-1] in PY_ANNOTATIONS else NP if head in NP_ANNOTATIONS else None
    d = dotted(ann)
    if d in TENSOR_ANNOTATIONS:
        return TENSOR
    if d in NP_ANNOTATIONS:
        return NP
    if d in PY_ANNOTATIONS:
        return PY
    return None


_NOT_CLASSES = frozenset({"None", "int", "float", "str", "bool", "bytes", "list", "dict", "tuple", "set", "object",
                          "Any"})


def annotation_classes(a: ast.AST | None) -> list[str]:
    """The classes an annotation names (`Cls`, `mod.Cls`, `"Cls"`, `Cls | None`, `Optional[Cls]`,
    `Union[A, B]`) as `ann:` scope entries: an attribute typed so holds an instance of one of them, or of a
    subclass (the scope resolves a name only where it is a class of the scanned tree)."""
    if isinstance(a, ast.Constant) and isinstance(a.value, str):
        try:
            a = ast.parse(a.value, mode="eval").body
        except SyntaxError:
            return []
    if isinstance(a, ast.BinOp) and isinstance(a.op, ast.BitOr):
        return annotation_classes(a.left) + annotation_classes(a.right)
    if isinstance(a, ast.Subscript) and dotted(a.value).split(".")[-1] in ("Optional", "Union"):
        elts = a.slice.elts if isinstance(a.slice, ast.Tuple) else [a.slice]
        return [x for e in elts for x in annotation_classes(e)]
    name = dotted(a) if isinstance(a, (ast.Name, ast.Attribute)) else ""
    return [f"ann:{name}"] if name and name.split(".")[-1] not in _NOT_CLASSES else []


# fields that hold no node a walk here looks at: plain strings and numbers, and the expression contexts and
# operators (shared singleton nodes with no children; no walk here asks for Load, Store, Add or Eq)
_NO_CHILD = frozenset({"ctx", "op", "ops", "id", "attr", "arg", "asname", "name", "level", "module", "conversion",
                       "kind", "type_comment", "type_ignores", "is_async", "lineno", "simple", "tag", "n", "s"})
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def children(node: ast.AST) -> list[ast.AST]:
    """`ast.iter_child_nodes` in the same order, less the contexts and operators, as a list: the generic walks of
    the engine and the inference (`_Walks`: the flow's bound names and reads; a def's own bindings) take a quarter
    of their time in the standard one's generator of (name, value) pairs."""
    t = type(node)
    names = _CHILD_FIELDS.get(t)
    if names is None:
        names = _CHILD_FIELDS[t] = tuple(f for f in t._fields if f not in _NO_CHILD)
    out = []
    for name in names:
        v = getattr(node, name, None)
        if type(v) is list:
            out += [c for c in v if isinstance(c, ast.AST)]
        elif isinstance(v, ast.AST):
            out.append(v)
    return out


def unpack_targets(t: ast.AST):
    """The single targets an assignment target unpacks into (`a, (b, *c) = ...` -> a, b, c)."""
    if isinstance(t, (ast.Tuple, ast.List)):
        for e in t.elts:
            yield from unpack_targets(e)
    elif isinstance(t, ast.Starred):
        yield from unpack_targets(t.value)
    else:
        yield t


def element(k, i: int, strict: bool = False):
    """Element i of a value of kind k (tuple unpacking, a constant index). A symbolic value's element is a dependency
    of its own (``p:x#0``, ``r:3#1``), resolved by the scope from the tuples the callee returns; a concrete kind, or a
    dependency that is already an element or a class field, is the value's own kind (unpacking a tensor gives tensors).
    ``strict`` (``@``): only what tuple returns show; a dependency that cannot say is dropped, a concrete kind is
    unknown."""
    if not isinstance(k, frozenset):
        return None if strict else TENSOR if k == SEQ else k
    sep = "@" if strict else "#"
    out = frozenset(f"{d}{sep}{i}" if _plain(d) else d for d in k if not strict or _plain(d))
    return out or None


def _plain(dep: str) -> bool:
    """A parameter or a call's return, not yet an element of one (elements of elements are not followed)."""
    return dep[:2] in ("p:", "r:", "R:", "g:") and "#" not in dep and "@" not in dep


def const_index(node: ast.AST) -> int | None:
    """The value of a constant integer index (`0`, `-1`), else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        v = node.operand.value
        return -v if isinstance(v, int) and not isinstance(v, bool) else None
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def tuple_positions(elts: list[ast.AST]) -> list[int | None]:
    """Each unpacking target's index into the value: from the front before a `*rest`, from the back after it, None
    for the starred one (it takes a list of the middle)."""
    star = next((j for j, e in enumerate(elts) if isinstance(e, ast.Starred)), None)
    if star is None:
        return list(range(len(elts)))
    return [j if j < star else None if j == star else j - len(elts) for j in range(len(elts))]


class Env:
    """The kinds of one function's names, plus what it sees from its class and module.

    ``qual`` resolves a callable expression to its qualified name through the file's imports and aliases
    (``from torch import nonzero`` -> ``torch.nonzero``; ``sync = torch.cuda.synchronize`` -> ``torch.cuda.synchronize``).
    ``call_index`` maps a Call node (by id) to its index in the function's call list, for symbolic returns.
    """

    def __init__(self, imports: dict, aliases: dict[str, str], module_kinds: dict, attr_kinds: dict,
                 module_attrs: set[str], call_index: dict[int, int], placement: Placement = NO_PLACEMENT,
                 cls: str | None = None):
        # None when nothing is declared: `if self.placement` on every attribute read is then no method call
        self.placement = placement if placement else None
        self.cls = cls                      # the class whose method this is (for `Class.ATTR` declarations)
        self.imports = imports
        self.aliases = aliases              # this function's and the module's `name = dotted.path` bindings
        self.module_kinds = module_kinds
        self.attr_kinds = attr_kinds        # self.X -> kind
        self.module_attrs = module_attrs    # self.X holding a constructed module (calling it returns a tensor)
        self.call_index = call_index
        self.module_calls: set[int] = set()
        self.quals: dict[int, str] = {}
        self.names: dict[str, object] = {}
        self.param_classes: dict[str, list[str]] = {}   # parameter -> the classes its annotation names
        self.bools: set[str] = set()
        self.tuples: dict[str, list | None] = {}     # a local bound to tuple literals: its elements' kinds (None:
                                                    # literals of different lengths)
        self.tuple_others: dict[str, frozenset] = {}   # ... and the symbolic kinds of its other bindings
        self.elems: dict[str, object] = {}   # a local list of tensors built here (`xs.append(t)`): their kind
        self.factory_default = TENSOR        # where a factory without a device puts its tensor (set by infer)
        self.with_device: dict[int, object] = {}   # a call inside `with torch.device(d):` -> where d points
        self.default_device_set = False      # the file calls torch.set_default_device
        self.memo: dict[int, object] | None = None
        self.rebound: set[str] = set()   # names bound to values of different kinds (`x = ids; x = torch.tensor(x)`)
        self.first_pass = True           # (a loop's second pass rebinds every name with the join it settled on)
        self.at: dict[int, object] = {}  # a read of such a name (by id) -> the kind of the one binding that reaches it

    # -- names -----------------------------------------------------------------------------------------
    def qual(self, node: ast.AST) -> str:
        hit = self.quals.get(id(node))
        if hit is None:
            hit = self.quals[id(node)] = self._qual(node)
        return hit

    def _qual(self, node: ast.AST) -> str:
        if isinstance(node, ast.Name):
            a = self.aliases.get(node.id)
            if a is not None:
                return a
            imp = self.imports.get(node.id)
            if imp is not None and not imp["level"]:
                return imp["target"]
            return ""
        if isinstance(node, ast.Attribute):
            base = self.qual(node.value)
            return f"{base}.{node.attr}" if base else ""
        return ""

    def torch(self, call: ast.Call) -> str:
        q = self.qual(call.func)
        return q[6:] if q.startswith("torch.") else ""

    # -- kinds -----------------------------------------------------------------------------------------
    def kind(self, node: ast.AST | None):
        if node is None:
            return None
        memo = self.memo
        if memo is not None:
            hit = memo.get(id(node), memo)
            if hit is not memo:
                return hit
            k = memo[id(node)] = self._kind(node)
            return k
        return self._kind(node)

    def _kind(self, node: ast.AST):
        t = type(node)
        if t is ast.Name:
            k = self.at.get(id(node), self)
            if k is not self:
                return k
            if node.id in self.names:
                return self.names[node.id]
            if node.id in self.module_kinds:
                return self.module_kinds[node.id]
            return None
        if t is ast.Constant or t is ast.JoinedStr or t is ast.List or t is ast.Dict or t is ast.Set \
                or t is ast.ListComp or t is ast.DictComp or t is ast.SetComp:
            return PY
        if t is ast.Attribute:
            v = node.value
            if self.placement and self.placement.attr(
                    (self.cls,) if isinstance(v, ast.Name) and v.id == "self" else
                    self.param_classes.get(v.id, ()) if isinstance(v, ast.Name) else (), node.attr):
                return HOST
            if isinstance(v, ast.Name) and v.id == "self":
                k = self.attr_kinds.get(node.attr)
                if k is None:
                    k = name_hint(node.attr)
                return k if k is not None else self._read(node)
            if node.attr in HOST_ATTRS:
                return PY
            if node.attr in TENSOR_ATTRS:
                k = self.kind(v)
                return k if k in TENSORS or isinstance(k, frozenset) else None
            if isinstance(v, ast.Name) and v.id in self.param_classes and v.id not in self.names:
                # a field of a parameter typed by a class (`batch: InputBatch` -> batch.seq_lens): what the class
                # declares it to be, resolved across files by the scope ("a:" dependencies)
                return frozenset(f"a:{c}:{node.attr}" for c in self.param_classes[v.id])
            return self._read(node)
        if t is ast.Subscript:
            i = const_index(node.slice)
            if i is not None:
                elts = self.tuple_elts(node.value)
                if elts is not None:
                    return elts[i] if -len(elts) <= i < len(elts) else None
            k = self.kind(node.value)
            if k == SEQ:
                return SEQ if type(node.slice) is ast.Slice else TENSOR
            if i is not None and isinstance(k, frozenset):
                return element(k, i)       # f(x)[1]: element 1 of what f returns
            # `self.parts[i]`: of what a getter returns (a list, a dict) nothing says the element's kind
            return k if k in TENSORS or k == NP or symbolic(k) else None
        if t is ast.BinOp:
            a, b = self.kind(node.left), self.kind(node.right)
            if isinstance(node.op, ast.Mod) and a == PY:
                return PY      # "%s" % x is a string
            return _arith(a, b)
        if t is ast.UnaryOp:
            return PY if isinstance(node.op, ast.Not) else self.kind(node.operand)
        if t is ast.Compare:
            if any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in node.ops):
                return PY
            if all(type(op) is ast.Eq or type(op) is ast.NotEq for op in node.ops) and \
                    any(self._no_number(c) for c in (node.left, *node.comparators)):
                return PY
            k = self.kind(node.left)
            for c in node.comparators:
                k = _arith(k, self.kind(c))
            return k
        if t is ast.Call:
            return self._call(node)
        if t is ast.IfExp:
            return join(self.kind(node.body), self.kind(node.orelse))
        if t is ast.NamedExpr:
            return self.kind(node.value)
        if t is ast.Starred:
            return self.kind(node.value)
        return None

    def _no_number(self, node: ast.AST) -> bool:
        """A constant no tensor compares with element by element: a string, None, a dtype (`torch.float16`,
        `np.float32`) or a class of an imported module (`cutlass.BFloat16`). `tensor == x` for such an x is
        Python's False (Tensor.__eq__ returns NotImplemented), never a tensor to read back, so `==` / `!=` with one
        is a host bool whatever the other side is (`if dtype == cutlass.BFloat16:` on an unannotated parameter)."""
        if type(node) is ast.Constant:
            return node.value is None or isinstance(node.value, (str, bytes))
        if type(node) is not ast.Attribute:
            return False
        q = self.qual(node)
        if not q:
            return False
        last = node.attr
        if q.startswith(("torch.", "numpy.")) and _DTYPE_NAME.match(last):
            return True
        return last[:1].isupper() and any(ch.islower() for ch in last)

    def _device_arg(self, call: ast.Call, pos: int | None = None):
        """Kind of the tensor a factory or `.to()` makes, from its device/pin_memory arguments; None when absent."""
        pin = next((k.value for k in call.keywords if k.arg == "pin_memory"), None)
        if isinstance(pin, ast.Constant):
            if pin.value:
                return PINNED            # pin_memory=True: on the host (torch refuses to pin anything else)
            pin = None                   # pin_memory=False / 0 / None: pageable, where the device says
        dev = next((k.value for k in call.keywords if k.arg == "device"), None)
        if dev is None and pos is not None and len(call.args) > pos:
            dev = call.args[pos]
        if pin is not None:
            # a flag (`pin_memory=is_pin_memory_available()`): a host tensor, pinned wherever the platform can pin
            # (where it cannot, no copy from it is asynchronous to lose); but torch pins only CPU tensors, so
            # beside a device that is not the host (`device=device, pin_memory=str(device) == "cpu"`) the flag
            # is false whenever the tensor is on the device: the device decides
            d = self.device_value(dev) if dev is not None else None
            return d if d in ON_DEVICE or symbolic(d) else PINNED
        if dev is None:
            return None
        return self.device_value(dev)

    def device_value(self, dev: ast.AST):
        """Where a device expression points: HOST for 'cpu', DEV otherwise (None when it is not a device)."""
        if isinstance(dev, ast.Constant):
            if isinstance(dev.value, str):
                return HOST if dev.value.startswith("cpu") else DEV
            if isinstance(dev.value, int) and not isinstance(dev.value, bool):
                return DEV
            return None
        if isinstance(dev, ast.Call) and self.qual(dev.func) == "torch.device":
            return self.device_value(dev.args[0]) if dev.args else None
        if isinstance(dev, ast.Attribute) and dev.attr == "device":
            k = self.kind(dev.value)
            return HOST if k in (HOST, PINNED) else DEV if k in ON_DEVICE else k if symbolic(k) else DEV
        d = dotted(dev)
        if d:
            if self.qual(dev).startswith("torch.") and not self.qual(dev).startswith("torch.device"):
                return None          # a dtype such as torch.float16
            hint = name_hint(d.split(".")[-1])
            if hint is not None:
                return hint
            low = d.lower()
            return DEV if "dev" in low or "cuda" in low or "gpu" in low else None
        return None

    def _read(self, node: ast.Attribute):
        """An attribute read the scope may find to be a property: what its getter returns (`g:<call index>`,
        nothing when it is a plain attribute)."""
        i = self.call_index.get(id(node))
        return None if i is None else frozenset((f"g:{i}",))

    def _sym_call(self, node: ast.Call):
        i = self.call_index.get(id(node))
        if i is None:
            return None
        # calling a submodule returns a tensor even when its class is outside the tree (nn.Linear): "R:"
        return frozenset((f"R:{i}" if i in self.module_calls else f"r:{i}",))

    def _call(self, node: ast.Call):
        f = node.func
        q = self.qual(f)
        if q:
            if q.startswith("torch."):
                return self._torch_call(node, q[6:])
            if q.startswith("numpy."):
                return NP
            if q.startswith(("math.", "random.", "time.", "os.", "operator.")):
                return PY
            return self._sym_call(node)
        if isinstance(f, ast.Name):
            if f.id in _PY_BUILTINS and f.id not in self.names:
                return PY
            if f.id in ("max", "min", "sum", "abs"):
                ks = [self.kind(a) for a in node.args]
                return PY if ks and all(k == PY for k in ks) else None
            return self._sym_call(node)
        if not isinstance(f, ast.Attribute):
            return None
        m = f.attr
        recv = f.value
        if isinstance(recv, ast.Name) and recv.id == "self":
            if m in self.module_attrs and self.call_index.get(id(node)) is None:
                return TENSOR
            return self._sym_call(node)
        rk = self.kind(recv)
        if m in ("item", "tolist"):
            return PY
        if m == "numpy":
            return NP
        if rk == NP or rk == PY:
            return NP if rk == NP and m not in HOST_METHODS else PY
        if m == "cpu":
            return HOST
        if m == "pin_memory":
            return PINNED
        if m == "cuda":
            return DEV
        if m == "to":
            d = self._device_arg(node, 0)
            if d is None and node.args and not isinstance(node.args[0], ast.Constant):
                other = self.kind(node.args[0])     # .to(other_tensor) takes its device
                if other in TENSORS:
                    d = HOST if other == PINNED else other
            if d is not None:
                return d if rk is not None else (d if d != HOST else HOST)
            return rk if rk is not None else None
        if m in ("new_tensor", "new_zeros", "new_ones", "new_empty", "new_full"):
            d = self._device_arg(node)
            if d is not None:
                return d
            # only a tensor has these methods: one of unknown placement is likely on the device
            return HOST if rk == PINNED else TENSOR if rk is None else rk
        if m in SPLITS and (rk in TENSORS or symbolic(rk) and m != "split"):
            return SEQ          # `s.split(",")` of what may be a string stays what it was
        rsoft = soft(rk)
        if m in TENSOR_METHOD_ONLY_HOST or m in HOST_METHODS and rk not in TENSORS and (
                rsoft or not isinstance(rk, frozenset)):
            return PY
        if rk in TENSORS:
            return rk if rk != PINNED or m.endswith("_") or m in ("view", "reshape", "narrow") else HOST
        if symbolic(rk):
            return rk
        if m == "forward" or m == "__call__":
            k = self._sym_call(node)
        else:
            k = self._sym_call(node) if isinstance(recv, (ast.Name, ast.Attribute)) and \
                self.call_index.get(id(node)) is not None and _looks_resolvable(recv) else None
        # a method of what a getter may return: the method's own return where it resolves, else the getter's value
        return (rk | k if k is not None else rk) if rsoft else k

    def _torch_call(self, node: ast.Call, rest: str):
        first, _, _ = rest.partition(".")
        last = rest.rsplit(".", 1)[-1]
        if first in TORCH_NON_TENSOR_MODULES and not rest.startswith("nn.functional."):
            return PY if first in ("cuda", "accelerator", "backends", "distributed") and last.startswith(("is_", "get_", "device_count")) else None
        if last in TORCH_NON_TENSOR or last[:1].isupper() and last not in FACTORIES or (
                last.startswith(("is_", "get_", "are_", "has_", "set_")) and last != "get_device"):
            return PY       # predicates and getters (torch.is_autocast_enabled(), torch.get_autocast_gpu_dtype())
        if last in FACTORIES:
            d = self._device_arg(node)
            if d is not None:
                return d
            if last in ("tensor", "as_tensor") and node.args:
                k = self.kind(node.args[0])
                if k in TENSORS or symbolic(k):   # an attribute: host data, as before
                    return k
            # host data wrapped without a device stays on the CPU; a buffer without one (`torch.arange(n)`) is
            # where the default device puts it: under `with torch.device(d)` on d, in a constructor (models are
            # built under a device context) or a file that sets a default device unknown, else on the host
            if last in _FROM_HOST_DATA:
                return HOST
            d = self.with_device.get(id(node))
            return d if d is not None else self.factory_default
        if last in LIKE:
            d = self._device_arg(node)
            return d if d is not None else (self.kind(node.args[0]) if node.args else TENSOR)
        if last in ("from_numpy", "frombuffer"):     # always a CPU tensor
            return HOST
        if last in SPLITS:
            return SEQ
        k = None
        for a in [*node.args, *(kw.value for kw in node.keywords)]:
            for e in (a.elts if isinstance(a, (ast.List, ast.Tuple)) else [a]):
                ek = self.kind(e)
                if type(e) is ast.Name and e.id in self.elems and ek not in TENSORS:
                    ek = self.elems[e.id]      # torch.cat(parts): parts' tensors
                if ek in TENSORS or symbolic(ek):
                    k = _arith(k, ek) if k is not None else ek
        return k if k is not None else TENSOR

    def is_bool(self, node: ast.AST) -> bool:
        t = type(node)
        if t is ast.Name:
            return node.id in self.bools
        if t is ast.Compare:
            return not any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in node.ops) and (
                self.kind(node) in TENSORS or isinstance(self.kind(node), frozenset))
        if t is ast.UnaryOp and isinstance(node.op, ast.Invert):
            return self.is_bool(node.operand)
        if t is ast.BinOp and isinstance(node.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
            return self.is_bool(node.left) or self.is_bool(node.right)
        if t is ast.Call:
            tname = self.torch(node)
            if tname and tname.split(".")[-1] in BOOL_PRODUCERS:
                return True
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in BOOL_PRODUCERS and not tname:
                k = self.kind(f.value)
                return k in TENSORS or isinstance(k, frozenset)
        return False

    def tuple_elts(self, node: ast.AST) -> list | None:
        """The elements' kinds of a tuple literal, or of a local bound only to tuple literals of one length."""
        if isinstance(node, ast.Tuple):
            if any(isinstance(e, ast.Starred) for e in node.elts):
                return None
            return [self.kind(e) for e in node.elts]
        if isinstance(node, ast.Name) and node.id in self.tuples:
            elts = self.tuples[node.id]
            other = self.tuple_others.get(node.id)
            if elts is not None and other is not None:     # `t = (a, b)` here, `t = f(x)` there: f's elements too
                elts = [join(k, element(other, i, strict=True)) for i, k in enumerate(elts)]
            return elts
        return None

    # -- binding ---------------------------------------------------------------------------------------
    def bind(self, targets: list[ast.AST], value: ast.AST) -> None:
        vk = self.kind(value)
        vb = self.is_bool(value)
        for tgt in targets:
            if isinstance(tgt, (ast.Tuple, ast.List)):
                elems = value.elts if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(tgt.elts) else None
                known = self.tuple_elts(value) if elems is None else None
                whole = vk if vk in TENSORS or vk == NP or isinstance(vk, frozenset) else None
                if vk == SEQ:
                    whole = TENSOR      # `a, b = x.chunk(2)`: tensors; a `*rest` takes a list of them
                for j, (t, i) in enumerate(zip(tgt.elts, tuple_positions(tgt.elts))):
                    if elems is not None:
                        ek = self.kind(elems[j])
                    elif i is None:
                        ek = SEQ if vk == SEQ else whole    # *rest: a list of the middle elements
                    elif known is not None:
                        ek = known[i] if -len(known) <= i < len(known) else None
                    elif isinstance(vk, frozenset):
                        ek = element(vk, i)
                    else:
                        ek = whole
                    self._set(t, ek, False)
            else:
                if isinstance(tgt, ast.Name):
                    if type(value) is ast.Tuple:
                        self._bind_tuple(tgt.id, value)
                    elif isinstance(vk, frozenset):
                        self.tuple_others[tgt.id] = vk | self.tuple_others.get(tgt.id, frozenset())
                self._set(tgt, vk, vb)

    def hinted(self, name: str, k):
        """A declared host-resident name is on the host whatever it is bound to; else its own hint (`*_cpu`,
        `*_np`) where the value says no more than "a tensor" or nothing."""
        if self.placement and self.placement.name(name):
            return HOST
        return _hinted(name, k)

    def element_kind(self, node: ast.AST):
        """The kind of what iterating a value yields: rows of a tensor, the tensors of a split or of a local list
        built here, the elements of a declared host-resident list (host tensors)."""
        k = self.kind(node)
        if k in TENSORS or symbolic(k):
            return k
        if k == SEQ:
            return TENSOR
        if k == NP:
            return NP           # rows or scalars of a NumPy array
        if type(node) is ast.Name and node.id in self.elems:
            return self.elems[node.id]
        return None

    def loop_targets(self, target: ast.AST, it: ast.AST) -> list:
        """(target, kind) for a `for` over `zip(a, b)` / `enumerate(a)` / a local list: each unpacked name takes
        the kind of its sequence's elements."""
        if type(it) is ast.Call and type(it.func) is ast.Name and it.func.id in ("zip", "enumerate") \
                and it.func.id not in self.names and not it.keywords and isinstance(target, ast.Tuple):
            seqs = it.args if it.func.id == "zip" else [None, *it.args[:1]]
            return [(t, self.element_kind(a) if a is not None else PY)
                    for t, a in zip(target.elts, seqs) if isinstance(t, ast.Name)]
        if type(it) is ast.Name and it.id in self.elems and isinstance(target, ast.Name):
            return [(target, self.elems[it.id])]
        return []

    def _bind_tuple(self, name: str, value: ast.Tuple) -> None:
        elts = self.tuple_elts(value)
        if name not in self.tuples:
            self.tuples[name] = elts
            return
        cur = self.tuples[name]
        self.tuples[name] = None if cur is None or elts is None or len(cur) != len(elts) else \
            [join(a, b) for a, b in zip(cur, elts)]

    def _set(self, t: ast.AST, k, is_bool: bool) -> None:
        if isinstance(t, ast.Starred):
            t = t.value
        if not isinstance(t, ast.Name):
            return
        k = self.hinted(t.id, k)
        if t.id in self.names:
            old = self.names[t.id]
            if old != k and self.first_pass:
                self.rebound.add(t.id)
            self.names[t.id] = join(old, k)
        else:
            self.names[t.id] = k
        if is_bool:
            self.bools.add(t.id)


def _hinted(name: str, k):
    """A name's own hint (`*_cpu`, `*_np`) where the value says no more than "a tensor" or nothing."""
    hint = name_hint(name)
    return hint if hint is not None and (k is None or isinstance(k, frozenset) or k == TENSOR) else k


def _looks_resolvable(recv: ast.AST) -> bool:
    while isinstance(recv, ast.Attribute):
        recv = recv.value
    return isinstance(recv, ast.Name)


# the dtypes torch and NumPy name as module attributes (`torch.bfloat16`, `torch.float8_e4m3fn`, `np.uint8`)
_DTYPE_NAME = re.compile(r"(u?int\d*|float\d*|bfloat16|half|double|long|short|bool_?|cfloat|cdouble|complex\d*|"
                         r"float8_\w+|float4_\w+|quint\w+|qint\w+|bits\w+)$")


def _arith(a, b):
    """Kind of a binary op's result: a tensor operand decides; Python with Python stays Python."""
    ta = a in TENSORS or isinstance(a, frozenset)
    tb = b in TENSORS or isinstance(b, frozenset)
    if (a == NP and soft(b)) or (b == NP and soft(a)):
        return NP           # as with an unknown attribute
    if ta and tb:
        return join(a, b)
    if ta:
        return a
    if tb:
        return b
    if a == NP or b == NP:
        return NP
    if a == PY and b == PY:
        return PY
    return None


_LOOPS = frozenset({ast.For, ast.While, ast.comprehension, ast.AsyncFor})
# node types, matched exactly (the parser makes no subclasses): a set lookup instead of isinstance against a tuple,
# for every node of every function
_BINDERS = frozenset({ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.NamedExpr, ast.comprehension})


def infer(env: Env, fn: ast.AST | None, nodes: list[ast.AST]) -> list[str]:
    """Fill ``env`` with the kinds of the function's names; returns its parameter names (for call binding)."""
    params: list[str] = []
    args = getattr(fn, "args", None)
    if args is not None:
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if a is None:
                continue
            params.append(a.arg)
            if a.arg in ("self", "cls"):
                continue
            k = annotation_kind(a.annotation)
            if k == "none":
                k = None
            if k is None and a.annotation is not None and name_hint(a.arg) is None:
                classes = [c[4:] for c in annotation_classes(a.annotation)]
                if classes:
                    env.param_classes[a.arg] = classes
            hint = HOST if env.placement and env.placement.name(a.arg) else name_hint(a.arg)
            if hint is not None:
                k = hint
            elif k is None and a.annotation is None and a is not args.vararg and a is not args.kwarg:
                # un-annotated: its callers decide; an annotation that names no tensor (a Cache) is not one
                k = frozenset((f"p:{a.arg}",))
            if k is not None:
                env.names[a.arg] = k
    start = dict(env.names)
    if fn is not None and not env.default_device_set and getattr(fn, "name", "") not in _CONSTRUCTORS:
        env.factory_default = HOST
    for n in nodes:
        if type(n) is ast.With:
            for item in n.items:
                c = item.context_expr
                if type(c) is ast.Call and env.qual(c.func) == "torch.device" and c.args:
                    d = env.device_value(c.args[0])
                    for sub in n.body:
                        for x in ast.walk(sub):
                            if type(x) is ast.Call:
                                env.with_device[id(x)] = d if d is not None else TENSOR
    body = [n for n in nodes if type(n) in _BINDERS]
    appends = [n for n in nodes if type(n) is ast.Call and type(n.func) is ast.Attribute
               and n.func.attr == "append" and type(n.func.value) is ast.Name and len(n.args) == 1]
    # straight-line code settles in one pass (source order); a loop can feed a later assignment back to an
    # earlier one, so a function with loops gets a second pass
    loops = any(type(n) in _LOOPS for n in nodes)
    _settle(env, body, appends, 2 if loops else 1)
    if env.rebound and fn is not None:
        # which binding reaches each read, then the kinds again with those reads (a loop over the NumPy copy of a
        # name that held a tensor walks NumPy values), then the reads once more with the settled kinds. Only the
        # reads found on the host carry over: one found on the device may owe that to the flow-insensitive join
        # the first pass settled on (`end = start + n` with `n` a row of what was taken for a tensor)
        walks = _Walks()                     # each statement's bound names and reads, for both walks
        _Flow(env, start, walks).block(fn.body)
        env.at = {i: k for i, k in env.at.items() if k not in ON_DEVICE and type(k) is str}
        env.names, env.bools, env.tuples, env.tuple_others, env.elems = dict(start), set(), {}, {}, {}
        _settle(env, body, appends, 2 if loops else 1)
        env.at.clear()
        _Flow(env, start, walks).block(fn.body)
    return params


def _settle(env: Env, body: list, appends: list, passes: int) -> None:
    """Bind the function's names, in source order, `passes` times (a loop feeds later bindings back)."""
    for p in range(passes):
        env.first_pass = p == 0
        for n in body:
            t = type(n)
            if t is ast.Assign:
                env.bind(n.targets, n.value)
            elif t is ast.AnnAssign:
                k = annotation_kind(n.annotation)
                if k in TENSORS and isinstance(n.target, ast.Name):
                    env._set(n.target, k, False)
                if n.value is not None:
                    env.bind([n.target], n.value)
            elif t is ast.NamedExpr:
                env.bind([n.target], n.value)
            elif t is ast.AugAssign:
                env._set(n.target, _arith(env.kind(n.target), env.kind(n.value)), False)
            elif t is ast.For or t is ast.comprehension:
                it = env.kind(n.iter)
                # not an attribute that may be a property: what its getter returns (a list) is not its elements' kind
                if it in TENSORS or symbolic(it) or it == SEQ:
                    for x in unpack_targets(n.target):   # iterating a tensor, or a split of one, yields tensors
                        env._set(x, TENSOR if it == SEQ else it, False)
                else:
                    for x, k in env.loop_targets(n.target, n.iter):
                        if k is not None:
                            env._set(x, k, False)
        for n in appends:
            k = env.kind(n.args[0])
            if k in TENSORS:
                name = n.func.value.id
                env.elems[name] = join(env.elems[name], k) if name in env.elems else k


# defs that build a model's state: run under the loader's `with torch.device(...)`, whose device they do not see
_CONSTRUCTORS = frozenset({"__init__", "__post_init__", "__new__", "setup_caches", "reset_parameters",
                           "_init_weights", "init_weights", "build"})

_SCOPES = frozenset({ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ListComp, ast.SetComp,
                     ast.DictComp, ast.GeneratorExp})
_ENDS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


class _Flow:
    """Which binding of a rebound name reaches each read of it (`x = ids` ... `x = torch.tensor(x, device=d)`:
    the `x` read in the call is the list, later ones the device tensor). Statements are walked in order with the
    kind each tracked name holds on the way; where branches, loops or `try` leave more than one binding
    reaching a read, the name drops out and the read keeps the flow-insensitive join of ``Env.names``."""

    def __init__(self, env: Env, start: dict, walks: _Walks | None = None):
        self.env = env
        self.track = env.rebound
        self.cur0 = {n: k for n, k in start.items() if n in self.track and k is not None}
        self.walks = _Walks() if walks is None else walks

    def _drop_bound(self, st: ast.AST, cur: dict) -> None:
        """Forget the names the statement binds anywhere in it; with nothing tracked there is nothing to forget."""
        if cur:
            for n in self.walks.bound(st):
                cur.pop(n, None)

    def block(self, stmts: list, cur: dict | None = None) -> dict | None:
        """Walk a statement list; the kinds that flow out of it, or None when it always leaves (return, raise)."""
        if cur is None:
            cur = dict(self.cur0)
        for st in stmts:
            cur = self.stmt(st, cur)
            if cur is None:
                return None
        return cur

    def stmt(self, st: ast.AST, cur: dict) -> dict | None:
        t = type(st)
        env = self.env
        if t is ast.Assign or t is ast.AnnAssign:
            if st.value is None:
                return cur
            self.reads(st.value, cur)
            targets = st.targets if t is ast.Assign else [st.target]
            # the value's kind matters only to a tracked name it binds (most assignments bind none)
            k = env.kind(st.value) if any(type(x) is ast.Name and x.id in self.track for x in targets) else None
            for tgt in targets:
                if isinstance(tgt, ast.Name):
                    if tgt.id in self.track:
                        self._put(cur, tgt.id, env.hinted(tgt.id, k))
                else:
                    self.reads(tgt, cur)
                    for x in unpack_targets(tgt):
                        if isinstance(x, ast.Name):
                            cur.pop(x.id, None)
            return cur
        if t is ast.AugAssign:
            self.reads(st.value, cur)
            self.reads(st.target, cur)
            if isinstance(st.target, ast.Name) and st.target.id in cur:
                cur[st.target.id] = _arith(cur[st.target.id], env.kind(st.value))
            return cur
        if t is ast.If:
            self.reads(st.test, cur)
            a = self.block(st.body, dict(cur))
            b = self.block(st.orelse, dict(cur))
            if a is None or b is None:
                return a if b is None else b
            return {n: join(a[n], b[n]) for n in a.keys() & b.keys()}
        if t in (ast.For, ast.AsyncFor, ast.While, ast.Try, ast.Match) or t.__name__ == "TryStar":
            # a loop's body runs after its own later bindings (the back edge), a handler after any of the
            # body's: what the statement binds anywhere no longer has one reaching binding, inside or after
            self._drop_bound(st, cur)
            if t is ast.While:
                self.reads(st.test, cur)
            elif t is not ast.Try and t is not ast.Match and t.__name__ != "TryStar":
                self.reads(st.iter, cur)
            for part in ("body", "orelse", "finalbody"):
                self.block(getattr(st, part, []), dict(cur))
            for sub in getattr(st, "handlers", ()):
                self.block(sub.body, dict(cur))
            return cur
        if t is ast.With or t is ast.AsyncWith:
            for item in st.items:
                self.reads(item.context_expr, cur)
                if item.optional_vars is not None:
                    for x in unpack_targets(item.optional_vars):
                        if isinstance(x, ast.Name):
                            cur.pop(x.id, None)
            return self.block(st.body, cur)
        if t in _SCOPES:
            cur.pop(getattr(st, "name", ""), None)
            return cur
        self.reads(st, cur)
        self._drop_bound(st, cur)
        return None if isinstance(st, _ENDS) else cur

    def _put(self, cur: dict, name: str, k) -> None:
        if k is None:
            cur.pop(name, None)     # unknown: the join of every binding says more
        else:
            cur[name] = k

    def reads(self, node: ast.AST, cur: dict) -> None:
        """Record, for each read of a tracked name in `node`, the kind it holds here; a walrus rebinds its name
        for the reads after it."""
        if not cur:
            return
        at = self.env.at
        for e in self.walks.reads(node):
            if type(e) is str:
                cur.pop(e, None)
            elif e.id in cur:
                at[id(e)] = cur[e.id]


class _Walks:
    """What the flow walk asks of each statement, walked once per function: the flow runs twice over the same
    statements, and a compound statement's bound names are its own parts' and its inner statements' (each walked
    once, not once more for every statement that encloses it)."""

    def __init__(self):
        self._bound: dict[int, set[str]] = {}
        self._reads: dict[int, list] = {}

    def bound(self, st: ast.AST) -> set[str]:
        """The names a statement binds anywhere inside it (not inside nested scopes)."""
        out = self._bound.get(id(st))
        if out is not None:
            return out
        out = self._bound[id(st)] = set()
        stack = [st]
        while stack:
            n = stack.pop()
            t = type(n)
            if t is ast.Name and type(n.ctx) is not ast.Load:
                out.add(n.id)
            elif t is ast.ExceptHandler and n.name:
                out.add(n.name)
            if n is not st:
                if t in _SCOPES:
                    if hasattr(n, "name"):
                        out.add(n.name)
                    continue
                if isinstance(n, ast.stmt):
                    out |= self.bound(n)
                    continue
            stack += children(n)
        return out

    def reads(self, node: ast.AST) -> list:
        """The Name loads in `node` in the order the flow records them, with a walrus's target name (a str) where
        it rebinds; a comprehension contributes its first iterable (evaluated here; the rest is its own scope)."""
        out = self._reads.get(id(node))
        if out is not None:
            return out
        out = self._reads[id(node)] = []
        stack = [node]
        while stack:
            n = stack.pop()
            t = type(n)
            if t is ast.Name:
                if type(n.ctx) is ast.Load:
                    out.append(n)
            elif t is ast.NamedExpr:
                out += self.reads(n.value)
                out.append(n.target.id)
            elif t in _SCOPES:
                if t is not ast.Lambda and t is not ast.FunctionDef and t is not ast.AsyncFunctionDef and \
                        t is not ast.ClassDef:
                    stack.append(n.generators[0].iter)
            else:
                stack += children(n)
        return out
