"""A static HTML page for a saved inventory: one table per layer, stacks and evidence folded in; every row with
its region, those outside the gated regions too (greyed, status `ungated`)."""
from __future__ import annotations

import json
from html import escape

from ..findings import Finding
from ..result import Result
from ..rules import RULES
from .summary import summary_line

_CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#1b1f24}h1{font-size:1.4em}h2{margin-top:2em}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}code{font:12px ui-monospace,monospace;background:#f6f8fa;padding:1px 4px}.rule{font-weight:600;color:#cf222e}
.warn{color:#9a6700}.kinds{color:#57606a}details pre{background:#f6f8fa;padding:6px;overflow:auto;font-size:12px}
.new,.unchecked{background:#fff8c5}.accepted,.ungated{color:#57606a}.summary td{border:0;padding:2px 12px 2px 0}"""

_LAYERS = (("static", "Static scan"), ("sync", "Sync audit (portable + CUDA)"), ("capture", "Capture-under-test"))


def _row(f: Finding, status: str) -> str:
    rule = RULES.get(f.rule)
    cls = "rule warn" if f.severity == "warning" else "rule"
    kinds = "+".join(f.evidence.get("kinds", [f.kind]))
    fold = {k: v for k, v in f.evidence.items() if k != "kinds"}
    details = (f"<details><summary>evidence</summary><pre>{escape(json.dumps(fold, indent=2, sort_keys=True))}</pre></details>"
               if fold else "")
    hint = f"<br><small>fix: {escape(rule.hint)}</small>" if rule else ""
    return (f"<tr class='{status}'><td class='{cls}' title='{escape(rule.name if rule else '')}'>{escape(f.rule)}</td>"
            f"<td><code>{escape(f.path)}:{max(f.line, 1)}:{f.col + 1}</code><br><small>{escape(f.function)}</small></td>"
            f"<td>{escape(f.message)}{hint}<br><code>{escape(f.source)}</code>{details}</td>"
            f"<td class='kinds'>{escape(kinds)}</td><td>{escape(f.region)}</td><td>{f.count}</td><td>{status}</td></tr>")


def render(result: Result) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>graphcheck inventory</title><style>{_CSS}</style></head><body>",
             f"<h1>graphcheck {escape(result.command)}</h1><table class='summary'><tr>"
             f"<td>targets: {escape(', '.join(result.targets) or 'none')}</td><td>{escape(summary_line(result))}</td></tr></table>"]
    if result.problems:
        parts.append("<h2>Not checked</h2><ul>" + "".join(f"<li>{escape(p)}</li>" for p in result.problems) + "</ul>")
    for kind, title in _LAYERS:
        rows = [f for f in result.findings if f.kind == kind]
        parts.append(f"<h2>{escape(title)} <small>({len(rows)})</small></h2>")
        if not rows:
            parts.append("<p>nothing found</p>")
            continue
        parts.append("<table><tr><th>rule</th><th>where</th><th>what</th><th>seen by</th><th>region</th><th>count</th><th>status</th></tr>")
        parts.extend(_row(f, result.status[f.fingerprint]) for f in rows)
        parts.append("</table>")
    if result.stale:
        parts.append("<h2>Stale baseline entries</h2><ul>" + "".join(
            f"<li><code>{escape(str(e.get('rule')))} {escape(str(e.get('path')))}</code> {escape(str(e.get('source', '')))}</li>"
            for e in result.stale) + "</ul>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
