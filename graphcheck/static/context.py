"""What a rule checker sees while the engine walks one function (``_Ctx``): the function's tensor-kind lattice,
the file's facts, and ``report``; and the function as the engine collected it (``_Func``). The rules call only
this; how the file is walked and summarised is ``engine.py``'s business."""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ..rules import format_message
from ..rules._base import dotted
from .inference import DEV, HOST, HOST_KINDS, NP, ON_DEVICE, PINNED, PY, SEQ, SPLITS, TENSORS, Env, soft, symbolic

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_LOGGER_NAMES = {"logger", "log", "logging", "_logger", "_log", "LOGGER", "LOG", "warnings", "wandb", "writer", "tb"}


@dataclass
class _Func:
    qname: str
    node: ast.AST | None
    cls: str | None
    nodes: list = field(default_factory=list)
    reads: list = field(default_factory=list)     # attribute loads rooted in a name (`self.x`, `c.length`)
    lambdas: set = field(default_factory=set)     # locals bound only to lambdas (in a kernel: its nested defs too)
    compiled: bool = False    # a kernel's body (compiled_body): only its calls and assignments are kept


class _Ctx:
    """What a rule checker sees: the current function's device lattice, file facts, and ``report``.

    The kind queries (``dev``, ``maybe_dev``) may meet a value whose kind depends on a caller's argument or a
    callee's return; they then answer yes *conditionally* and remember the dependency, and ``report`` stores the
    finding with that condition for the cross-file pass to decide.
    """

    def __init__(self, analyzer):     # the engine's FileAnalyzer (engine.py imports this module)
        self.a = analyzer
        self.env: Env | None = None
        self.func: _Func | None = None
        self._nan: dict[int, bool] = {}
        self._deps: frozenset[str] = _NO_DEPS
        self._mode = "dev"
        self._also: tuple = ()      # further conditions, each {"mode", "deps"}, that must hold as well

    # kinds -----------------------------------------------------------------------------------------
    def kind(self, node: ast.AST):
        return self.env.kind(node)

    def dev(self, node: ast.AST) -> bool:
        """A tensor on the device, or of unknown placement (likely the device)."""
        k = self.env.kind(node)
        if isinstance(k, frozenset):
            self._deps |= k
            return True
        return k in ON_DEVICE

    def maybe_dev(self, node: ast.AST) -> bool:
        """Not known to live on the host: for the tensor-only methods (`.item()`, `.tolist()`, `.cpu()`)."""
        k = self.env.kind(node)
        if isinstance(k, frozenset):
            self._deps |= k
            self._mode = "maybe"
            return True
        return k not in HOST_KINDS

    def any_dev(self, nodes) -> bool:
        """`any(dev(n) for n in nodes)`, an attribute that may be a property (`g:`) passed over as an unknown value
        was before: a plain `any()` stops at it (`self.training and p < 0.5`) and leaves the finding waiting on that
        attribute alone, dropped when it resolves to nothing, though `p` is on the device. The first value known to
        be on the device, or symbolic otherwise, decides as before; the getters passed over on the way are
        alternatives (the finding also holds where one returns a device value)."""
        deps = self._deps
        passed = False
        for n in nodes:
            k = self.env.kind(n)
            if soft(k):
                self._deps |= k
                passed = True
            elif k in ON_DEVICE:
                self._deps = deps
                return True
            elif isinstance(k, frozenset):
                self._deps |= k
                return True
        return passed

    def not_dev(self, node: ast.AST) -> bool:
        """Not known to be on the device (`x.cuda()` copies it). An attribute that may be a property (`g:`) is
        unknown, as it was before the scope could resolve it: the finding holds unless its getter returns a device
        value (mode "not"). Other symbolic values count as on the device, as `not dev()` has them."""
        k = self.env.kind(node)
        if isinstance(k, frozenset):
            if not soft(k):
                return False
            self._deps |= k
            self._mode = "not"
            return True
        return k not in ON_DEVICE

    def tensor(self, node: ast.AST) -> bool:
        k = self.env.kind(node)
        # a field of a class-typed parameter ("a:") or an attribute that may be a property ("g:") is unknown here,
        # as before the scope could resolve it: a rule asking "is it a tensor?" (to stay quiet) must not take it for one
        return k in TENSORS or isinstance(k, frozenset) and any(not d.startswith(("a:", "g:")) for d in k)

    def sliced_tensor(self, node: ast.AST) -> bool:
        """A tensor sliced or resized on the host (`x[:n]`, `x.view(n)`): as ``tensor``, or an attribute that may be a
        property or a base class's field (`self.out` assigned in `Base.__init__`), the finding then waiting on it
        resolving to a tensor (a list sliced by a device value reads nothing back: no finding there)."""
        k = self.env.kind(node)
        if soft(k):
            self._also += ({"mode": "dev", "deps": sorted(k)},)
            return True
        return self.tensor(node)

    def host(self, node: ast.AST) -> bool:
        """A CPU tensor that is not pinned."""
        return self.env.kind(node) == HOST

    def pageable(self, node: ast.AST) -> bool:
        """A CPU tensor that is not pinned, known here or (a parameter, a call's return) where what the resolved
        callers pass or the callees return is one: `_upload(self.mask_cpu)` copying its argument `.to(device)`.
        Ask it last in a condition: the condition it adds is kept whatever the caller decides after."""
        k = self.env.kind(node)
        if symbolic(k):
            self._also += ({"mode": "host", "deps": sorted(k)},)
            return True
        return k == HOST

    def host_data(self, node: ast.AST) -> bool:
        """Data a tensor constructor copies from the host: not known to be a tensor here, or (a parameter, a call's
        return) resolved to a list or a NumPy array (`def f(seqs): torch.tensor(seqs, device=d)` called with
        `list(...)`); a symbolic value that resolves to nothing known stays quiet, as it did."""
        k = self.env.kind(node)
        if not self.tensor(node):
            return True
        if symbolic(k):
            self._also += ({"mode": "data", "deps": sorted(k)},)
            return True
        return False

    def py(self, node: ast.AST) -> bool:
        return self.env.kind(node) == PY

    def numpy(self, node: ast.AST) -> bool:
        return self.env.kind(node) == NP

    def bool_tensor(self, node: ast.AST) -> bool:
        return self.env.is_bool(node)

    def qual(self, node: ast.AST) -> str:
        return self.env.qual(node)

    def torch(self, call: ast.Call) -> str:
        return self.env.torch(call)

    def method(self, call: ast.Call) -> str:
        """The method name of `value.m(...)` when `value` is a value, not a module path."""
        f = call.func
        if isinstance(f, ast.Attribute) and not self.env.qual(f):
            return f.attr
        return ""

    def target_is_cpu(self, call: ast.Call) -> bool:
        return self._to_target(call) in (HOST, PINNED)

    def target_is_device(self, call: ast.Call) -> bool:
        return self._to_target(call) == DEV

    def target_is_cuda(self, call: ast.Call) -> bool:
        vals = list(call.args[:1]) + [k.value for k in call.keywords if k.arg == "device"]
        return any(isinstance(v, ast.Constant) and isinstance(v.value, str) and v.value.startswith("cuda") for v in vals)

    def _to_target(self, call: ast.Call):
        dev = next((k.value for k in call.keywords if k.arg == "device"), None)
        if dev is None and call.args:
            dev = call.args[0]
        return self.env.device_value(dev) if dev is not None else None

    def non_blocking(self, call: ast.Call) -> bool:
        return any(k.arg == "non_blocking" and isinstance(k.value, ast.Constant) and k.value.value is True
                   for k in call.keywords)

    # file facts ------------------------------------------------------------------------------------
    @property
    def function_name(self) -> str:
        return self.func.qname.rsplit(".", 1)[-1] if self.func else "<module>"

    @property
    def in_method(self) -> bool:
        return bool(self.func and self.func.cls and isinstance(self.func.node, _FUNCS))

    def is_logger(self, node: ast.AST) -> bool:
        name = dotted(node)
        return bool(name) and (name.split(".")[-1] in _LOGGER_NAMES or name.lower().endswith("logger"))

    def is_host_sequence(self, node: ast.AST) -> bool:
        if isinstance(node, (ast.List, ast.Tuple, ast.ListComp)) or _splits(node):
            return True
        return isinstance(node, ast.Name) and (node.id in self.a.host_seqs.get(id(self.func), ()) or self.env.kind(node) in (PY, SEQ))

    def mentions_nan_guard(self, test: ast.AST) -> bool:
        hit = self._nan.get(id(test))
        if hit is None:
            # walk only when the text says so (most files never name a guard: then not even the lines are read)
            # `math.isfinite(scale)`, `np.isnan(a)`: host predicates on host values, no device reduction
            hit = self.a.names_nan_guard and any(
                g in ln for ln in self.a.lines[test.lineno - 1:(test.end_lineno or test.lineno)]
                for g in _NAN_GUARDS) and any(
                isinstance(n, ast.Call) and dotted(n.func).split(".")[-1] in _NAN_GUARDS
                and not self.env.qual(n.func).startswith(_HOST_MATH) for n in ast.walk(test))
            self._nan[id(test)] = hit
        return hit

    def is_stream(self, node: ast.AST) -> bool:
        """A value a launch may take as its stream: a call that makes one (`cuda.CUstream(...)`, CuTeDSL's handle of
        torch's stream; not `CUstream(0)` nor `default_stream()`), a local this def bound to such a call, or a name
        with `stream` as one of its words (`stream`, `cur_stream`; not `num_streams` nor `upstream`)."""
        if isinstance(node, ast.Call):
            return stream_call(node)
        if isinstance(node, ast.Name) and node.id in self.a.launch_streams.get(id(self.func), ()):
            return True
        return "stream" in dotted(node).lower().split(".")[-1].split("_")

    def is_stream_or_event(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name) and node.id in self.a.stream_names:
            return True
        if isinstance(node, ast.Call):
            return dotted(node.func).split(".")[-1] in _STREAM_CTORS
        recv = dotted(node).lower().split(".")[-1]
        return bool(recv) and any(w in recv for w in ("stream", "event")) or recv in ("ev", "done", "start", "end")

    def is_shadowed(self, name: str) -> bool:
        return name in self.a.module_defs

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
        d = {"rule": code, "line": line, "col": getattr(node, "col_offset", 0),
             "function": self.func.qname if self.func else "<module>",
             "message": format_message(code, **fmt), "source": self.a.line(line)}
        conds = ([{"mode": self._mode, "deps": sorted(self._deps)}] if self._deps else []) + list(self._also)
        if conds:
            d["when"] = dict(conds[0], **({"and": conds[1:]} if len(conds) > 1 else {}))
        self.a.findings.append(d)


_NO_DEPS: frozenset[str] = frozenset()   # a checker's dependencies start empty; `|=` makes a new set when it adds


_NAN_GUARDS = ("isnan", "isinf", "isfinite", "isneginf", "isposinf")
_HOST_MATH = ("math.", "cmath.", "numpy.")
_STREAM_CTORS = ("Event", "Stream", "current_stream", "default_stream", "ExternalStream")
# calls that make a stream a launch may take (not `default_stream`: stream 0 is what GC801 is about)
_STREAM_CALLS = ("Stream", "current_stream", "ExternalStream", "CUstream")


def stream_call(node: ast.AST) -> bool:
    """A call that makes a stream a launch may take: `cuda.CUstream(torch.cuda.current_stream().cuda_stream)`,
    `torch.cuda.current_stream()`, ... but not `CUstream(0)` / `ExternalStream(0)` (stream 0) nor `default_stream()`."""
    last = dotted(node.func).split(".")[-1] if type(node) is ast.Call else ""
    if last not in _STREAM_CALLS:
        return False
    # a handle made of pointer 0 is the legacy default stream (`current_stream(0)` and `Stream(0)` name a device)
    return not (last in ("CUstream", "ExternalStream") and node.args and type(node.args[0]) is ast.Constant
                and node.args[0].value in (0, None))


def compiled_body(decorators: list[str]) -> bool:
    """Whether a def's body is compiled code rather than the step's Python, from its decorators' names with the
    file's imports applied (engine: `_decorator_targets`): `@triton.jit`, `@cute.jit`, `@cute.kernel`, `@gluon.jit`,
    `@numba.jit`, `@jax.jit` (any decorator named `jit` but torch's, or CuTe's `kernel`), cuTile's `@ct.kernel`
    (`cuda.tile.kernel`, launched by `ct.launch`) and `@ct.function`, Warp's `@wp.kernel` and `@wp.func`. Its values
    are the DSL's (`Int32`, a CuTe tensor, a Triton block, a tile), never torch tensors, and its Python runs only
    while the DSL traces it: a host-sync rule read there reports the kernel's own control flow (1,012 such rows on
    flashinfer 0.7.4 in CuTe DSL kernels, 81 more in its cuTile kernels and functions). The launch is checked where
    it is made (GC801, GC802)."""
    return any(d.rpartition(".")[2] == "jit" and not d.startswith("torch.") or d.endswith("cute.kernel")
               or d in _DSL_KERNELS for d in decorators)


# kernel decorators of DSLs whose decorator is not named `jit`, by their import-resolved names
_DSL_KERNELS = frozenset(("cuda.tile.kernel", "cuda.tile.function", "warp.kernel", "warp.func"))


def _splits(node: ast.AST) -> bool:
    """`x.tensor_split(n)`, `torch.chunk(x, n)`: a host sequence of tensors, which list()/tuple()/sum() walk on
    the host without reading any element back."""
    return type(node) is ast.Call and type(node.func) is ast.Attribute and node.func.attr in SPLITS
