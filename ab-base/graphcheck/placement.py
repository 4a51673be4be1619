"""Where a value lives: the one vocabulary of placements, shared by the static scan and the runtime layers.

``DEV`` a tensor on the accelerator; ``TENSOR`` a tensor whose placement is not known (treated as likely on the
device: the readback rules fire on it); ``HOST`` a pageable CPU tensor; ``PINNED`` a pinned CPU tensor; ``NP`` a
NumPy array; ``PY`` a plain Python value; ``None`` unknown, not known to be a tensor. The strings are the ones the
static inference has always used, so its results and the runtime's compare as they are.

`device_literal` judges a `device=` argument the way both layers need it on a machine where the run's device may
itself be the CPU: a literal host device (`"cpu"`, `torch.device("cpu")`) is the host, a literal accelerator
(`"cuda:0"`) the device, and any other expression (`DEV`, `x.device`, `self.device`) says nothing by itself.
Nothing here imports torch.
"""
from __future__ import annotations

import ast

DEV, TENSOR, HOST, PINNED, NP, PY = "dev", "tensor", "host", "pinned", "numpy", "py"
TENSORS = (DEV, TENSOR, HOST, PINNED)
ON_DEVICE = (DEV, TENSOR)
ON_HOST = (HOST, PINNED, NP, PY)


def device_string(text: str) -> str:
    """The placement a device string names: `"cpu"`, `"cpu:0"` the host, anything else (`"cuda"`, `"cuda:1"`,
    `"mps"`, `"meta"`) the device."""
    return HOST if text.split(":", 1)[0].strip() == "cpu" else DEV


def device_literal(node: ast.AST | None) -> str | None:
    """HOST or DEV where the expression spells its device out (a string constant, `torch.device("cpu")`,
    `torch.device("cuda", 0)`), None where it does not (a name, an attribute, a call)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return device_string(node.value)
    if (isinstance(node, ast.Call) and node.args and not node.keywords
            and ((isinstance(node.func, ast.Attribute) and node.func.attr == "device")
                 or (isinstance(node.func, ast.Name) and node.func.id == "device"))):
        return device_literal(node.args[0]) if isinstance(node.args[0], ast.Constant) else None
    return None
