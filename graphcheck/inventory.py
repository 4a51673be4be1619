"""One inventory from every layer: static rows linked with the runtime events seen on the same line.

The document is deterministic (sorted rows, no timestamps) so the same tree and inputs give a byte-identical
file; its shape is `schema/inventory.schema.json`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import __version__
from .findings import KINDS, Finding, assign_fingerprints

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("schema") / "inventory.schema.json"


class InventoryError(ValueError):
    pass


def merge(static: list[Finding], runtime: list[Finding]) -> list[Finding]:
    """Attach each runtime finding to the static finding on the same line (same rule preferred): one row that
    says "the scan predicted it, the audit saw it N times". Unmatched runtime findings stay rows of their own."""
    by_line: dict[tuple[str, int], list[Finding]] = {}
    for f in static:
        f.evidence.setdefault("kinds", ["static"])
        by_line.setdefault((f.path, f.line), []).append(f)
    rows = list(static)
    for r in runtime:
        cands = by_line.get((r.path, r.line), []) if r.line else []
        host = next((c for c in cands if c.rule == r.rule), cands[0] if cands else None)
        if host is None:
            r.evidence.setdefault("kinds", [r.kind])
            rows.append(r)
            continue
        host.evidence.setdefault("runtime", []).append(
            {"rule": r.rule, "kind": r.kind, "count": r.count, "message": r.message,
             **{k: v for k, v in r.evidence.items() if k != "kinds"}})
        if r.kind not in host.evidence["kinds"]:
            host.evidence["kinds"].append(r.kind)
        host.count = sum(e["count"] for e in host.evidence["runtime"])   # how often it ran, across runtime layers
    return assign_fingerprints(rows)


def build(findings: list[Finding], *, targets: list[str], layers: dict[str, Any], gate: dict[str, Any] | None = None) -> dict:
    return {
        "schema": "graphcheck-inventory", "version": SCHEMA_VERSION, "graphcheck": __version__,
        "targets": sorted(targets), "layers": layers, "gate": gate or {},
        "findings": [f.to_dict() for f in sorted(findings, key=Finding.sort_key)],
    }


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def load(path: Path) -> tuple[dict, list[Finding]]:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InventoryError(f"{path}: no such inventory file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InventoryError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(doc, dict) or "findings" not in doc:
        raise InventoryError(f"{path}: expected a graphcheck inventory (an object with 'findings'), found {type(doc).__name__}")
    if doc.get("version", SCHEMA_VERSION) != SCHEMA_VERSION:
        raise InventoryError(f"{path}: inventory version {doc.get('version')!r}, expected {SCHEMA_VERSION}")
    out = []
    for i, d in enumerate(doc["findings"]):
        try:
            f = Finding.from_dict({k: v for k, v in d.items() if k != "baselined"})   # the gate's verdict, not the finding
        except (TypeError, ValueError) as e:
            raise InventoryError(f"{path}: findings[{i}]: {e}") from None
        if f.kind not in KINDS:
            raise InventoryError(f"{path}: findings[{i}]: kind {f.kind!r}, expected one of {', '.join(KINDS)}")
        out.append(f)
    return doc, out
