"""The one finding model every layer produces and every report consumes.

A finding is identified across edits by its fingerprint, not its line number: rule + path + qualified
function + the source line normalised through the AST (quotes, spacing, parentheses, trailing commas and
comments do not count, so a formatter does not churn a baseline) + the occurrence index of that tuple inside
the function.

Columns are 0-based in memory (like `ast`) and 1-based in everything written or printed (`to_dict`, every format).
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import io
import re
import tokenize
from dataclasses import dataclass, field
from typing import Any, Iterable

from .regions import REGIONS

KINDS = ("static", "sync", "capture")
SEVERITIES = ("error", "warning")
# Findings that mean "this could not be checked" rather than "this is a hazard": a target that raised, a file
# that cannot be parsed or read. A run with any of them exits 2 and no baseline can accept them.
UNCHECKED = ("GC006", "GC903", "GC904")
_INT_FIELDS = ("line", "col", "count")
_STR_FIELDS = ("rule", "kind", "path", "function", "message", "source", "severity", "fingerprint", "region")


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
    # where the line runs (regions.py): the gate counts captured and per-step rows only. Not part of the
    # fingerprint, so a row that changes region keeps its baseline entry
    region: str = "captured"

    def sort_key(self) -> tuple:
        return (self.path, self.line, self.col, self.rule, self.kind, self.message)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["col"] = self.col + 1
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Finding":
        """The inverse of to_dict; a field of the wrong type is a ValueError naming it (never a crash later)."""
        if not isinstance(d, dict):
            raise ValueError(f"expected a finding object, found {type(d).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"finding has unknown keys {sorted(unknown)}; expected a subset of {sorted(names)}")
        missing = {"rule", "kind", "path", "line"} - set(d)
        if missing:
            raise ValueError(f"finding lacks {sorted(missing)}")
        for k in _INT_FIELDS:
            if k in d and (not isinstance(d[k], int) or isinstance(d[k], bool) or d[k] < 0):
                raise ValueError(f"{k!r} must be a non-negative integer, found {d[k]!r}")
        for k in _STR_FIELDS:
            if k in d and not isinstance(d[k], str):
                raise ValueError(f"{k!r} must be a string, found {d[k]!r}")
        if "evidence" in d and not isinstance(d["evidence"], dict):
            raise ValueError(f"'evidence' must be an object, found {d['evidence']!r}")
        if d.get("severity", "error") not in SEVERITIES:
            raise ValueError(f"'severity' must be one of {', '.join(SEVERITIES)}, found {d['severity']!r}")
        if d.get("region", "captured") not in REGIONS:
            raise ValueError(f"'region' must be one of {', '.join(REGIONS)}, found {d['region']!r}")
        return cls(**{**d, "col": max(d.get("col", 1) - 1, 0)})


_ws = re.compile(r"\s+")
_CLOSERS = {")", "]", "}"}


def normalise_source(src: str) -> str:
    """The source line as the AST sees it: `ast.unparse` of the line when it parses on its own (a block header
    like `if x:` is completed with a body first); otherwise (a line inside a multi-line expression) its tokens
    without comments, with string literals in one quote style and trailing commas before a closer dropped."""
    return _normalise(src.strip())


@functools.lru_cache(maxsize=1 << 14)
def _normalise(line: str) -> str:
    # memoised: a quarter to a half of a large scan's rows repeat a line another row has (`x.item()`, `if t:`), and
    # each costs a parse plus the pure-Python unparse
    for text in (line, line + "\n pass"):
        try:
            return ast.unparse(ast.parse(text))
        except (SyntaxError, ValueError, RecursionError):
            continue
    return _token_form(line)


def _token_form(line: str) -> str:
    toks: list[str] = []
    try:
        for t in tokenize.generate_tokens(io.StringIO(line).readline):
            if t.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                          tokenize.ENDMARKER):
                continue
            text = t.string
            if t.type == tokenize.STRING:
                try:
                    text = repr(ast.literal_eval(text))
                except (ValueError, SyntaxError):
                    pass
            if text in _CLOSERS and toks and toks[-1] == ",":
                toks.pop()
            toks.append(text)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass   # an unclosed bracket ends the line: the tokens so far are the line
    if toks and toks[-1] == ",":
        toks.pop()
    return " ".join(toks) if toks else _ws.sub(" ", line)


_ACCESSOR = re.compile(r"@(?:setter|deleter)\b")


def assign_fingerprints(findings: Iterable[Finding]) -> list[Finding]:
    """Give each finding its stable fingerprint; occurrence index counts repeats of the same key."""
    out = sorted(findings, key=Finding.sort_key)
    seen: dict[tuple, int] = {}
    for f in out:
        # a property's setter or deleter (`C.x@setter`) keeps the fingerprint it had when it shared the getter's name
        key = (f.rule, f.path, _ACCESSOR.sub("", f.function), normalise_source(f.source))
        idx = seen.get(key, 0)
        seen[key] = idx + 1
        raw = "\x1f".join([*key, str(idx)])
        f.fingerprint = hashlib.sha256(raw.encode("utf-8", "surrogateescape")).hexdigest()[:20]   # non-UTF-8 names
    return out
