"""Suppression comments (`# graphcheck: ignore[GC101] -- why`, `# noqa: GC101`) read from a file's lines, and the
cheap text test that lets most files skip that reading. Matching a suppression to a finding happens later, in
``scanner.py``; here only the comments are parsed."""
from __future__ import annotations

import io
import re
import tokenize

# `# noqa: CODES` as ruff reads it: any case (`# NOQA: GC101`), the codes of every tool in one list separated by
# commas and/or spaces (`# noqa: E501, GC101`; only the GC codes are ours), the reason after the list (`-- why`).
_SUPPRESS = re.compile(r"#\s*(?:graphcheck:\s*ignore\[(?P<codes>[^\]]*)\]|noqa\s*:\s*(?P<noqa>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))"
                       r"(?:[\s,]*--\s*(?P<reason>.*\S))?", re.IGNORECASE)


def _comments(lines: list[str]) -> dict[int, tuple[int, str]]:
    """Real comments (line -> (column, text)), so a suppression-like string literal is not taken for one."""
    out: dict[int, tuple[int, str]] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline):
            if tok.type == tokenize.COMMENT:
                out[tok.start[0]] = (tok.start[1], tok.string)
    except (tokenize.TokenError, SyntaxError):
        pass
    return out


def parse_suppressions(lines: list[str]) -> list[dict]:
    """Suppression comments: the codes, the reason, and the line they apply to (same line, or the next one)."""
    out = []
    comments: dict[int, tuple[int, str]] | None = None
    for i, text in enumerate(lines, 1):
        low = text.lower()
        # a suppression of ours names graphcheck or a GC code: another tool's `# noqa: F401` (torch has thousands)
        # must not make the whole file go through the tokenizer
        if "graphcheck" not in low and ("noqa" not in low or "gc" not in low):
            continue
        if not _SUPPRESS.search(text):
            continue
        if comments is None:
            comments = _comments(lines)
        if i not in comments:
            continue
        col, comment = comments[i]
        m = _SUPPRESS.search(comment)
        if not m:
            continue
        if m.group("codes") is not None:
            codes = [c.strip().upper() for c in m.group("codes").split(",") if c.strip()]
        else:     # another tool's codes in the same list are that tool's business
            codes = [c.upper() for c in re.split(r"[\s,]+", m.group("noqa")) if c.upper().startswith("GC")]
            if not codes:
                continue
        own_line = text[:col].strip() == ""
        out.append({"line": i, "target": i + 1 if own_line else i, "codes": codes, "reason": m.group("reason") or "",
                    "source": text.strip()})
    return out


def _may_suppress(text: str) -> bool:
    """Whether any line can pass parse_suppressions' first test (it names graphcheck, or both noqa and gc): false
    for most files, which then need not be split into lines and lowered one by one."""
    low = text.lower()
    return "graphcheck" in low or "noqa" in low and "gc" in low
