"""Tensor plumbing shared by the capture layers: flatten nested step inputs/outputs, copy, snapshot, compare."""
from __future__ import annotations

from typing import Any

import torch


def flatten(obj: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    """Name every tensor in a tensor / tuple / list / dict tree ('out', 'out[0]', 'out.logits')."""
    out: dict[str, torch.Tensor] = {}
    if isinstance(obj, torch.Tensor):
        out[prefix or "out"] = obj
    elif isinstance(obj, dict):
        for k in obj:
            out.update(flatten(obj[k], f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}[{i}]"))
    return out


def device_of(target_device: str | None, inputs: Any) -> str:
    """Where a target lives: its declared device, else its first input tensor's, else the CPU."""
    if target_device is not None:
        return target_device
    ts = list(flatten(inputs).values())
    return ts[0].device.type if ts else "cpu"


def copy_into(static: Any, fresh: Any, where: str = "inputs") -> None:
    """Copy a fresh input tree into the static one; shapes and dtypes must match (a graph's buffers are fixed)."""
    s, f = flatten(static, where), flatten(fresh, where)
    if s.keys() != f.keys():
        raise ValueError(f"{where}: make_inputs returned a different structure: expected {sorted(s)}, found {sorted(f)}")
    for name, t in s.items():
        n = f[name]
        if n.shape != t.shape or n.dtype != t.dtype:
            raise ValueError(f"{name}: make_inputs must keep shapes and dtypes fixed: expected {tuple(t.shape)} {t.dtype}, "
                             f"found {tuple(n.shape)} {n.dtype}")
        t.copy_(n)


def snapshot(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in state.items()}


def restore(state: dict[str, torch.Tensor], snap: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for k, v in state.items():
            v.copy_(snap[k])


def clone_tree(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: clone_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(clone_tree(v) for v in obj) if not hasattr(obj, "_fields") else type(obj)(*map(clone_tree, obj))
    return obj


def first_diff(expected: dict[str, torch.Tensor], actual: dict[str, torch.Tensor]) -> tuple[str, str] | None:
    """(tensor name, description) of the first tensor that is not bit-identical, or None. NaN equals NaN."""
    for name, e in expected.items():
        a = actual.get(name)
        if a is None:
            return name, "missing from the replay"
        if a.shape != e.shape or a.dtype != e.dtype:
            return name, f"shape/dtype {tuple(a.shape)} {a.dtype} vs eager {tuple(e.shape)} {e.dtype}"
        if e.is_floating_point() or e.is_complex():
            same = torch.equal(torch.nan_to_num(a, nan=0.0), torch.nan_to_num(e, nan=0.0)) and torch.equal(a.isnan(), e.isnan())
        else:
            same = torch.equal(a, e)
        if not same:
            if e.is_floating_point():
                diff = (a.double() - e.double()).abs().nan_to_num(nan=float("inf")).max().item()
            else:
                diff = (a.long() - e.long()).abs().max().item()
            return name, f"{diff:.6g}"
    return None
