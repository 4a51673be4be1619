"""The one result every command produces and every renderer reads: rows with their gate status, stale baseline
entries, and what could not be checked. `graphcheck run` builds it from the pipeline; `graphcheck report` rebuilds
it from the saved document, so both print the same verdict in every format.

Status of a row:  new (fails the gate) · accepted (in the baseline) · exempt (an `allow_sync` warning, reported
but not gated) · unchecked (a GC006-class row: something could not be checked; exit 2, never baselined) ·
ungated (its line runs outside the gated regions, regions.py: counted in the summary, listed with
--show-all-regions, never fails and needs no baseline entry).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from . import __version__
from .findings import KINDS, UNCHECKED, Finding, assign_fingerprints
from .regions import REGIONS, gated

SCHEMA_VERSION = 3
READS = (2, 3)          # version 2 had no regions: every row of it was counted, as `captured` is now
STATUSES = ("new", "accepted", "exempt", "unchecked", "ungated")
EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_PIPE = 0, 1, 2, 130, 141


class ResultError(ValueError):
    """A saved result document that is not one; names the field."""


@dataclass
class Result:
    command: str                                  # scan | audit | capture | run
    findings: list[Finding]                       # every row, fingerprinted, sorted
    status: dict[str, str]                        # fingerprint -> one of STATUSES
    problems: list[str] = field(default_factory=list)   # what could not be checked (exit 2)
    stale: list[dict] = field(default_factory=list)     # baseline entries no row matches
    layers: dict[str, Any] = field(default_factory=dict)
    targets: list[str] = field(default_factory=list)
    baseline: str | None = None                   # the baseline it was gated against (display path)
    strict_baseline: bool = False                 # stale entries fail too
    # baseline entries this run could not have found (a layer it skipped, a rule not selected, a file not scanned):
    # neither accepted nor stale, only counted
    unexamined: int = 0
    reasons: dict[str, str] = field(default_factory=dict)   # fingerprint -> the baseline's reason (accepted rows)
    timing: dict[str, float] = field(default_factory=dict, compare=False)   # shown, never written

    def rows(self, *statuses: str) -> list[Finding]:
        return [f for f in self.findings if self.status[f.fingerprint] in statuses]

    def reported(self, all_regions: bool = False) -> list[Finding]:
        """What a user must see: failing rows and exemptions; accepted rows are only counted, and so are the rows
        outside the gated regions unless `all_regions` (--show-all-regions) lists them too."""
        return self.rows("unchecked", "new", "exempt", *(("ungated",) if all_regions else ()))

    def by_region(self) -> dict[str, int]:
        """How many rows run in each region outside the gate (the summary line's count of what it does not list)."""
        c = {r: 0 for r in REGIONS}
        for f in self.rows("ungated"):
            c[f.region] += 1
        return {r: n for r, n in c.items() if n}

    def counts(self) -> dict[str, int]:
        c = {s: 0 for s in STATUSES}
        for f in self.findings:
            c[self.status[f.fingerprint]] += 1
        return {**c, "stale": len(self.stale)}

    def failed(self) -> bool:
        return bool(self.rows("new")) or (self.strict_baseline and bool(self.stale))

    def exit_code(self, exit_zero: bool = False) -> int:
        if self.problems:
            return EXIT_ERROR
        return EXIT_FINDINGS if self.failed() and not exit_zero else EXIT_CLEAN

    def to_doc(self) -> dict:
        """The saved form (`schema/inventory.schema.json`): deterministic, no timestamps or timings."""
        return {
            "schema": "graphcheck-inventory", "version": SCHEMA_VERSION, "graphcheck": __version__,
            "command": self.command, "targets": sorted(self.targets), "layers": self.layers,
            "gate": {**self.counts(), "baseline": self.baseline, "strict_baseline": self.strict_baseline,
                     "stale_entries": self.stale, "unexamined": self.unexamined},
            "problems": self.problems,
            "findings": [{**f.to_dict(), "status": self.status[f.fingerprint],
                          **({"reason": self.reasons[f.fingerprint]} if f.fingerprint in self.reasons else {})}
                         for f in self.findings],
        }

    @classmethod
    def from_doc(cls, doc: Any) -> "Result":
        if not isinstance(doc, dict) or not isinstance(doc.get("findings"), list):
            raise ResultError(f"expected a graphcheck inventory (an object with a 'findings' list), found {type(doc).__name__}")
        if doc.get("version") not in READS:
            raise ResultError(f"inventory version {doc.get('version')!r}, expected one of {', '.join(map(str, READS))} "
                              "(rewrite it with this graphcheck)")
        findings, status, reasons = [], {}, {}
        for i, d in enumerate(doc["findings"]):
            if not isinstance(d, dict):
                raise ResultError(f"findings[{i}]: expected an object, found {type(d).__name__}")
            st = d.get("status")
            if st not in STATUSES:
                raise ResultError(f"findings[{i}]: status {st!r}, expected one of {', '.join(STATUSES)}")
            reason = d.get("reason")
            if reason is not None and not isinstance(reason, str):
                raise ResultError(f"findings[{i}]: 'reason' must be a string, found {reason!r}"[:200])
            try:
                f = Finding.from_dict({k: v for k, v in d.items() if k not in ("status", "reason")})
            except (TypeError, ValueError) as e:
                raise ResultError(f"findings[{i}]: {e}") from None
            if f.kind not in KINDS:
                raise ResultError(f"findings[{i}]: kind {f.kind!r}, expected one of {', '.join(KINDS)}")
            if st != "unchecked" and (st == "ungated") == gated(f.region):
                raise ResultError(f"findings[{i}]: status {st!r} with region {f.region!r}: a checked row is ungated "
                                  "exactly when its region is outside the gated ones (captured, per-step)")
            _check_evidence(i, f.evidence)
            if not f.fingerprint or f.fingerprint in status:
                raise ResultError(f"findings[{i}]: missing or repeated fingerprint {f.fingerprint!r}")
            findings.append(f)
            status[f.fingerprint] = st
            if reason is not None:
                reasons[f.fingerprint] = reason
        gate = doc.get("gate") if isinstance(doc.get("gate"), dict) else {}
        problems, stale = doc.get("problems", []), gate.get("stale_entries", [])
        if not isinstance(problems, list) or not all(isinstance(p, str) for p in problems):
            raise ResultError(f"'problems' must be a list of strings, found {problems!r}"[:200])
        if not isinstance(stale, list) or not all(isinstance(e, dict) for e in stale):
            raise ResultError(f"'gate.stale_entries' must be a list of objects, found {stale!r}"[:200])
        targets, layers = doc.get("targets", []), doc.get("layers", {})
        if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
            raise ResultError(f"'targets' must be a list of strings, found {targets!r}"[:200])
        if not isinstance(layers, dict) or not all(isinstance(v, dict) for v in layers.values()):
            raise ResultError(f"'layers' must be an object of objects, found {layers!r}"[:200])
        if "static" in layers and not isinstance(layers["static"].get("files"), int):
            raise ResultError(f"'layers.static.files' must be an integer, found {layers['static'].get('files')!r}"[:200])
        warnings = layers.get("static", {}).get("scope_warnings", [])
        if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
            raise ResultError(f"'layers.static.scope_warnings' must be a list of strings, found {warnings!r}"[:200])
        fanout = layers.get("static", {}).get("fan_out", [])
        if not isinstance(fanout, list) or not all(isinstance(fo, dict) for fo in fanout):
            raise ResultError(f"'layers.static.fan_out' must be a list of objects, found {fanout!r}"[:200])
        for kind in ("sync", "capture"):          # what the run table prints: "N target(s)", findings
            for key in ("targets", "findings") if kind in layers else ():
                v = layers[kind].get(key)
                if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                    raise ResultError(f"'layers.{kind}.{key}' must be a non-negative integer, found {v!r}"[:200])
        unexamined = gate.get("unexamined", 0)
        if not isinstance(unexamined, int) or isinstance(unexamined, bool) or unexamined < 0:
            raise ResultError(f"'gate.unexamined' must be a non-negative integer, found {unexamined!r}"[:200])
        return cls(command=str(doc.get("command", "run")), findings=findings, status=status, problems=problems,
                   stale=stale, layers=layers, targets=targets,
                   baseline=gate.get("baseline"), strict_baseline=bool(gate.get("strict_baseline", False)),
                   unexamined=unexamined, reasons=reasons)


def _check_evidence(i: int, ev: Any) -> None:
    """The evidence fields the reports read: `kinds` (strings) and `call_chain` (path, line, function)."""
    if not isinstance(ev, dict):
        raise ResultError(f"findings[{i}].evidence: expected an object, found {type(ev).__name__}")
    kinds = ev.get("kinds", [])
    if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
        raise ResultError(f"findings[{i}].evidence.kinds: expected a list of strings, found {kinds!r}"[:200])
    chain = ev.get("call_chain", [])
    if not isinstance(chain, list) or not all(
            isinstance(c, dict) and isinstance(c.get("path"), str) and isinstance(c.get("line"), int)
            and isinstance(c.get("function"), str) for c in chain):
        raise ResultError(f"findings[{i}].evidence.call_chain: expected a list of {{path, line, function}} objects, "
                          f"found {chain!r}"[:200])


def classify(command: str, findings: list[Finding], baseline: dict[str, dict] | None, *, problems: list[str] | None = None,
             layers: dict | None = None, targets: list[str] | None = None, baseline_name: str | None = None,
             strict_baseline: bool = False, timing: dict | None = None,
             examined: Callable[[dict], bool] | None = None) -> Result:
    """The gate. Without a baseline every error row of a gated region is new. Unchecked rows are never accepted,
    whatever the baseline says, and each becomes a problem that names what could not be checked. A row outside
    the gated regions is ungated whatever the baseline says; a baseline entry that matches it is not stale.
    `examined(entry)` says whether this run could have found a baseline entry's row; an entry it could not (a
    skipped layer, an unselected rule, a file not scanned) is not stale, only counted."""
    rows = assign_fingerprints(findings)
    base = baseline or {}
    status: dict[str, str] = {}
    reasons: dict[str, str] = {}
    problems = list(problems or [])
    for f in rows:
        if f.rule in UNCHECKED:
            status[f.fingerprint] = "unchecked"
            where = f"{f.path}:{f.line}" if f.line else f.path
            problems.append(f"could not check {where}: {f.rule} {f.message}")
        elif not gated(f.region):
            status[f.fingerprint] = "ungated"
        elif f.severity == "warning":
            status[f.fingerprint] = "exempt"
        elif f.fingerprint in base:
            status[f.fingerprint] = "accepted"
            reasons[f.fingerprint] = str(base[f.fingerprint].get("reason", ""))
        else:
            status[f.fingerprint] = "new"
    present = set(status)
    missing = [e for fp, e in sorted(base.items()) if fp not in present]
    stale = [e for e in missing if examined is None or examined(e)]
    return Result(command, rows, status, problems, stale, dict(layers or {}), list(targets or []), baseline_name,
                  strict_baseline, timing=dict(timing or {}), unexamined=len(missing) - len(stale), reasons=reasons)
