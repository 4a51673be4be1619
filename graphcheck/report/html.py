"""A static HTML page for a saved inventory: one table per layer, stacks and evidence folded in."""
from __future__ import annotations

import json
from html import escape

from ..findings import Finding
from ..rules import RULES

_CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#1b1f24}h1{font-size:1.4em}h2{margin-top:2em}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}code{font:12px ui-monospace,monospace;background:#f6f8fa;padding:1px 4px}.rule{font-weight:600;color:#cf222e}
.warn{color:#9a6700}.kinds{color:#57606a}details pre{background:#f6f8fa;padding:6px;overflow:auto;font-size:12px}
.new{background:#fff8c5}.summary td{border:0;padding:2px 12px 2px 0}"""

_LAYERS = (("static", "Static scan"), ("sync", "Sync audit (portable + CUDA)"), ("capture", "Capture-under-test"))


def _row(f: Finding, d: dict) -> str:
    rule = RULES.get(f.rule)
    cls = "rule warn" if f.severity == "warning" else "rule"
    kinds = "+".join(f.evidence.get("kinds", [f.kind]))
    fold = {k: v for k, v in f.evidence.items() if k != "kinds"}
    details = (f"<details><summary>evidence</summary><pre>{escape(json.dumps(fold, indent=2, sort_keys=True))}</pre></details>"
               if fold else "")
    hint = f"<br><small>fix: {escape(rule.hint)}</small>" if rule else ""
    mark = ' class="new"' if d.get("baselined") is False and f.severity == "error" else ""
    return (f"<tr{mark}><td class='{cls}' title='{escape(rule.name if rule else '')}'>{escape(f.rule)}</td>"
            f"<td><code>{escape(f.path)}:{f.line}</code><br><small>{escape(f.function)}</small></td>"
            f"<td>{escape(f.message)}{hint}<br><code>{escape(f.source)}</code>{details}</td>"
            f"<td class='kinds'>{escape(kinds)}</td><td>{f.count}</td></tr>")


def render(doc: dict, findings: list[Finding]) -> str:
    gate = doc.get("gate") or {}
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>graphcheck inventory</title><style>{_CSS}</style></head><body>",
             f"<h1>graphcheck inventory</h1><table class='summary'><tr><td>graphcheck {escape(str(doc.get('graphcheck', '')))}</td>"
             f"<td>targets: {escape(', '.join(doc.get('targets', [])) or 'none')}</td><td>rows: {len(findings)}</td>"
             + (f"<td>gate: {gate.get('new', 0)} new, {gate.get('accepted', 0)} accepted, {gate.get('stale', 0)} stale</td>" if gate else "")
             + "</tr></table>"]
    for kind, title in _LAYERS:
        rows = [(f, d) for f, d in zip(findings, doc["findings"]) if f.kind == kind]
        parts.append(f"<h2>{escape(title)} <small>({len(rows)})</small></h2>")
        if not rows:
            parts.append("<p>nothing found</p>")
            continue
        parts.append("<table><tr><th>rule</th><th>where</th><th>what</th><th>seen by</th><th>count</th></tr>")
        parts.extend(_row(f, d) for f, d in rows)
        parts.append("</table>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
