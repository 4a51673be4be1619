"""The portable audit: what the step does on the host, seen from inside torch (works on CPU and GPU).

Two layers, both cheap on the common path:
- a TorchFunctionMode classifies the Python-level call (`t.item()`, `bool(t)`, `torch.tensor([...])`, `x[i] = 1.0`),
  which names the user's intent. It also follows where tensors live: on a CPU-only run every tensor is on the CPU, so
  tensors the step builds from Python data or without a device are tagged "host", and a host tensor moved to or
  combined with state/inputs is reported as the host-to-device copy it is on a GPU.
- a kernel net: Python kernels registered at the Autograd key of the few aten ops that can be a hazard
  (`_local_scalar_dense`, `nonzero`, `index.Tensor`, ...), for the duration of the audit. They see what reaches aten
  without a Python-level call (a readback inside a C++ op) while every other op runs at full speed. While a classified
  call runs, the net stays quiet so one hazard is one event.
Custom ops (`torch.library`) are entered with the function mode still active, so a `.tolist()` inside one is seen
at its own line. Explicit syncs and host RNG are not torch ops, so they are wrapped for the duration of the audit,
on the auditing thread only. Which rule an event is reported under comes from the rule catalogue
(`graphcheck.rules.runtime_signatures()`), keyed by the callable's name.
"""
from __future__ import annotations

import contextlib
import math
import random
import sys
import threading
import warnings
import weakref
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .. import rules as _rules
from ..placement import DEV, HOST
from . import nvtx
from .attribution import is_internal, user_stack
from .recorder import Recorder
from .source_placement import device_of_call

_T = torch.Tensor
EMITS = frozenset({
    "aten::_local_scalar_dense", "aten::_to_copy", "aten::_unique", "aten::_unique2", "aten::bincount",
    "aten::copy_", "aten::equal", "aten::index", "aten::is_nonzero", "aten::lift_fresh", "aten::lift_fresh_copy",
    "aten::masked_select", "aten::nonzero", "aten::repeat_interleave", "aten::unique_consecutive",
    "aten::unique_dim", "torch.Tensor.__array__", "torch.Tensor.__bool__", "torch.Tensor.__complex__",
    "torch.Tensor.__float__", "torch.Tensor.__format__", "torch.Tensor.__getitem__", "torch.Tensor.__index__",
    "torch.Tensor.__int__", "torch.Tensor.__repr__", "torch.Tensor.__setitem__", "torch.Tensor.__str__",
    "torch.Tensor.allclose", "torch.Tensor.bincount", "torch.Tensor.copy_", "torch.Tensor.cpu", "torch.Tensor.equal",
    "torch.Tensor.item", "torch.Tensor.masked_select", "torch.Tensor.new_tensor", "torch.Tensor.nonzero",
    "torch.Tensor.numpy", "torch.Tensor.repeat_interleave", "torch.Tensor.to", "torch.Tensor.tolist",
    "torch.Tensor.unique", "torch.Tensor.unique_consecutive", "torch.accelerator.empty_cache",
    "torch.accelerator.synchronize", "torch.allclose", "torch.argwhere", "torch.as_tensor", "torch.bincount",
    "torch.cuda.Event.query", "torch.cuda.Event.synchronize", "torch.cuda.Stream.query",
    "torch.cuda.Stream.synchronize", "torch.cuda.empty_cache", "torch.cuda.synchronize", "torch.equal",
    "torch.from_numpy", "torch.masked_select", "torch.nonzero", "torch.repeat_interleave", "torch.tensor",
    "torch.unique", "torch.unique_consecutive", "torch.where",
    "torch.get_rng_state", "torch.set_rng_state", "torch.manual_seed", "torch.seed", "torch.initial_seed",
    "torch.cuda.get_rng_state", "torch.cuda.get_rng_state_all", "torch.cuda.set_rng_state",
    "torch.cuda.set_rng_state_all", "torch.cuda.manual_seed", "torch.cuda.manual_seed_all", "torch.cuda.seed",
    "torch.cuda.seed_all", "torch.cuda.initial_seed",
})


# The names this layer reports (callables it intercepts, aten ops it nets); the code each is reported under comes
# only from the rule catalogue, which must list every one of them (tests/graphcheck/test_runtime.py).
CODES = _rules.runtime_signatures()
# What fails a CUDA capture (measured on an H200): every readback, data-dependent shape,
# host-to-device copy and explicit sync. Host RNG, a `non_blocking` copy and a CPU-side `torch.tensor` capture (and
# are frozen or race); `torch.tensor(data, device=...)` is marked per event.
BREAKS_CAPTURE = {"GC101", "GC102", "GC103", "GC104", "GC105", "GC106", "GC107", "GC108", "GC109", "GC301", "GC302",
                  "GC303", "GC304", "GC305", "GC306", "GC307", "GC308", "GC402", "GC404", "GC601", "GC602", "GC603",
                  "GC604", "GC605"}
# Codes the runtime decides itself where one callable is two hazards (`.to` is a readback to the host or a copy to
# the device; `x[i] = v` is an index write or a host tensor written into device memory).
_H2D = "aten::_to_copy"


def _name(func) -> str:
    """`torch.Tensor.item`, `torch.nonzero`: the catalogue's spelling of a Python-level callable."""
    q = getattr(func, "__qualname__", getattr(func, "__name__", str(func)))
    owner, _, name = q.rpartition(".")
    if owner in ("TensorBase", "Tensor", "_TensorBase"):
        return f"torch.Tensor.{name}"
    if owner == "_VariableFunctionsClass" or getattr(torch, name, None) is func:
        return f"torch.{name}"
    if "<locals>" in q:      # torch.unique, torch.unique_consecutive: functions made by boolean_dispatch
        public = next((n for n in getattr(torch.functional, "__all__", ()) if getattr(torch, n, None) is func), None)
        if public is not None:
            return f"torch.{public}"
    return q


_SIMPLE = {f: _name(f) for f in (
    _T.item, _T.tolist, _T.numpy, _T.__array__, _T.cpu, _T.__bool__, _T.__int__, _T.__float__, _T.__complex__,
    _T.__index__, _T.__format__, _T.__repr__, _T.__str__, _T.nonzero, torch.nonzero, torch.argwhere, _T.unique,
    torch.unique, torch.unique_consecutive, _T.unique_consecutive, torch.bincount, _T.bincount, torch.masked_select,
    _T.masked_select, torch.equal, _T.equal, torch.allclose, _T.allclose)}
_FROM_HOST = {torch.tensor, torch.as_tensor, torch.from_numpy, _T.new_tensor}
# Factories that, without a device argument, build a CPU tensor (a host tensor on a GPU machine).
_FACTORIES = {torch.zeros, torch.ones, torch.empty, torch.full, torch.arange, torch.range, torch.linspace,
              torch.logspace, torch.eye, torch.rand, torch.randn, torch.randint, torch.randperm, torch.tril_indices,
              torch.triu_indices, torch.scalar_tensor}
_SPECIAL = {torch.where, torch.repeat_interleave, _T.repeat_interleave, _T.__getitem__, _T.__setitem__, _T.to,
            _T.cuda, _T.copy_}
_FMT = {"torch.Tensor.tolist": {"method": "tolist"}, "torch.Tensor.numpy": {"call": ".numpy()"},
        "torch.Tensor.__array__": {"call": "numpy.asarray(tensor)"}, "torch.Tensor.cpu": {"call": ".cpu()"},
        "torch.Tensor.__bool__": {"call": "bool"}, "torch.Tensor.__int__": {"call": "int"},
        "torch.Tensor.__float__": {"call": "float"}, "torch.Tensor.__complex__": {"call": "complex"},
        "torch.Tensor.__format__": {"call": "format"}, "torch.Tensor.__repr__": {"call": "repr"},
        "torch.Tensor.__str__": {"call": "str"}}
_TAG = "_graphcheck_host"
# Calls that move a tensor between host and device: followed on a CPU run even before any host tensor was seen.
_MOVES = {_T.to, _T.cuda, _T.cpu}
# A readback the CPU kernel of a call performs and its CUDA kernel does not (one_hot checks its index range on the
# host on CPU only): on a CPU tensor it is not reported, so the CPU verdict is the CUDA one.
_CPU_ONLY_READBACK = {F.one_hot}


def _is_tensor(x) -> bool:
    return isinstance(x, torch.Tensor)


def _tensors_in(args, kwargs) -> list[torch.Tensor]:
    out = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(x for x in a if isinstance(x, torch.Tensor))
    return out


def _device_arg(func, args, kwargs):
    dev = kwargs.get("device")
    if dev is None and func in (_T.to, _T.cuda):
        dev = next((a for a in args[1:] if isinstance(a, (str, torch.device))), None)
        if dev is None and func is _T.cuda:
            dev = "cuda"
        if dev is None:          # `.to(other)`: where `other` lives (the tensor, so a host tensor stays host)
            dev = next((a for a in args[1:] if isinstance(a, torch.Tensor)), None)
    return dev



def _index_rule(idx, value_is_host: bool, target: torch.Tensor | None) -> tuple[str, str] | None:
    """(name, call) of the hazard in an index read (`value_is_host` False) or an index write of host data."""
    items = idx if isinstance(idx, tuple) else (idx,)
    for it in items:
        if isinstance(it, slice) and any(_is_tensor(b) for b in (it.start, it.stop, it.step)):
            return "torch.Tensor.__index__", "x[a:b]"
    has_mask = any(_is_tensor(it) and it.dtype in (torch.bool, torch.uint8) for it in items)
    if not value_is_host:
        return ("torch.Tensor.__getitem__", "x[mask]") if has_mask else None
    # A Python scalar or list written by index. Slices/ellipsis leave a non-0-d destination, which torch fills with
    # `fill_` (no copy); a 0-d destination (every dim taken by an int), a list or tensor index (`index_put_`) copies
    # the host value to the device. A boolean mask becomes `masked_fill_` (no copy).
    if has_mask:
        return None
    if any(isinstance(it, list) or (_is_tensor(it) and it.dim() > 0) for it in items):
        return "torch.Tensor.__setitem__", "x[[i, j]] = v"
    if target is not None:
        ints = sum(1 for it in items if isinstance(it, int) or (_is_tensor(it) and it.dim() == 0))
        nones = sum(1 for it in items if it is None)
        if not any(isinstance(it, slice) or it is Ellipsis for it in items) and ints - nones >= target.dim():
            return "torch.Tensor.__setitem__", "x[i] = scalar"
        if Ellipsis in items and ints >= target.dim():
            return "torch.Tensor.__setitem__", "x[..., i] = scalar"
    return None


_OP_TYPES = (torch._ops.OpOverload, torch._ops.OpOverloadPacket)
# What the function layer does with a callable, decided once: "simple" (a hazard by name), "special" (decided by its
# arguments), "factory" (builds a tensor; followed on CPU targets), "quiet_on_cpu"; absent: nothing.
_KIND: dict = {**{f: "factory" for f in _FACTORIES}, **{f: "special" for f in (*_SPECIAL, *_FROM_HOST)},
               **{f: "simple" for f in _SIMPLE}, **{f: "quiet_on_cpu" for f in _CPU_ONLY_READBACK}}
_BUILTIN_NS = {"aten", "prims", "_c10d_functional", "c10d", "profiler", "quantized", "_quantized", "rngprims"}


def _device_context() -> bool:
    """Whether a `with torch.device(...)` block (or `torch.set_default_device`) gives factories their device."""
    from torch.utils._device import DeviceContext
    return any(isinstance(m, DeviceContext) for m in torch.overrides._get_current_function_mode_stack())


def _custom(func) -> bool:
    ns = func.namespace if isinstance(func, torch._ops.OpOverload) else func._qualified_op_name.split("::")[0]
    return ns not in _BUILTIN_NS


def _host_value(v) -> bool:
    return isinstance(v, (bool, int, float, complex)) or (
        isinstance(v, (list, tuple)) and bool(v) and not any(_is_tensor(x) for x in v))


class _FunctionLayer(TorchFunctionMode):
    def __init__(self, audit: "PortableAudit"):
        super().__init__()
        self.audit = audit

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        a = self.audit
        kind = _KIND.get(func)
        if kind is None and not a.host_seen:           # the common case: one dict lookup and a flag
            if type(func) in _OP_TYPES and _custom(func) and threading.get_ident() == a.thread:
                return a.enter_custom_op(self, func, args, kwargs)
            return func(*args, **kwargs)
        if a.depth or threading.get_ident() != a.thread:
            return func(*args, **kwargs)
        if kind == "quiet_on_cpu" and args and _is_tensor(args[0]) and args[0].device.type == "cpu":
            a.depth += 1
            try:
                return func(*args, **kwargs)
            finally:
                a.depth -= 1
        if kind == "simple":
            name = _SIMPLE[func]
            hit = (name, _FMT.get(name, {}))
        elif kind == "special":
            hit = self._special(func, args, kwargs)
        else:
            hit = None
        if hit is not None:
            a.event(hit[0], sys._getframe(1), hit[1])
        if a.tagging and (a.host_seen or kind == "factory" or func in _FROM_HOST or func in _MOVES):
            return a.follow(func, args, kwargs, hit is not None)
        if type(func) in _OP_TYPES and _custom(func):
            return a.enter_custom_op(self, func, args, kwargs)
        if hit is None:
            return func(*args, **kwargs)
        a.depth += 1
        try:
            return func(*args, **kwargs)
        finally:
            a.depth -= 1

    def _special(self, func, args, kwargs) -> tuple[str, dict] | None:
        a = self.audit
        if func in _FROM_HOST:
            data = args[1] if func is _T.new_tensor and len(args) > 1 else (args[0] if args else kwargs.get("data"))
            if _is_tensor(data):
                return None          # tensor-in, tensor-out: no host data crosses
            d = kwargs.get("device")
            on_device = d is not None and not a.host_device(d, sys._getframe(2), func)
            return _name(func), {"call": _name(func), "_breaks": on_device}
        if func is torch.where:
            return ("torch.where", {}) if len(args) + len(kwargs) == 1 else None
        if func in (torch.repeat_interleave, _T.repeat_interleave):
            repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
            if _is_tensor(repeats) and kwargs.get("output_size") is None:
                return _name(func), {"call": "repeat_interleave"}
            return None
        if func is _T.__getitem__ and len(args) == 2:
            hit = _index_rule(args[1], False, args[0])
            return (hit[0], {"call": hit[1]}) if hit else None
        if func is _T.__setitem__ and len(args) == 3:
            if _host_value(args[2]):
                hit = _index_rule(args[1], True, args[0])
            else:
                hit = _index_rule(args[1], False, args[0])
                if hit is not None and hit[1] == "x[mask]":
                    return None      # `x[mask] = v` is masked_fill_/index_put_ of a device mask: fixed shape
            return (hit[0], {"call": hit[1]}) if hit else None
        src = args[1] if func is _T.copy_ and len(args) > 1 else (args[0] if args else None)
        if not _is_tensor(src):
            return None
        if func is _T.to:
            dev = _device_arg(func, args, kwargs)
            if dev is not None and not a.is_host(src) and a.host_device(dev, sys._getframe(2), func):
                return "torch.Tensor.to", {"call": ".to('cpu')"}
        if kwargs.get("non_blocking") and a.is_host(src) and not src.is_pinned():
            return "torch.Tensor.copy_" if func is _T.copy_ else _H2D, {"call": f"{func.__name__}(non_blocking=True)",
                                                                       "_rule": "GC403"}
        return None


def _out_tensors(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for t in out if isinstance(t, torch.Tensor)]
    return []


_NET_OPS = ("_local_scalar_dense", "nonzero", "_unique", "_unique2", "unique_dim", "unique_consecutive", "bincount",
            "masked_select", "repeat_interleave.Tensor", "index.Tensor", "equal", "lift_fresh", "lift_fresh_copy",
            "is_nonzero", "_to_copy", "copy_", "histc", "_grouped_mm", "isin.Tensor_Tensor", "index_put_",
            "index_put")


@dataclass(frozen=True)
class KernelReadback:
    """A host read (or host-to-device copy) that an ATen CUDA kernel makes itself, for some arguments."""
    op: str              # the aten op the kernel net sees
    when: str            # the argument condition under which the CUDA kernel reads back
    why: str             # what the kernel does, with the ATen source that does it
    modelled: str        # how the portable audit decides it: "net" (every call), "args" (`_kernel_readback`), "none"


# Every op whose CUDA kernel syncs on the host by itself, checked against ATen's source (aten/src/ATen/native/...);
# tests/graphcheck/test_runtime.py proves each on a GPU with `torch.cuda.set_sync_debug_mode("error")` (and each
# argument set that does not sync) and checks that the CPU audit reports exactly the syncing calls.
KERNEL_READBACKS = (
    KernelReadback("isin", "test_elements.numel() >= int(10 * elements.numel() ** 0.145)",
                   "TensorCompare.cpp isin_Tensor_Tensor_out: above numpy's size heuristic it runs isin_sorting, "
                   "which calls at::_unique on both inputs; the CUDA unique (cuda/UniqueCub.cu) reads the number of "
                   "unique values back to size its output. assume_unique=True skips _unique but the sorting path "
                   "still synced on an H100 (torch 2.11, benchmarks/results/h100-2026-12-06-run38-readbacks.txt); "
                   "the sync site in that branch is not pinned down.", "args"),
    KernelReadback("_unique, _unique2, unique_dim, unique_consecutive", "always",
                   "cuda/Unique.cu, cuda/UniqueCub.cu: the output size is the count of distinct values, read back "
                   "(`num_out = ... .item()`).", "net"),
    KernelReadback("repeat_interleave.Tensor", "output_size is None",
                   "Repeat.cpp repeat_interleave_common: `total = output_size.value_or(cumsum[-1].item())`.", "net"),
    KernelReadback("nonzero, masked_select, index.Tensor with a bool/uint8 index", "always",
                   "cuda/Nonzero.cu copies the number of nonzeros to the host to size the output; masked_select and "
                   "boolean indexing go through nonzero (TensorAdvancedIndexing.cpp expandTensors).", "net"),
    KernelReadback("index.Tensor with an index tensor on the host", "an index of one or more dimensions on the CPU, "
                   "the indexed tensor on the device",
                   "TensorAdvancedIndexing.cpp make_info moves every index to the indexed tensor's device "
                   "(`index.to(self.device())`): a blocking pageable host-to-device copy.", "args"),
    KernelReadback("index_put_ / index_put", "a 0-d CPU value into a device tensor, unless the index is one bool "
                   "mask on the device without accumulate",
                   "TensorAdvancedIndexing.cpp _index_put_impl_: canDispatchToMaskedFill takes the masked_fill_ path "
                   "(`value.item()` of the CPU scalar: no device read); otherwise `value.to(self.device())`, a blocking "
                   "pageable host-to-device copy.", "args"),
    KernelReadback("multinomial", "never (current ATen)",
                   "Distributions.cpp multinomial_out: the no-replacement / one-sample fast path checks the "
                   "distribution with at::_assert_async on the device (older ATen read `.item()` there); the "
                   "with-replacement kernel (cuda/MultinomialKernel.cu) samples on the device.", "none"),
    KernelReadback("bincount", "always",
                   "cuda/SummaryOps.cu _bincount_cuda_template: `nbins = max(self.max().item() + 1, minlength)`, "
                   "minlength or not.", "net"),
    KernelReadback("histc", "min == max (the default 0, 0)",
                   "cuda/SummaryOps.cu _histc_cuda_template reads the input's min and max back to set the range.",
                   "args"),
    KernelReadback("_grouped_mm", "offs given, and not bf16 operands and output on sm90/sm100",
                   "cuda/GroupedBlas.cpp _grouped_mm_cuda: the CUTLASS kernel reads offs on the device; "
                   "_grouped_mm_fallback (GroupedMMUtils.h) copies offs to the host and loops over the groups.",
                   "args"),
)


def _isin_sorts(elements, test_elements) -> bool:
    """Whether ATen's isin takes its sorting path, which runs `_unique` (isin_Tensor_Tensor_out, the numpy
    heuristic `test.numel() < (int64_t)(10.0f * pow(elements.numel(), 0.145))` keeps the brute-force kernel)."""
    # assume_unique skips _unique, yet the sorting path synced on the GPU all the same (KERNEL_READBACKS): the
    # heuristic alone decides
    if not _is_tensor(elements) or not _is_tensor(test_elements) or elements.numel() == 0:
        return False
    return test_elements.numel() >= int(10.0 * math.pow(float(elements.numel()), 0.145))


def _masked_fill_path(self_t, indices, value, accumulate: bool, is_host) -> bool:
    """ATen's canDispatchToMaskedFill: a one-element CPU value, no accumulate and exactly one defined index, a bool or
    uint8 mask on self's device: index_put_ becomes `masked_fill_(mask, value.item())` (a CPU read, no copy)."""
    defined = [i for i in indices if i is not None]
    return (not accumulate and len(defined) == 1 and defined[0].dtype in (torch.bool, torch.uint8)
            and not is_host(defined[0]))


def _kernel_readback(name: str, args, kwargs) -> str | None:
    """The call to report where an op's kernel reads device data back on the host itself, in C++: the `.cpu()`/
    `.item()` it runs there re-enters the dispatcher below the Autograd key, so neither the net nor the function
    layer sees it, and on a CPU target the CPU kernel reads its own memory without any copy at all. Decided from
    the arguments, as the CUDA kernel decides (ATen's source):
    - `histc` with min == max (the default 0, 0) reads the input's min and max back to size its bins;
    - `_grouped_mm` with offsets takes the CUTLASS kernel only for bf16 operands and output on sm90/sm100; every
      other call runs `_grouped_mm_fallback`, which copies `offs` to the host and loops over the groups."""
    x = args[0] if args else None
    if not _is_tensor(x):
        return None
    if name == "histc":
        lo = args[2] if len(args) > 2 else kwargs.get("min", 0)
        hi = args[3] if len(args) > 3 else kwargs.get("max", 0)
        return "torch.histc(min == max)" if lo == hi and x.numel() > 0 else None
    if name == "_grouped_mm":
        w = args[1] if len(args) > 1 else kwargs.get("mat2")
        offs = args[2] if len(args) > 2 else kwargs.get("offs")
        out_dtype = args[4] if len(args) > 4 else kwargs.get("out_dtype")
        if offs is None or not _is_tensor(w):
            return None          # 3-d x 3-d is one bmm: no offsets to read
        bf16 = x.dtype == w.dtype == torch.bfloat16 and out_dtype in (None, torch.bfloat16)
        fast = bf16 and (x.device.type != "cuda" or (torch.version.hip is None and
                                                     torch.cuda.get_device_capability(x.device)[0] in (9, 10)))
        if fast:
            return None
        return f"torch._grouped_mm of {str(x.dtype)[6:]} x {str(w.dtype)[6:]} (its fallback reads offs)"
    return None


class _KernelNet:
    """Python kernels at the Autograd key of the hazard ops, registered for the audit and removed after it."""

    def __init__(self, audit: "PortableAudit"):
        self.audit = audit
        self.lib: Any = None

    def __enter__(self):
        self.lib = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")          # "overriding a previously registered kernel": that is the point
            for spec in _NET_OPS:
                if self.audit.tagging and spec in ("_to_copy", "copy_"):
                    continue     # on a CPU target no copy crosses a device; the function layer follows host tensors
                name, _, overload = spec.partition(".")
                packet = getattr(torch.ops.aten, name, None)
                op = getattr(packet, overload or "default", None) if packet is not None else None
                if op is not None:
                    self.lib.impl(op, self._kernel(op, name), "Autograd", with_keyset=True)
        return self

    def __exit__(self, *exc):
        if self.lib is not None:
            self.lib._destroy()
            self.lib = None

    def _kernel(self, op, name: str):
        audit = self.audit
        below = torch._C._after_autograd_keyset
        sig = f"aten::{name}"

        def kernel(ks, *args, **kwargs):
            if audit.depth == 0 and audit.enabled and threading.get_ident() == audit.thread:
                hit = audit.classify_aten(name, sig, args, kwargs)
                if hit is not None:
                    audit.event(hit[0], sys._getframe(1), hit[1])
            # As the autograd kernel this replaces does: what the op's kernel calls in turn dispatches below autograd
            # (without it a kernel's own `.item()` surfaced as a second event, and an out= op inside it refused
            # arguments that require grad).
            with torch._C._AutoDispatchBelowAutograd():
                return op.redispatch(ks & below, *args, **kwargs)
        return kernel


def _patch_targets() -> list[tuple[Any, str, str, dict]]:
    """(owner, attribute, catalogue name, fmt) of the non-torch-op hazards wrapped during an audit."""
    out: list[tuple[Any, str, str, dict]] = [(torch.cuda, "synchronize", "torch.cuda.synchronize", {"call": "torch.cuda.synchronize()"}),
                                             (torch.cuda, "empty_cache", "torch.cuda.empty_cache", {"call": "torch.cuda.empty_cache()"})]
    acc = getattr(torch, "accelerator", None)
    for attr in ("synchronize", "empty_cache"):
        if acc is not None and hasattr(acc, attr):
            out.append((acc, attr, f"torch.accelerator.{attr}", {"call": f"torch.accelerator.{attr}()"}))
    for cls in (torch.cuda.Stream, torch.cuda.Event):
        out.append((cls, "synchronize", f"torch.cuda.{cls.__name__}.synchronize", {"call": f"{cls.__name__}.synchronize()"}))
        out.append((cls, "query", f"torch.cuda.{cls.__name__}.query", {"call": f"{cls.__name__}.query()"}))
    for name in ("random", "randint", "randrange", "uniform", "gauss", "normalvariate", "choice", "choices", "shuffle", "sample"):
        out.append((random, name, f"random.{name}", {"call": f"random.{name}", "_rule": "GC501"}))
    for name in sorted(n for n in EMITS if CODES.get(n) == "GC503"):     # torch.manual_seed, torch.cuda.get_rng_state
        mod, _, attr = name.rpartition(".")
        out.append((torch.cuda if mod == "torch.cuda" else torch, attr, name, {"call": f"{name}()"}))
    np = sys.modules.get("numpy")
    if np is not None:
        for name in ("rand", "randn", "randint", "random", "random_sample", "choice", "normal", "uniform", "permutation", "shuffle"):
            if hasattr(np.random, name):
                out.append((np.random, name, f"numpy.random.{name}", {"call": f"numpy.random.{name}", "_rule": "GC502"}))
    return out


class PortableAudit:
    """Context manager: every hazard the step performs while inside it is recorded in `recorder`.

    `device` is where the target lives. On a CPU target ("cpu", the default without CUDA) tensors are tagged by
    origin so host-to-device copies show as on a GPU; on a CUDA target the tensors' own devices say it.
    """

    def __init__(self, recorder: Recorder | None = None, device: str | None = None, host_built: bool = False):
        self.recorder = recorder if recorder is not None else Recorder()
        self.depth = 0
        self.thread = threading.get_ident()
        self._stack = contextlib.ExitStack()
        self.enabled = False
        self.cuda_ok = torch.cuda.is_available()
        dev = device if device is not None else ("cuda" if self.cuda_ok else "cpu")
        self.tagging = torch.device(dev).type == "cpu"
        # whether a host tensor exists yet (then every op is followed): one the step built, or one the target's
        # factory built before the step (`host_built`, counted by `placing`)
        self.host_seen = host_built and self.tagging
        self.host_made: list = []        # weak references to the host tensors tagged (what `placing` counts)
        self.device_named = False        # whether a device argument of value "cpu" was the run's device

    def active(self) -> bool:
        return self.enabled and threading.get_ident() == self.thread

    recording = True          # False while a target is being built: its tensors are placed, 
    def event(self, name: str, frame, fmt: dict) -> None:
        if not self.recording:
            return
        rule = fmt.get("_rule") or CODES[name]
        stack = user_stack(frame)
        if stack:
            nvtx.mark(f"graphcheck {rule} {name}")
        breaks = fmt.get("_breaks", rule in BREAKS_CAPTURE)
        op = name[len("torch."):] if name.startswith("torch.Tensor.") else name   # shown as `Tensor.item`
        fmt = {"call": op, "method": op, **{k: v for k, v in fmt.items() if k not in ("_rule", "_breaks")}}
        self.recorder.record(rule, op, stack, breaks_capture=breaks, **fmt)

    # -- device awareness -------------------------------------------------------------------------------
    def is_host(self, t: torch.Tensor) -> bool:
        if t.device.type != "cpu":
            return False
        return getattr(t, _TAG, False) if self.tagging else True

    def _tag(self, ts) -> None:
        for t in ts:
            try:
                setattr(t, _TAG, True)
            except (AttributeError, RuntimeError):
                pass
        self.host_seen = True
        for t in ts:
            self.host_made.append(weakref.ref(t))

    def host_device(self, d, frame, func) -> bool:
        """Whether a device argument `d` of `func` (called from `frame`) names the host on every machine. On a GPU
        run its value says it; on a CPU run the run's own device is "cpu" too, so the call's source is asked: a
        literal host device, or a name bound to one, is the host; the run's device expression or anything the
        source cannot tell is the device."""
        if isinstance(d, torch.Tensor):
            return self.is_host(d)
        if isinstance(d, int) or torch.device(d).type != "cpu":
            return False
        if not self.tagging:
            return True
        while frame is not None and is_internal(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is None:
            self.device_named = True
            return False
        names = (func.__name__,) if func not in (_T.to, _T.cuda) else ("to", "cuda")
        host = device_of_call(frame, names, "device", 0 if func is _T.to else None, self.placement_of) == HOST
        self.device_named |= not host
        return host

    def placement_of(self, obj) -> str | None:
        """HOST/DEV of a live tensor (what `x.device` in a `device=` argument means), None for anything else."""
        if not isinstance(obj, torch.Tensor):
            return None
        return HOST if self.is_host(obj) else DEV

    def follow(self, func, args, kwargs, classified: bool):
        """Run a call on a CPU target and keep track of host tensors: where one meets device memory, report the
        host-to-device copy a GPU would make. A tensor is made on the host by a factory given no device (outside
        a `with torch.device(...)` block) or a host device, from Python data without a device, or by a move to
        the host (`.cpu()`, `.to("cpu")`); anything made from device tensors or moved to the device is device."""
        ins = _tensors_in(args, kwargs)
        host = [t for t in ins if getattr(t, _TAG, False)]
        dev = [t for t in ins if not getattr(t, _TAG, False)]
        out_is_host = False
        if func in _FACTORIES or func in _FROM_HOST:
            d = kwargs.get("device")
            if d is None:
                out_is_host = not dev and not _device_context()
            else:
                out_is_host = self.host_device(d, sys._getframe(2), func)
        elif func is _T.cpu:
            out_is_host = True
        elif func in (_T.to, _T.cuda):
            d = _device_arg(func, args, kwargs)
            src = args[0] if args and _is_tensor(args[0]) else None
            if d is None:
                out_is_host = bool(host) and src is not None and getattr(src, _TAG, False)
            elif self.host_device(d, sys._getframe(2), func):
                out_is_host = True
            elif src is not None and getattr(src, _TAG, False):
                self.event(_H2D, sys._getframe(2), {"call": f"{_name(func)} of a tensor built on the host",
                                                   "_rule": CODES.get(_H2D, "GC402")})
                self.depth += 1
                try:
                    return func(*args, **kwargs).clone()     # a copy, as on a GPU: the device tensor is new
                finally:
                    self.depth -= 1
        elif host:
            big = [t for t in host if t.dim() > 0]
            if dev and (big or func is _T.copy_):
                # A 0-d host tensor passed to a device op is a CPU scalar (allowed); anything else is a copy. (A 0-d
                # one written by index is the kernel net's to judge: ATen copies it, or fills from it by mask.)
                self.event(_H2D, sys._getframe(2), {"call": f"{_name(func)} mixing a host-built tensor into device memory",
                                                   "_rule": CODES.get(_H2D, "GC402")})
                classified = True
            out_is_host = not dev
        # Quiet the kernel net only under a call already reported (one hazard, one event): an unclassified op
        # run here must still be seen by it (a `histc` after the step built a host tensor).
        self.depth += classified
        try:
            out = func(*args, **kwargs)
        finally:
            self.depth -= classified
        if out_is_host:
            self._tag(_out_tensors(out))
        return out

    # -- the kernel net -------------------------------------------------------------------------------------
    def classify_aten(self, name: str, sig: str, args, kwargs) -> tuple[str, dict] | None:
        if name in ("_local_scalar_dense", "is_nonzero"):
            return sig, {"call": name}
        if name in ("histc", "_grouped_mm"):
            call = _kernel_readback(name, args, kwargs)
            return ("torch.Tensor.cpu", {"call": call}) if call else None
        if name == "isin":
            test = args[1] if len(args) > 1 else kwargs.get("test_elements")
            if _isin_sorts(args[0] if args else kwargs.get("elements"), test):
                return "aten::_unique", {"call": "torch.isin (a large test set: its sorting path reads back)"}
            return None
        if name in ("index_put_", "index_put"):
            dst = args[0] if args else None
            indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
            value = args[2] if len(args) > 2 else kwargs.get("values")
            acc = bool(args[3] if len(args) > 3 else kwargs.get("accumulate", False))
            if (_is_tensor(dst) and _is_tensor(value) and value.dim() == 0 and self.is_host(value)
                    and not self.is_host(dst) and not _masked_fill_path(dst, indices, value, acc, self.is_host)):
                return _H2D, {"call": "index_put_ of a CPU scalar (`value.to(self.device())`)"}
            return None
        if name == "index":
            idx = args[1] if len(args) > 1 else []
            if any(_is_tensor(i) and i.dtype in (torch.bool, torch.uint8) for i in idx if i is not None):
                return sig, {"call": "x[mask]"}
            src = args[0] if args else None
            if (_is_tensor(src) and not self.is_host(src)
                    and any(_is_tensor(i) and i.dim() > 0 and self.is_host(i) for i in idx if i is not None)):
                return _H2D, {"call": "x[idx] with an index tensor on the host (`index.to(self.device())`)"}
            return None
        if name == "repeat_interleave":
            return None if kwargs.get("output_size") is not None else (sig, {"call": name})
        if name in ("_to_copy", "copy_"):
            src = args[1] if name == "copy_" and len(args) > 1 else (args[0] if args else None)
            dst = kwargs.get("device") if name == "_to_copy" else (args[0].device if args and _is_tensor(args[0]) else None)
            if not _is_tensor(src) or dst is None or torch.device(dst).type == src.device.type:
                return None
            if src.device.type == "cpu":
                return sig, {"call": name}
            return "torch.Tensor.cpu", {"call": name}
        if name in ("lift_fresh", "lift_fresh_copy"):
            return sig, {"call": "torch.tensor"}
        if name == "equal":
            return sig, {"call": "torch.equal"}
        return sig, {"call": name}

    # -- custom ops -----------------------------------------------------------------------------------------
    def enter_custom_op(self, layer: TorchFunctionMode, func, args, kwargs):
        """Run a custom op's kernel with the function mode pushed again, so its Python body is audited too."""
        if isinstance(func, torch._ops.OpOverloadPacket):
            func = getattr(func, "default", None) or func
            if isinstance(func, torch._ops.OpOverloadPacket):
                return func(*args, **kwargs)
        dev = next((t.device.type for t in _tensors_in(args, kwargs)), "cpu")
        key = getattr(torch._C.DispatchKey, {"cpu": "CPU", "cuda": "CUDA", "meta": "Meta"}.get(dev, "CPU"))
        try:
            with layer:
                return func.redispatch(torch._C.DispatchKeySet(key), *args, **kwargs)
        except NotImplementedError:
            return func(*args, **kwargs)

    def _wrap(self, owner, attr: str, name: str, fmt: dict) -> None:
        orig = getattr(owner, attr, None)
        if orig is None:
            return
        audit = self
        # a sync or cache call on a machine without a device has nothing to wait for: it is recorded, not run
        is_sync = owner in (torch.cuda, torch.cuda.Stream, torch.cuda.Event, getattr(torch, "accelerator", None)) \
            and attr in ("synchronize", "query", "empty_cache")

        def wrapper(*a, **k):
            if audit.active() and audit.depth == 0:
                audit.event(name, sys._getframe(1), fmt)
                if is_sync and not audit.cuda_ok:
                    return True if attr == "query" else None
                audit.depth += 1            # one hazard, one event (torch.manual_seed calls torch.cuda.manual_seed_all)
                try:
                    return orig(*a, **k)
                finally:
                    audit.depth -= 1
            return orig(*a, **k)

        wrapper.__wrapped__ = orig  # type: ignore[attr-defined]
        setattr(owner, attr, wrapper)
        self._stack.callback(setattr, owner, attr, orig)

    def __enter__(self) -> "PortableAudit":
        self.thread = threading.get_ident()
        try:
            for owner, attr, name, fmt in _patch_targets():
                self._wrap(owner, attr, name, fmt)
            self._stack.enter_context(_KernelNet(self))
            self._stack.enter_context(_FunctionLayer(self))
        except BaseException:
            self._stack.close()
            raise
        self.enabled = True
        return self

    def __exit__(self, *exc) -> None:
        self.enabled = False
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


@contextlib.contextmanager
def placing(device: str | None, factory: bool = False):
    """Run code that is not audited (a target's factory, the warm-up steps) with the placement of the tensors it
    makes followed as the audited step's are, on a CPU run: a factory without a device, Python data or a literal host
    device make host tensors, the run's device expression device ones, `.to(device)` a device copy. So a part built
    before the step is judged on where its tensors really live (HF's `SuppressTokensLogitsProcessor(ids)` keeps
    `torch.tensor(ids, device="cpu")`, its default, and moves it with `.to(scores.device)` in every call: on a GPU
    a pageable copy per step), and a one-time move in the warm-up (`self.ids = self.ids.to(x.device)`) happens
    before the audit as it does on a GPU. Nothing is reported; yields a list that receives the number of host
    tensors still alive when the block ends (a Target's `host_built`); tensors the block appends to that list before
    it ends are device (a target's state)."""
    made: list = []
    cpu = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu")).type == "cpu"
    if not cpu:
        yield made
        made[:] = [0]
        return
    audit = PortableAudit(Recorder(), device="cpu")
    audit.recording = False
    with _FunctionLayer(audit):
        audit.enabled = True
        try:
            yield made
        finally:
            audit.enabled = False
            alive = [t for r in audit.host_made if (t := r()) is not None and getattr(t, _TAG, False)]
            if factory and not audit.device_named:
                # A factory that never names the run's device (every tensor made without one: a CPU program, such
                # as a gloo-sharded step) has no device to tell the host from: nothing it made is host. (Warm-up
                # steps keep what they made: the factory already said whether the target knows a device.)
                made.extend(alive)
            for t in made:
                if isinstance(t, torch.Tensor) and getattr(t, _TAG, False):
                    delattr(t, _TAG)
            # what is still alive and host once built: a factory's temporaries (`torch.empty` under an
            # `nn.Parameter`, a buffer moved to the device) are not
            made[:] = [sum(1 for t in alive if getattr(t, _TAG, False))]
