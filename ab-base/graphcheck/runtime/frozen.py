"""A step frozen as the aten ops it ran, replayable on new inputs: the CPU stand-in for a captured CUDA graph.

Recording runs the step once under a dispatch mode and keeps, for each aten op, its arguments with every tensor
that an earlier op (or the step's inputs) produced replaced by a reference. Everything else is kept as it was:
state, parameters and host-built tensors are the same objects (replay reads and writes them in place, as a graph
replays into the buffers it captured), and Python scalars, host ints and values read back from the device are
baked in, exactly as capture bakes them. Cheaper than `make_fx` (no fake tensors, no proxies), and a replayed op
is the eager op it recorded, so results line up op for op.
"""
from __future__ import annotations

import sys
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from .attribution import first_user_frame


class _Ref:
    __slots__ = ("n",)

    def __init__(self, n: int):
        self.n = n


class _Rec(TorchDispatchMode):
    def __init__(self, leaves: list):
        super().__init__()
        self.slot: dict[int, int] = {}
        self.keep: list[Any] = []            # holds every tensor seen, so no id is reused while recording
        self.ops: list[tuple] = []
        self.frames: list = []               # the user line of each op (where a replay that raises points)
        self.n = 0
        for t in leaves:
            self._new(t)

    def _new(self, t) -> int:
        n = self.n
        self.n += 1
        if isinstance(t, torch.Tensor):
            self.slot[id(t)] = n
            self.keep.append(t)
        return n

    def _ref(self, x):
        if isinstance(x, torch.Tensor):
            n = self.slot.get(id(x))
            if n is None:
                n = self._waited(x)
            return _Ref(n) if n is not None else x
        return x

    def _waited(self, x) -> int | None:
        """A functional collective's result reaches later ops wrapped in an AsyncCollectiveTensor whose wait runs
        inside the wrapper's own dispatch, out of this mode's sight (torch 2.8 does this on gloo). Unrecorded, the
        wrapper would be baked in as a constant and replay would read the eager step's collective result; the
        wait is recorded here instead, on the recorded collective output it wraps."""
        inner = getattr(x, "elem", None)
        src = self.slot.get(id(inner)) if isinstance(inner, torch.Tensor) else None
        if src is None or not hasattr(torch.ops, "_c10d_functional"):
            return None
        n = self._new(x)
        self.ops.append((torch.ops._c10d_functional.wait_tensor.default, (_Ref(src),), {}, [n]))
        self.frames.append(None)
        return n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        a, kw = pytree.tree_map(self._ref, (args, kwargs))
        outs = [self._new(t) if isinstance(t, torch.Tensor) else None for t in _flat(out)]
        self.ops.append((func, a, kw, outs))
        self.frames.append(first_user_frame(sys._getframe(1)))
        return out


def _flat(out) -> list:
    if isinstance(out, (list, tuple)):
        return list(out)
    return [out]


class FrozenStep:
    """`record(fn, leaves)` runs `fn(*leaves)` once; `run(leaves)` replays its ops on other leaves."""

    def __init__(self, ops: list[tuple], n_in: int, n_slots: int, out_template: Any, frames: list | None = None):
        self.ops = ops
        self.frames = frames or [None] * len(ops)
        self.n_in = n_in
        self.n_slots = n_slots
        self.out_template = out_template
        self.current: int | None = None          # index of the op running (for an error's location)

    @classmethod
    def record(cls, fn, leaves: list) -> "FrozenStep":
        rec = _Rec(leaves)
        with rec:
            out = fn(*leaves)
        template = pytree.tree_map(rec._ref, out)
        return cls(rec.ops, len(leaves), rec.n, template, rec.frames)

    def constants(self) -> list:
        return [x for _, a, kw, _ in self.ops for x in pytree.tree_leaves((a, kw)) if not isinstance(x, _Ref)]

    def run(self, leaves: list, keep: list | None = None):
        """Replay on `leaves`; with `keep`, append (op name, cloned results) of every op to it."""
        vals: list[Any] = list(leaves) + [None] * (self.n_slots - len(leaves))
        sub = lambda x: vals[x.n] if isinstance(x, _Ref) else x  # noqa: E731
        for i, (func, a, kw, outs) in enumerate(self.ops):
            self.current = i
            a2, kw2 = pytree.tree_map(sub, (a, kw))
            out = func(*a2, **kw2)
            res = _flat(out)
            for s, t in zip(outs, res):
                if s is not None:
                    vals[s] = t
            if keep is not None:
                keep.append((str(func), [t.detach().clone() for t in res if isinstance(t, torch.Tensor)]))
        self.current = None
        return pytree.tree_map(sub, self.out_template)
