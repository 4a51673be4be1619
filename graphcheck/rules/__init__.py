"""The rule catalogue: one module per hazard family, each holding its rules' documentation and checks."""
from __future__ import annotations

from . import custom_kernels, dynamic_shape, explicit_sync, host_branch, host_rng, host_transfer, meta, readback, sneaky
from ._base import Family, Rule

FAMILIES: list[Family] = [readback.FAMILY, host_branch.FAMILY, dynamic_shape.FAMILY, host_transfer.FAMILY,
                          host_rng.FAMILY, explicit_sync.FAMILY, sneaky.FAMILY, custom_kernels.FAMILY, meta.FAMILY]
RULES: dict[str, Rule] = {code: r for fam in FAMILIES for code, r in fam.rules.items()}
# Runtime-only codes (the capture layer's own findings) are documented here too so `explain` knows every code.
from .capture_rules import FAMILY as _CAPTURE  # noqa: E402

FAMILIES.append(_CAPTURE)
RULES.update(_CAPTURE.rules)


def select_codes(select: list[str] | None, ignore: list[str] | None) -> set[str]:
    """Resolve --select/--ignore lists of codes or prefixes ('GC1', 'GC10') to a set of codes."""
    def expand(items: list[str], what: str) -> set[str]:
        out: set[str] = set()
        for item in items:
            item = item.strip().upper()
            if not item:
                continue
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
