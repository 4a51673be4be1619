"""Render findings: rich text grouped by file, JSON, SARIF and GitHub workflow annotations."""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from typing import IO

from ..findings import Finding
from ..rules import RULES
from .sarif import to_sarif


def to_json(findings: list[Finding], version: str, extra: dict | None = None) -> str:
    doc = {"version": version, **(extra or {}), "findings": [f.to_dict() for f in findings]}
    return json.dumps(doc, indent=2, sort_keys=False) + "\n"


def _gh_escape(s: str, prop: bool = False) -> str:
    s = s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return s.replace(":", "%3A").replace(",", "%2C") if prop else s


def to_github(findings: list[Finding]) -> str:
    lines = []
    for f in findings:
        level = "error" if f.severity == "error" else "warning"
        props = f"file={_gh_escape(f.path, True)},line={max(f.line, 1)},col={f.col + 1},title={_gh_escape(f.rule + ' ' + (RULES[f.rule].name if f.rule in RULES else ''), True)}"
        count = f" (seen {f.count}x)" if f.count > 1 else ""
        lines.append(f"::{level} {props}::{_gh_escape(f.message + count)}")
    return "\n".join(lines) + ("\n" if lines else "")


def print_text(findings: list[Finding], out: IO[str] | None = None, title: str = "", summary: str = "") -> None:
    from rich.console import Console
    from rich.markup import escape
    out = out or sys.stdout
    con = Console(file=out, highlight=False, soft_wrap=True, width=120 if not out.isatty() else None)
    if title:
        con.print(f"[bold]{escape(title)}[/]")
    groups: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        groups[f.path].append(f)
    for path in sorted(groups):
        con.print(f"\n[bold underline]{escape(path)}[/]")
        for f in groups[path]:
            rule = RULES.get(f.rule)
            kinds = f.evidence.get("kinds", [f.kind])
            seen = f"  [magenta]seen {f.count}x[/]" if f.count > 1 or f.kind != "static" else ""
            con.print(f"  [cyan]{f.line}:{f.col + 1}[/] [bold red]{f.rule}[/] {escape(f.message)}"
                      f"  [dim]{escape(f.function)} · {'+'.join(kinds)}[/]{seen}")
            if f.source:
                con.print(f"      [dim]│[/] {escape(f.source)}")
            if rule:
                con.print(f"      [green]fix:[/] {escape(rule.hint.format_map(_hint_fmt(f)))}")
    if summary:
        con.print(f"\n{summary}")


def _hint_fmt(f: Finding) -> dict:
    import re
    m = re.search(r"`self\.(\w+)`", f.message)
    return defaultdict(str, attr=m.group(1) if m else "attr")


def emit(findings: list[Finding], fmt: str, version: str, out: IO[str] | None = None, *, title: str = "",
         summary: str = "", extra: dict | None = None) -> None:
    out = out or sys.stdout
    if fmt == "json":
        out.write(to_json(findings, version, extra))
    elif fmt == "sarif":
        out.write(json.dumps(to_sarif(findings, version), indent=2) + "\n")
    elif fmt == "github":
        out.write(to_github(findings))
        if summary:
            out.write(summary + "\n")
    else:
        print_text(findings, out, title, summary)
