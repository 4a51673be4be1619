"""Aggregate runtime events into Findings: one per (rule, user line), counted, with the user stack as evidence."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..findings import Finding
from ..rules import format_message
from .attribution import relpath, source_line

Frame = tuple[str, int, str]


class SyncError(RuntimeError):
    """Raised by `graphcheck.no_sync()` at the first hazard; the message names the rule, op and user line."""

    def __init__(self, finding: Finding):
        self.finding = finding
        super().__init__(f"{finding.path}:{finding.line}: {finding.rule} {finding.message} (op {finding.evidence.get('op', '?')})")


_exempt = threading.local()


def exemptions() -> list[tuple[str, Frame | None]]:
    """The allow_sync stack of this thread: (reason, the allow_sync call site)."""
    if not hasattr(_exempt, "stack"):
        _exempt.stack = []
    return _exempt.stack


@dataclass
class Recorder:
    kind: str = "sync"
    raise_on_first: bool = False
    step: int | None = None                 # the audited step currently running (for evidence)
    _rows: dict[tuple, Finding] = field(default_factory=dict)   # insertion order = order first seen
    # (rule, op, user frame, whether it breaks a CUDA capture) of every event, in execution order
    events: list[tuple[str, str, Frame | None, bool]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    skip: frozenset = frozenset()           # rules not judged here (the graph_safe marker's host-to-device family)

    def record(self, rule: str, op: str, stack: list[Frame], breaks_capture: bool = False, **fmt: str) -> Finding | None:
        if rule in self.skip:
            return None
        if len(self.events) < 10_000:      # before exemptions: an allowed sync still breaks a capture
            self.events.append((rule, op, stack[0] if stack else None, breaks_capture))
        ex = exemptions()
        if ex:
            reason, site = ex[-1]
            key = ("GC007", site)
            with self._lock:
                f = self._rows.get(key)
                if f is None:
                    path, line, fn = site or ("<unknown>", 0, "")
                    f = Finding("GC007", self.kind, relpath(path), line, 0, fn, format_message("GC007", reason=reason),
                                source_line(path, line), count=0, severity="warning",
                                evidence={"exempted": {}, "reason": reason})
                    self._rows[key] = f
                f.count += 1
                f.evidence["exempted"][rule] = f.evidence["exempted"].get(rule, 0) + 1
            return None
        path, line, fn = stack[0] if stack else ("<unknown>", 0, "")
        key = (rule, path, line)
        with self._lock:
            f = self._rows.get(key)
            if f is None:
                f = Finding(rule, self.kind, relpath(path), line, 0, fn, format_message(rule, **fmt), source_line(path, line),
                            count=0, evidence={"op": op, "stack": [f"{relpath(p)}:{ln}:{q}" for p, ln, q in stack], "steps": []})
                self._rows[key] = f
            f.count += 1
            if self.step is not None and self.step not in f.evidence["steps"]:
                f.evidence["steps"].append(self.step)
            ops = f.evidence.setdefault("ops", [])
            if op not in ops and len(ops) < 8:
                ops.append(op)
        if self.raise_on_first:
            raise SyncError(f)
        return f

    def findings(self) -> list[Finding]:
        return sorted(self._rows.values(), key=Finding.sort_key)

    def in_order(self) -> list[Finding]:
        """The findings in the order the step first reached each one (execution order, not path order)."""
        return list(self._rows.values())

    def __len__(self) -> int:
        return len(self._rows)
