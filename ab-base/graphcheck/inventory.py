"""One inventory from every layer: static rows linked with the runtime events seen on the same line.

The saved document is `Result.to_doc()`: deterministic (sorted rows, no timestamps) so the same tree and inputs
give a byte-identical file; its shape is `schema/inventory.schema.json`.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable

from .findings import Finding, assign_fingerprints
from .result import Result, ResultError

SCHEMA_PATH = Path(__file__).with_name("schema") / "inventory.schema.json"


class InventoryError(ValueError):
    pass


def merge(static: list[Finding], runtime: list[Finding], region_of: Callable[[str, int], str] | None = None) -> list[Finding]:
    """Attach each runtime finding to the static finding on the same line (same rule preferred): one row that
    says "the scan predicted it, the audit saw it N times". Unmatched runtime findings stay rows of their own.

    Regions: a runtime row ran in the target's step, so it is `captured` unless `region_of(path, line)` (the static
    layer's knowledge of that line: an allow-block or one-time branch around it, an eager-only def) says
    otherwise. A linked row keeps the static row's region, which also knows the path: a helper called inside the
    caller's allow-block runs allowed, though nothing on its own line says so. A capture-layer row is the
    exception: the capture ran the target's step as one graph, so a line it failed or replayed wrong at ran inside
    the graph whatever the source says around it (an allow-block the engine also enters during capture still
    breaks the capture); it and the static row it links to are `captured`."""
    by_line: dict[tuple[str, int], list[Finding]] = {}
    for f in static:
        f.evidence.setdefault("kinds", ["static"])
        by_line.setdefault((f.path, f.line), []).append(f)
    rows = list(static)
    for r in runtime:
        r.region = "captured" if r.kind == "capture" or region_of is None else region_of(r.path, r.line)
        cands = by_line.get((r.path, r.line), []) if r.line else []
        host = next((c for c in cands if c.rule == r.rule), cands[0] if cands else None)
        if host is None:
            r.evidence.setdefault("kinds", [r.kind])
            rows.append(r)
            continue
        if r.kind == "capture":
            host.region = "captured"
        host.evidence.setdefault("runtime", []).append(
            {"rule": r.rule, "kind": r.kind, "count": r.count, "message": r.message,
             **{k: v for k, v in r.evidence.items() if k != "kinds"}})
        if r.kind not in host.evidence["kinds"]:
            host.evidence["kinds"].append(r.kind)
        host.count = sum(e["count"] for e in host.evidence["runtime"])   # how often it ran, across runtime layers
    return assign_fingerprints(rows)


def dumps(doc: dict) -> str:
    # a file name that is not UTF-8 holds surrogate escapes (os.fsdecode): written as \udcXX they keep the JSON
    # valid UTF-8 and read back to the same name
    text = json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


_SURROGATE = re.compile("[\udc80-\udcff]")


def load(path: Path) -> Result:
    """A saved inventory back into the Result it was written from; every defect is an InventoryError naming it."""
    path = Path(path)
    if path.is_dir():
        raise InventoryError(f"{path} is a directory, expected an inventory JSON file (graphcheck run --output-format json -o FILE)")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InventoryError(f"{path}: no such inventory file") from None
    except OSError as e:
        raise InventoryError(f"{path}: cannot read it ({e.strerror or e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InventoryError(f"{path}: not valid JSON ({e})") from None
    try:
        return Result.from_doc(doc)
    except ResultError as e:
        raise InventoryError(f"{path}: {e}") from None
