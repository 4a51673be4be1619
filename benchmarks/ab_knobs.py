"""`--knob MODULE.NAME=VALUE` for the benchmark scripts: set an existing module constant (a launch shape, a join, a
fusion switch) in this process, for an A/B in one call or to gate a candidate before it is the default."""
from __future__ import annotations

import ast
import importlib
import sys

HELP = ("set a module's launch, join or fusion constant in this process (a Python literal of its type), e.g. "
        "dsv4_kernels.attention.triton_kernel.PV_COLS=0 or dsv4_model.attention.NORM_FP8=True; repeatable")


def set_knob(knob: str) -> str | None:
    """MODULE.NAME=VALUE: set an existing module constant to a Python literal of its type. None, or what was wrong."""
    target, eq, value = knob.partition("=")
    mod_name, _, name = target.rpartition(".")
    if not eq or not mod_name or not name:
        return "expected MODULE.NAME=VALUE"
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        return f"module {mod_name!r} does not import ({e})"
    if not hasattr(mod, name):
        return f"module {mod_name} has no {name}"
    try:
        val = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return f"value {value!r} is not a Python literal"
    old = getattr(mod, name)
    if type(val) is not type(old):
        return f"expected a {type(old).__name__} as {name} is, found {type(val).__name__}"
    setattr(mod, name, val)
    return None


def apply(knobs: list[str], prog: str) -> bool:
    """Set each knob, printing it; on the first bad one print what was wrong (naming the script and the knob) and
    return False (the caller exits 2)."""
    for knob in knobs:
        err = set_knob(knob)
        if err:
            print(f"{prog}: --knob {knob}: {err}", file=sys.stderr)
            return False
        print(f"knob: {knob}")
    return True
