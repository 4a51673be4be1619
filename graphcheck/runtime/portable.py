"""The portable audit: what the step does on the host, seen from inside torch (works on CPU and GPU).

A TorchFunctionMode classifies the Python-level call (`t.item()`, `bool(t)`, `torch.tensor([...])`), which names
the user's intent; a TorchDispatchMode underneath is the safety net for what reaches aten without a Python-level
call (a readback inside a torch helper, a data-dependent-shape op). While a classified call runs, the dispatch
layer stays quiet so one hazard is one event. Explicit syncs and host RNG are not torch ops, so they are wrapped
for the duration of the audit, on the auditing thread only.
"""
from __future__ import annotations

import contextlib
import random
import sys
import threading
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from . import nvtx
from .attribution import user_stack
from .recorder import Recorder

_T = torch.Tensor
# Python-level calls: name -> (rule, placeholder values).
_METHODS: dict[Any, tuple[str, dict]] = {
    _T.item: ("GC101", {}),
    _T.tolist: ("GC102", {"method": "tolist"}),
    _T.numpy: ("GC109", {"call": ".numpy()"}),
    _T.__array__: ("GC109", {"call": "numpy.asarray(tensor)"}),
    _T.cpu: ("GC103", {"call": ".cpu()"}),
    _T.__bool__: ("GC104", {"call": "bool"}),
    _T.__int__: ("GC104", {"call": "int"}),
    _T.__float__: ("GC104", {"call": "float"}),
    _T.__complex__: ("GC104", {"call": "complex"}),
    _T.__index__: ("GC105", {"call": "__index__"}),
    _T.__format__: ("GC106", {"call": "format"}),
    _T.__repr__: ("GC106", {"call": "repr"}),
    _T.__str__: ("GC106", {"call": "str"}) if hasattr(_T, "__str__") else ("GC106", {}),
    _T.nonzero: ("GC301", {"call": ".nonzero()"}),
    torch.nonzero: ("GC301", {"call": "torch.nonzero"}),
    torch.argwhere: ("GC301", {"call": "torch.argwhere"}),
    _T.unique: ("GC303", {"call": ".unique()"}),
    torch.unique: ("GC303", {"call": "torch.unique"}),
    torch.unique_consecutive: ("GC303", {"call": "torch.unique_consecutive"}),
    _T.unique_consecutive: ("GC303", {"call": ".unique_consecutive()"}),
    torch.bincount: ("GC304", {"call": "torch.bincount"}),
    _T.bincount: ("GC304", {"call": ".bincount()"}),
    torch.masked_select: ("GC306", {"call": "torch.masked_select"}),
    _T.masked_select: ("GC306", {"call": ".masked_select()"}),
    torch.equal: ("GC108", {"call": "torch.equal"}),
    _T.equal: ("GC108", {"call": ".equal()"}),
    torch.allclose: ("GC108", {"call": "torch.allclose"}),
    _T.allclose: ("GC108", {"call": ".allclose()"}),
    torch.tensor: ("GC401", {"call": "torch.tensor"}),
    torch.as_tensor: ("GC401", {"call": "torch.as_tensor"}),
    torch.from_numpy: ("GC401", {"call": "torch.from_numpy"}),
    _T.new_tensor: ("GC401", {"call": ".new_tensor"}),
}
_METHODS = {k: v for k, v in _METHODS.items() if k is not None}
_DEVICE_MOVES = {_T.to, _T.cuda, _T.copy_}


def _is_tensor(x) -> bool:
    return isinstance(x, torch.Tensor)


def _classify(func, args, kwargs) -> tuple[str, dict] | None:
    hit = _METHODS.get(func)
    if hit is not None:
        rule, fmt = hit
        if func in (torch.where,):
            return None
        if func in (torch.tensor, torch.as_tensor, _T.new_tensor):
            data = args[1] if func is _T.new_tensor and len(args) > 1 else (args[0] if args else kwargs.get("data"))
            if _is_tensor(data):
                return None          # tensor-in, tensor-out: no host data crosses
        return rule, fmt
    if func is torch.where and len(args) + len(kwargs) == 1:
        return "GC302", {}
    if func in (torch.repeat_interleave, _T.repeat_interleave):
        repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
        if _is_tensor(repeats) and kwargs.get("output_size") is None:
            return "GC307", {"call": "repeat_interleave"}
        return None
    if func is _T.__getitem__ and len(args) == 2:
        return _index_rule(args[1])
    if func is _T.__setitem__ and len(args) == 3:
        value = args[2]
        if isinstance(value, (bool, int, float, complex)) or (
                isinstance(value, (list, tuple)) and value and not any(_is_tensor(v) for v in value)):
            return "GC404", {"call": "t[i] = scalar"}
        return _index_rule(args[1])
    if func is _T.to:
        dev = kwargs.get("device", next((a for a in args[1:] if isinstance(a, (str, torch.device))), None))
        if dev is not None and torch.device(dev).type == "cpu" and _is_tensor(args[0]) and args[0].device.type != "cpu":
            return "GC103", {"call": ".to('cpu')"}
    if func in _DEVICE_MOVES and kwargs.get("non_blocking"):
        src = args[1] if func is _T.copy_ and len(args) > 1 else args[0]
        if _is_tensor(src) and src.device.type == "cpu" and not src.is_pinned():
            return "GC403", {"call": func.__name__}
    return None


def _index_rule(idx) -> tuple[str, dict] | None:
    items = idx if isinstance(idx, tuple) else (idx,)
    for it in items:
        if _is_tensor(it) and it.dtype == torch.bool:
            return "GC305", {"call": "x[mask]"}
        if isinstance(it, slice) and any(_is_tensor(b) for b in (it.start, it.stop, it.step)):
            return "GC308", {"call": "x[a:b]"}
    return None


def _op_name(func) -> str:
    q = getattr(func, "__qualname__", getattr(func, "__name__", str(func)))
    owner, _, name = q.rpartition(".")
    if owner in ("TensorBase", "Tensor", "_TensorBase"):
        return f"Tensor.{name}"
    if owner == "_VariableFunctionsClass" or getattr(torch, name, None) is func:
        return f"torch.{name}"
    return q


class _FunctionLayer(TorchFunctionMode):
    def __init__(self, audit: "PortableAudit"):
        super().__init__()
        self.audit = audit

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        hit = _classify(func, args, kwargs) if self.audit.active() else None
        if hit is None:
            return func(*args, **kwargs)
        rule, fmt = hit
        self.audit.event(rule, _op_name(func), sys._getframe(1), fmt)
        self.audit.depth += 1
        try:
            return func(*args, **kwargs)
        finally:
            self.audit.depth -= 1


_DYN = {"nonzero": "GC301", "argwhere": "GC301", "_unique": "GC303", "_unique2": "GC303", "unique_dim": "GC303",
        "unique_consecutive": "GC303", "bincount": "GC304", "masked_select": "GC306", "repeat_interleave": "GC307"}


_INTERESTING: dict = {}
_NAMED = {"_local_scalar_dense", "is_nonzero", "lift_fresh", "lift_fresh_copy", "equal", "allclose", "_to_copy", "copy_"}


def _interesting(func) -> bool:
    """Whether an aten op can ever be a hazard; decided once per op, so the common case costs one dict lookup."""
    hit = _INTERESTING.get(func)
    if hit is None:
        tags = func.tags
        hit = _INTERESTING[func] = (func._schema.name.split("::")[-1] in _NAMED or torch.Tag.dynamic_output_shape in tags
                                    or torch.Tag.data_dependent_output in tags)
    return hit


class _DispatchLayer(TorchDispatchMode):
    def __init__(self, audit: "PortableAudit"):
        super().__init__()
        self.audit = audit

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.audit.depth == 0 and _interesting(func) and self.audit.active():
            hit = self._classify(func, args, kwargs)
            if hit is not None:
                self.audit.event(hit[0], str(func), sys._getframe(1), hit[1])
        return func(*args, **kwargs)

    @staticmethod
    def _classify(func, args, kwargs) -> tuple[str, dict] | None:
        name = func._schema.name.split("::")[-1]
        tags = func.tags
        if name in ("_local_scalar_dense", "is_nonzero"):
            return "GC104", {"call": name}
        if name == "lift_fresh" or name == "lift_fresh_copy":
            return "GC401", {"call": name}
        if name in ("equal", "allclose"):
            return "GC108", {"call": f"torch.{name}"}
        if torch.Tag.dynamic_output_shape in tags:
            if name == "index":
                idx = args[1] if len(args) > 1 else []
                if not any(_is_tensor(i) and i.dtype in (torch.bool, torch.uint8) for i in idx if i is not None):
                    return None
                return "GC305", {"call": "x[mask]"}
            if name == "repeat_interleave" and kwargs.get("output_size") is not None:
                return None
            return _DYN.get(name, "GC301"), {"call": name}
        if name in ("_to_copy", "copy_") and len(args) >= 1:
            src = args[1] if name == "copy_" and len(args) > 1 else args[0]
            dst_dev = kwargs.get("device") if name == "_to_copy" else (args[0].device if _is_tensor(args[0]) else None)
            if _is_tensor(src) and dst_dev is not None and torch.device(dst_dev).type != src.device.type:
                if src.device.type == "cpu":
                    return "GC402", {"call": name}
                return "GC103", {"call": name}
        if torch.Tag.data_dependent_output in tags:
            return "GC108", {"call": name}
        return None


def _patch_targets() -> list[tuple[Any, str, str, dict]]:
    """(owner, attribute, rule, fmt) of the non-torch-op hazards wrapped during an audit."""
    out: list[tuple[Any, str, str, dict]] = [(torch.cuda, "synchronize", "GC601", {"call": "torch.cuda.synchronize()"}),
                                             (torch.cuda, "empty_cache", "GC605", {"call": "torch.cuda.empty_cache()"})]
    for cls in (torch.cuda.Stream, torch.cuda.Event):
        out.append((cls, "synchronize", "GC602", {"call": f"{cls.__name__}.synchronize()"}))
        out.append((cls, "query", "GC603", {"call": f"{cls.__name__}.query()"}))
    for name in ("random", "randint", "randrange", "uniform", "gauss", "normalvariate", "choice", "choices", "shuffle", "sample"):
        out.append((random, name, "GC501", {"call": f"random.{name}"}))
    np = sys.modules.get("numpy")
    if np is not None:
        for name in ("rand", "randn", "randint", "random", "random_sample", "choice", "normal", "uniform", "permutation", "shuffle"):
            if hasattr(np.random, name):
                out.append((np.random, name, "GC502", {"call": f"numpy.random.{name}"}))
    return out


class PortableAudit:
    """Context manager: every hazard the step performs while inside it is recorded in `recorder`."""

    def __init__(self, recorder: Recorder | None = None):
        self.recorder = recorder if recorder is not None else Recorder()
        self.depth = 0
        self._thread = threading.get_ident()
        self._stack = contextlib.ExitStack()
        self._enabled = False
        self.cuda_ok = torch.cuda.is_available()

    def active(self) -> bool:
        return self._enabled and threading.get_ident() == self._thread

    def event(self, rule: str, op: str, frame, fmt: dict) -> None:
        stack = user_stack(frame)
        if stack:
            nvtx.mark(f"graphcheck {rule} {op}")
        fmt = {"call": op, "method": op, **fmt}
        self.recorder.record(rule, op, stack, **fmt)

    def _wrap(self, owner, attr: str, rule: str, fmt: dict) -> None:
        orig = getattr(owner, attr, None)
        if orig is None:
            return
        audit = self
        is_cuda = owner is torch.cuda or owner in (torch.cuda.Stream, torch.cuda.Event)

        def wrapper(*a, **k):
            if audit.active() and audit.depth == 0:
                audit.event(rule, fmt["call"], sys._getframe(1), fmt)
                if is_cuda and not audit.cuda_ok:
                    return True if attr == "query" else None   # no device: nothing to wait for
            return orig(*a, **k)

        wrapper.__wrapped__ = orig  # type: ignore[attr-defined]
        setattr(owner, attr, wrapper)
        self._stack.callback(setattr, owner, attr, orig)

    def __enter__(self) -> "PortableAudit":
        self._thread = threading.get_ident()
        try:
            for owner, attr, rule, fmt in _patch_targets():
                self._wrap(owner, attr, rule, fmt)
            self._stack.enter_context(_DispatchLayer(self))
            self._stack.enter_context(_FunctionLayer(self))
        except BaseException:
            self._stack.close()
            raise
        self._enabled = True
        return self

    def __exit__(self, *exc) -> None:
        self._enabled = False
        self._stack.close()


@contextlib.contextmanager
def cuda_shims():
    """Without a GPU, make explicit CUDA syncs no-ops so GPU-intended steps still run in the CPU layers (the
    audit still reports them: it wraps them itself)."""
    if torch.cuda.is_available():
        yield
        return
    with contextlib.ExitStack() as stack:
        for owner, attr, _, _ in _patch_targets():
            if owner not in (torch.cuda, torch.cuda.Stream, torch.cuda.Event):
                continue
            orig = getattr(owner, attr, None)
            if orig is None:
                continue
            setattr(owner, attr, (lambda *a, **k: True) if attr == "query" else (lambda *a, **k: None))
            stack.callback(setattr, owner, attr, orig)
        yield
