"""The Target protocol: what the runtime layers run. A target is referenced as `module:factory`."""
from __future__ import annotations

import importlib
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:          # the protocol itself needs no torch; only the runtime layers do
    import torch


class TargetError(ValueError):
    """A target spec that cannot be resolved into a Target; names the spec and what was found."""


@dataclass
class Target:
    """One decode step and its data.

    step(inputs)     runs one step reading the given input tensors (a tensor, or a tuple/list/dict of them)
    make_inputs(k)   returns step k's inputs: same shapes every k, fresh data
    state()          the dict of tensors the step mutates (caches, ring buffers, positions, output buffers)
    """
    step: Callable[[Any], Any]
    make_inputs: Callable[[int], Any]
    state: Callable[[], dict[str, "torch.Tensor"]]
    name: str = "target"
    device: str | None = None          # where the target lives; None = inferred from its inputs
    warmup: int | None = None          # steps before auditing (None = configured default)
    host_built: int = 0                # host tensors its factory made on a CPU run (`build_target` counts them)

    def location(self) -> tuple[str, int, str]:
        """(file, line, qualified name) of the step function, for findings no op can name."""
        fn = inspect.unwrap(self.step)                 # through graphcheck's own guard (runtime/boundary.py)
        fn = inspect.unwrap(getattr(fn, "__func__", fn))
        code = getattr(fn, "__code__", None)
        if code is None:
            return "<unknown>", 0, self.name
        return code.co_filename, code.co_firstlineno, getattr(code, "co_qualname", code.co_name)


def load_target(spec: str, root: Path | None = None, device: str | None = None) -> Target:
    """Resolve `module:factory` and build the Target. `device` (the command's --device, None for auto) is passed
    to a factory that takes a `device` parameter. Everything that can go wrong on the user's side (an import
    that fails, a missing attribute, a factory that needs arguments or raises, a wrong return type) is a
    TargetError naming the spec and what was found; the CLI prints it on one line (exit 2)."""
    mod_name, sep, attr = spec.partition(":")
    if not sep or not mod_name or not attr:
        raise TargetError(f"target {spec!r}: expected 'module:factory'")
    if root is not None and str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        mod = importlib.import_module(mod_name)
    except (Exception, SystemExit) as e:   # ImportError, or whatever the module raises (sys.exit included)
        raise TargetError(f"target {spec!r}: cannot import module {mod_name!r} ({type(e).__name__}: {_first(e)})") from None
    obj = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise TargetError(f"target {spec!r}: module {mod_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if isinstance(obj, Target):
        t = obj
    elif callable(obj):
        kwargs: dict = {}
        try:
            sig = inspect.signature(obj)
            if device is not None and "device" in sig.parameters:
                kwargs["device"] = device
            sig.bind(**kwargs)
        except TypeError as e:
            raise TargetError(f"target {spec!r}: the factory must be callable without arguments ({e})") from None
        except ValueError:
            pass   # a builtin without a signature: calling it tells
        try:
            t = build_target(obj, device, kwargs)
        except (Exception, SystemExit) as e:     # a factory calling sys.exit must not end graphcheck silently
            raise TargetError(f"target {spec!r}: the factory raised {type(e).__name__}: {_first(e)}") from None
    else:
        raise TargetError(f"target {spec!r}: {attr!r} is a {type(obj).__name__}, not a factory; expected graphcheck.Target or a factory returning one")
    if not isinstance(t, Target):
        raise TargetError(f"target {spec!r}: factory returned {type(t).__name__}, expected graphcheck.Target")
    if not t.name or t.name == "target":
        t.name = spec
    return t


def build_target(factory: Callable[..., Any], device: str | None = None, kwargs: dict | None = None) -> Any:
    """Call a target factory with the runtime placing the tensors it makes (`runtime.portable.placing`): on a CPU
    run, a tensor built before the step with a host default is host, as it is on a GPU. `device` is the run's
    device (None: CUDA where available); the factory is called with `kwargs` only."""
    from .runtime.portable import placing
    with placing(device, factory=True) as made:
        t = factory(**(kwargs or {}))
        if isinstance(t, Target):
            made.extend(t.state().values())    # what a graph captures is device memory, however it was made
    if isinstance(t, Target):
        t.host_built = made[0]
    return t


def _first(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else "(no message)"
