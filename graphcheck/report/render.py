"""Render a Result in one of the output formats (`options.FORMATS` lists and describes them). Every format reads
the same rows and statuses, so `run`, `report` and the per-layer commands agree on what is new, accepted, exempt,
unchecked and stale.

Rows outside the gated regions (regions.py) are counted in the summary line; `all_regions` (--show-all-regions)
lists them too. A row's region is printed where it is not `captured`, the region of a plain finding.
"""
from __future__ import annotations

import io
import json
import shutil
from collections import Counter, defaultdict

from ..findings import Finding
from ..options import output_format
from ..result import Result
from .summary import summary_line


def render(result: Result, fmt: str, *, statistics: bool = False, quiet: bool = False, color: bool = False,
           all_regions: bool = False) -> str:
    fmt = output_format(fmt)
    if statistics:
        return _statistics(result, json_out=fmt == "json", all_regions=all_regions)
    if fmt == "json":
        from ..inventory import dumps
        return dumps(result.to_doc())
    if fmt == "sarif":
        from .. import __version__
        from .sarif import to_sarif
        return json.dumps(to_sarif(result, __version__), indent=2) + "\n"
    if fmt == "github":
        return to_github(result, all_regions=all_regions)
    if fmt == "html":
        from .html import render as html
        return html(result)
    if fmt == "concise":
        lines = [_head(f, result) for f in result.reported(all_regions)]
        if not quiet:
            lines.append(summary_line(result, all_regions))
        return "".join(line + "\n" for line in lines)
    if fmt == "full":
        return _full(result, quiet=quiet, color=color, all_regions=all_regions)
    raise ValueError(f"output format {fmt!r} is in options.FORMATS but has no renderer here")


def location(f: Finding) -> str:
    """path:line:col, 1-based; a row no layer could place on a line points at the file's start."""
    return f"{f.path}:{max(f.line, 1)}:{f.col + 1}"


def _tag(f: Finding, result: Result) -> str:
    st = result.status[f.fingerprint]
    region = f" [{f.region}]" if f.region != "captured" else ""
    return region + {"exempt": " (exempt: reported, not gated)", "unchecked": " (not checked)",
                     "ungated": " (not gated)"}.get(st, "")


def _head(f: Finding, result: Result) -> str:
    return f"{location(f)}: {f.rule} {f.message}{_tag(f, result)}"


def _full(result: Result, *, quiet: bool, color: bool, all_regions: bool = False) -> str:
    from rich.console import Console
    from rich.control import strip_control_codes
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text
    from ..rules import RULES
    buf = io.StringIO()
    width = shutil.get_terminal_size((120, 24)).columns if color else 120
    con = Console(file=buf, highlight=False, soft_wrap=True, width=width, force_terminal=color,
                  color_system="auto" if color else None, emoji=False)
    for f in result.reported(all_regions):
        lines = _finding_block(f, result, RULES.get(f.rule))
        if color:
            # segments, not markup: rich's markup turned `:100:` in a location into an emoji and doubled a source
            # line's trailing backslash
            for segs in lines:
                con.print(Text.assemble(*((t, st) if st else t for t, st in segs)))
        else:
            # the text without colour, written directly: rich laid out every row only to drop its styles (3 s of a
            # cold scan of torch's tree, 6,000 rows); as rich prints it: control codes dropped, tabs expanded
            buf.write("".join(strip_control_codes("".join(t for t, _ in segs)).expandtabs(8) + "\n"
                              for segs in lines))
    if quiet:
        return buf.getvalue()
    if result.command == "run" and result.layers:
        t = Table(title="graphcheck run", title_justify="left")
        for c in ("layer", "checked", "findings", "time"):
            t.add_column(c)
        st = result.layers.get("static")
        if st:
            fns = st.get("functions_in_scope")
            t.add_row("static", f"{st.get('files', 0)} files, {fns if fns is not None else 'all'} fns in scope",
                      str(st.get("findings", 0)), f"{result.timing.get('static', 0):.1f}s")
        for kind in ("sync", "capture"):
            if kind in result.layers:
                lay = result.layers[kind]
                t.add_row(kind, f"{lay['targets']} target(s)", str(lay["findings"]), f"{result.timing.get(kind, 0):.1f}s")
        con.print(t)
    for w in (result.layers.get("static") or {}).get("scope_warnings", []):
        con.print(f"[yellow]warning:[/] {escape(w)}")
    for e in result.stale:
        con.print(Text.assemble("  ", ("stale", "yellow"), f" {e.get('rule')} {e.get('path')} {e.get('function')}: "
                                f"{e.get('source', '')}"))
    if result.stale and not result.strict_baseline:
        con.print("  [dim]stale entries are fixed hazards: shrink the baseline with `graphcheck baseline`[/]")
    line = summary_line(result, all_regions)
    for word, style in (("NOT CHECKED", "bold red"), ("FAILED", "bold red"), ("PASSED", "bold green")):
        if line.endswith(word):
            line = escape(line[: -len(word)]) + f"[{style}]{word}[/]"
            break
    else:
        line = escape(line)
    con.print(line)
    return buf.getvalue()


def _finding_block(f: Finding, result: Result, rule) -> list[list[tuple[str, str]]]:
    """A row of the full format as lines of (text, style) segments ('' unstyled): its head, its source and the
    rule's fix, then a blank line."""
    kinds = "+".join(f.evidence.get("kinds", [f.kind]))
    seen = f", seen {f.count}x" if f.count > 1 else ""
    style = {"new": "bold red", "unchecked": "bold red", "exempt": "bold yellow",
             "ungated": "bold"}[result.status[f.fingerprint]]
    out = [[(location(f), "bold"), (": ", ""), (f.rule, style), (f" {f.message}{_tag(f, result)}  ", ""),
            (f"{f.function} · {kinds}{seen}", "dim")]]
    if f.source:
        out.append([("    ", ""), ("│", "dim"), (f" {f.source}", "")])
    if rule:
        out.append([("    ", ""), ("fix:", "green"), (f" {rule.hint.format_map(_hint_fmt(f))}", "")])
    out.append([])
    return out


def _hint_fmt(f: Finding) -> dict:
    import re
    m = re.search(r"`self\.(\w+)`", f.message)
    return defaultdict(str, attr=m.group(1) if m else "attr")


def _statistics(result: Result, json_out: bool, all_regions: bool = False) -> str:
    from ..rules import RULES
    counts = Counter(f.rule for f in result.reported(all_regions))
    rows = [(n, code, RULES[code].name if code in RULES else "") for code, n in sorted(counts.items(), key=lambda x: (-x[1], x[0]))]
    if json_out:
        return json.dumps([{"code": c, "name": name, "count": n} for n, c, name in rows], indent=2) + "\n"
    width = max((len(str(n)) for n, _, _ in rows), default=1)
    return "".join(f"{n:>{width}}\t{c}\t{name}\n" for n, c, name in rows)


def _gh_escape(s: str, prop: bool = False) -> str:
    s = s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return s.replace(":", "%3A").replace(",", "%2C") if prop else s


def to_github(result: Result, all_regions: bool = False) -> str:
    from ..rules import RULES
    lines = []
    for f in result.reported(all_regions):
        level = {"exempt": "warning", "ungated": "notice"}.get(result.status[f.fingerprint], "error")
        title = f.rule + (" " + RULES[f.rule].name if f.rule in RULES else "")
        props = f"file={_gh_escape(f.path, True)},line={max(f.line, 1)},col={f.col + 1},title={_gh_escape(title, True)}"
        count = f" (seen {f.count}x)" if f.count > 1 else ""
        lines.append(f"::{level} {props}::{_gh_escape(f.message + count + _tag(f, result))}")
    unplaced = [p for p in result.problems if not p.startswith("could not check ")]   # rows are annotated above
    lines += [f"::error title=graphcheck could not check::{_gh_escape(p)}" for p in unplaced]
    for e in result.stale:
        lines.append(f"::warning title=graphcheck stale baseline::{_gh_escape(str(e.get('rule')))} {_gh_escape(str(e.get('path')))} "
                     f"({_gh_escape(str(e.get('function')))}) is no longer found; remove it with `graphcheck baseline`")
    return "".join(line + "\n" for line in lines)
