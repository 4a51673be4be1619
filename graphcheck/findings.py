"""The one finding model every layer produces and every report consumes.

A finding is identified across edits by its fingerprint, not its line number: rule + path + qualified
function + whitespace-normalised source line + the occurrence index of that tuple inside the function.
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

KINDS = ("static", "sync", "capture")
SEVERITIES = ("error", "warning")


@dataclass
class Finding:
    rule: str                     # stable code, e.g. GC101
    kind: str                     # static | sync | capture
    path: str                     # posix path, relative to the project root where possible
    line: int                     # 1-based; 0 when the layer cannot name a line
    col: int = 0                  # 0-based column, like ast
    function: str = ""            # qualified function, e.g. Transformer.forward or <module>
    message: str = ""
    source: str = ""              # the stripped source line
    count: int = 1                # how often a runtime layer saw it (static: 1)
    severity: str = "error"
    evidence: dict[str, Any] = field(default_factory=dict)
    fingerprint: str = ""

    def sort_key(self) -> tuple:
        return (self.path, self.line, self.col, self.rule, self.kind, self.message)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if not d["evidence"]:
            d["evidence"] = {}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Finding":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"finding has unknown keys {sorted(unknown)}; expected a subset of {sorted(names)}")
        return cls(**d)


_ws = re.compile(r"\s+")


def normalise_source(src: str) -> str:
    """Whitespace-insensitive form of a source line, with any trailing comment dropped."""
    code = src.split("#", 1)[0] if "#" in src and not ("'" in src or '"' in src) else src
    return _ws.sub(" ", code).strip()


def assign_fingerprints(findings: Iterable[Finding]) -> list[Finding]:
    """Give each finding its stable fingerprint; occurrence index counts repeats of the same key."""
    out = sorted(findings, key=Finding.sort_key)
    seen: dict[tuple, int] = {}
    for f in out:
        key = (f.rule, f.path, f.function, normalise_source(f.source))
        idx = seen.get(key, 0)
        seen[key] = idx + 1
        raw = "\x1f".join([*key, str(idx)])
        f.fingerprint = hashlib.sha256(raw.encode()).hexdigest()[:20]
    return out
