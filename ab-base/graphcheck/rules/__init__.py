"""The rule catalogue: one module per rule (``gcNNN_name.py``), each with its documentation, its runtime
signature and its checkers. This package never imports torch: the static scan must not pay for it."""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from ._base import Family, Rule

_TITLES = {
    "GC0": "Capture-under-test", "GC1": "Host readback", "GC2": "Host control flow on device values",
    "GC3": "Data-dependent shapes", "GC4": "Host-to-device traffic and per-step allocation",
    "GC5": "Host random number generators", "GC6": "Explicit syncs", "GC7": "Sneaky syncs", "GC8": "Custom kernels",
    "GC9": "Scan hygiene",
}


def _load() -> list[ModuleType]:
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name.startswith("gc") and m.name[2:5].isdigit())
    return [importlib.import_module(f"{__name__}.{n}") for n in names]


MODULES: list[ModuleType] = _load()
RULES: dict[str, Rule] = {}
for _m in MODULES:
    if _m.RULE.code in RULES:
        raise ImportError(f"rule code {_m.RULE.code} is declared by two modules ({RULES[_m.RULE.code].name}, {_m.__name__})")
    RULES[_m.RULE.code] = _m.RULE
FAMILIES: list[Family] = [Family(title, [r for c, r in RULES.items() if c.startswith(prefix)])
                          for prefix, title in _TITLES.items()]
# node type -> checkers of every rule, in code order; the engine calls them during its one walk of a file.
# Call checkers are further split: by call name, by qualified-name prefix, and those that see every call.
CHECKERS: dict[type, list] = {}
CALLS_BY_NAME: dict[str, list] = {}
CALLS_BY_PREFIX: list[tuple[str, object]] = []
CALLS_ANY: list = []
for _m in MODULES:
    for _fn in vars(_m).values():
        for _t in getattr(_fn, "node_types", ()):
            CHECKERS.setdefault(_t, []).append(_fn)
            if _t.__name__ == "Call":
                if _fn.names:
                    for _n in _fn.names:
                        CALLS_BY_NAME.setdefault(_n, []).append(_fn)
                elif _fn.prefixes:
                    CALLS_BY_PREFIX.extend((_p, _fn) for _p in _fn.prefixes)
                else:
                    CALLS_ANY.append(_fn)


def runtime_signatures() -> dict[str, str]:
    """Each aten op (`aten::nonzero`) or torch callable (`torch.Tensor.item`) the runtime layers observe, mapped to
    the code of the one rule that owns that hazard. A name claimed by two rules is an error."""
    out: dict[str, str] = {}
    for m in MODULES:
        for name in m.RUNTIME:
            if name in out:
                raise ValueError(f"runtime signature {name!r} is claimed by both {out[name]} and {m.RULE.code}")
            out[name] = m.RULE.code
    return out


def select_codes(select: list[str] | None, ignore: list[str] | None) -> set[str]:
    """Resolve --select/--ignore lists of codes or prefixes ('GC1', 'GC10') to a set of codes."""
    def expand(items: list[str], what: str) -> set[str]:
        out: set[str] = set()
        for item in items:
            item = item.strip().upper()
            if not item:    # `select = [""]` would select nothing: every scan a vacuous "All checks passed"
                raise ValueError(f"empty rule code in {what}; expected a code or prefix such as GC1 or GC305")
            hits = {c for c in RULES if c.startswith(item)}
            if not hits:
                raise ValueError(f"unknown rule code or prefix {item!r} in {what}; valid codes: {', '.join(sorted(RULES))}")
            out |= hits
        return out
    chosen = expand(select, "select") if select else set(RULES)
    return chosen - (expand(ignore, "ignore") if ignore else set())


def format_message(code: str, **fmt: str) -> str:
    msg = RULES[code].message
    try:
        return msg.format(**fmt)
    except (KeyError, IndexError):
        return msg
