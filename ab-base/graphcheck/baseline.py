"""The baseline gate: accepted fingerprints with reasons. It may only shrink; it is rewritten atomically."""
from __future__ import annotations

import json
from pathlib import Path

from .findings import UNCHECKED, Finding
from .io import write_atomic
from .regions import gated

BASELINE_VERSION = 1


class BaselineError(ValueError):
    pass


def load(path: Path) -> dict[str, dict]:
    """fingerprint -> entry. A missing file is an empty baseline; a corrupt one is an error, never ignored."""
    path = Path(path)
    if path.is_dir():
        raise BaselineError(f"baseline {path} is a directory, expected a JSON file")
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise BaselineError(f"baseline {path}: cannot read it ({e.strerror or e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BaselineError(f"{path}: corrupt baseline, not valid JSON ({e}); fix it or regenerate with `graphcheck baseline`") from None
    want = f"expected a graphcheck baseline (an object with version {BASELINE_VERSION} and an 'entries' list)"
    if not isinstance(doc, dict):
        raise BaselineError(f"{path}: {want}, found a JSON {type(doc).__name__ if doc is not None else 'null'}")
    if doc.get("version") != BASELINE_VERSION:
        raise BaselineError(f"{path}: {want}, found version {doc.get('version')!r}")
    if not isinstance(doc.get("entries"), list):
        raise BaselineError(f"{path}: {want}, found 'entries' of type {type(doc.get('entries')).__name__}")
    out: dict[str, dict] = {}
    for i, e in enumerate(doc["entries"]):
        if not isinstance(e, dict) or not isinstance(e.get("fingerprint"), str) or not isinstance(e.get("reason"), str):
            raise BaselineError(f"{path}: entries[{i}] needs a string 'fingerprint' and 'reason', found {e!r}"[:300])
        if not e["reason"].strip():
            raise BaselineError(f"{path}: entries[{i}] ({e.get('rule', '?')} {e.get('path', '?')}) has an empty reason")
        first = out.get(e["fingerprint"])
        if first is not None:   # a hand merge that doubled an entry: which reason holds? say so, never pick one
            j = next(k for k, d in enumerate(doc["entries"]) if d is first)
            raise BaselineError(f"{path}: entries[{i}] repeats the fingerprint {e['fingerprint']} of entries[{j}] "
                                f"({e.get('rule', '?')} {e.get('path', '?')}); expected each fingerprint once")
        out[e["fingerprint"]] = e
    return out


def write(path: Path, findings: list[Finding], old: dict[str, dict], reason: str | None) -> tuple[int, int, int]:
    """Rewrite the baseline with the current error findings of the gated regions; keeps known reasons, drops stale
    entries. A row outside the gated regions needs no entry (it never fails) and gets none, but one it already has
    stays: the row is still there, and if it moves back into a gated region it is accepted as before.
    Returns (kept, added, dropped)."""
    entries, added = [], 0
    unchecked = [f for f in findings if f.rule in UNCHECKED]
    if unchecked:
        f = unchecked[0]
        raise BaselineError(f"cannot baseline what was not checked: {f.rule} {f.path}:{f.line} {f.message}"[:300]
                            + (f" (and {len(unchecked) - 1} more)" if len(unchecked) > 1 else ""))
    todo = [f for f in findings if f.severity != "warning" and (gated(f.region) or f.fingerprint in old)]
    missing = [f for f in todo if f.fingerprint not in old]
    if missing and not (reason and reason.strip()):
        f = missing[0]
        raise BaselineError(f"{len(missing)} new finding(s) need a reason (first: {f.rule} {f.path}:{f.line}); pass --reason \"...\"")
    for f in sorted(todo, key=Finding.sort_key):
        prev = old.get(f.fingerprint)
        added += prev is None
        entries.append({"fingerprint": f.fingerprint, "rule": f.rule, "kind": f.kind, "path": f.path, "function": f.function,
                        "source": f.source, "reason": prev["reason"] if prev else reason.strip()})
    dropped = len(set(old) - {e["fingerprint"] for e in entries})
    doc = {"version": BASELINE_VERSION, "entries": entries}
    write_atomic(path, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return len(entries) - added, added, dropped
