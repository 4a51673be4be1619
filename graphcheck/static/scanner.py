"""`graphcheck scan`: discover files, analyse them in parallel with a content-hash cache, apply scope and
suppressions, and return findings. Never stops at a bad file: unreadable or unparsable files are findings."""
from __future__ import annotations

import fnmatch
import functools
import hashlib
import io
import json
import os
import tempfile
import tokenize
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..findings import Finding
from ..rules import RULES, format_message, select_codes
from .engine import ENGINE_VERSION, analyse_text, is_readback
from .scope import Program

DEFAULT_EXCLUDE = [".git", "__pycache__", ".venv", "venv", ".tox", ".nox", "build", "dist", "node_modules", ".eggs",
                   "*.egg-info", ".mypy_cache", ".pytest_cache"]


def _rules_digest() -> str:
    h = hashlib.sha256(ENGINE_VERSION.encode())
    for code in sorted(RULES):
        h.update(code.encode() + RULES[code].message.encode())
    return h.hexdigest()[:12]


def default_cache_dir() -> Path:
    base = os.environ.get("GRAPHCHECK_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "graphcheck")
    return Path(base) / f"scan-{_rules_digest()}"


@dataclass
class ScanResult:
    findings: list[Finding]
    files: int
    suppressed: int = 0
    cached: int = 0
    in_scope_functions: int | None = None
    summaries: dict[str, dict] = field(default_factory=dict, repr=False)


def discover(paths: list[str], exclude: list[str] | None = None, root: Path | None = None) -> tuple[list[Path], list[Finding]]:
    """Python files under paths; a path that does not exist is a finding, not a crash."""
    pats = DEFAULT_EXCLUDE + list(exclude or [])
    root = root or Path.cwd()
    out: list[Path] = []
    errors: list[Finding] = []

    def excluded(p: Path, top: Path) -> bool:
        # names match any component below the scanned directory; paths match relative to the project root
        parts = p.relative_to(top).parts
        rel = _rel(p, root)
        return any(fnmatch.fnmatch(part, pat) for part in parts for pat in pats) or any(
            fnmatch.fnmatch(rel, pat) or fnmatch.fnmatch(rel, pat.rstrip("/") + "/*") for pat in pats)

    for raw in paths:
        p = Path(raw)
        if not p.exists():
            errors.append(Finding("GC904", "static", _rel(p, root), 0, message=format_message("GC904", error="no such file or directory")))
        elif p.is_file():
            out.append(p)  # named explicitly: scanned even if it matches an exclude
        else:
            for dirpath, dirnames, filenames in os.walk(p):
                d = Path(dirpath)
                dirnames[:] = sorted(n for n in dirnames if not excluded(d / n, p))
                out.extend(d / f for f in sorted(filenames) if f.endswith(".py") and not excluded(d / f, p))
    seen: set[str] = set()
    uniq = []
    for p in out:
        r = os.path.abspath(p)
        if r not in seen:
            seen.add(r)
            uniq.append(p)
    return uniq, errors


def _rel(p: Path, root: Path) -> str:
    rel = os.path.relpath(os.path.abspath(p), os.path.abspath(root))
    return Path(p).as_posix() if rel.startswith("..") else Path(rel).as_posix()


@functools.lru_cache(maxsize=None)
def _package_of(d: str) -> str:
    """Dotted package name of a directory ('' when it is not a package)."""
    if not os.path.isfile(os.path.join(d, "__init__.py")):
        return ""
    parent = _package_of(os.path.dirname(d)) if os.path.dirname(d) != d else ""
    return f"{parent}.{os.path.basename(d)}" if parent else os.path.basename(d)


def module_name(p: Path) -> tuple[str, bool]:
    """Dotted module name by walking up through packages; and whether the file is a package __init__."""
    ap = os.path.abspath(p)
    pkg = _package_of(os.path.dirname(ap))
    stem = Path(ap).stem
    if stem == "__init__":
        return pkg or Path(ap).parent.name, True
    return f"{pkg}.{stem}" if pkg else stem, False


def _read(path: Path) -> tuple[str | None, str | None]:
    try:
        data = path.read_bytes()
    except OSError as e:
        return None, e.strerror or str(e)
    try:
        enc, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(enc), None
    except (SyntaxError, UnicodeDecodeError, LookupError) as e:
        return None, f"cannot decode ({e.__class__.__name__}: {str(e)[:80]})"


def _analyse_one(args: tuple[str, str | None]) -> tuple[dict, bool]:
    path, cache_dir = args
    text, err = _read(Path(path))
    if text is None:
        return {"error": err}, False
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    cfile = Path(cache_dir) / digest[:2] / f"{digest}.json" if cache_dir else None
    if cfile is not None:
        try:
            return json.loads(cfile.read_text()), True
        except (OSError, ValueError):
            pass
    summary = analyse_text(text)
    if cfile is not None:
        try:
            cfile.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=cfile.parent, suffix=".tmp")
            with os.fdopen(fd, "w") as fh:
                json.dump(summary, fh, separators=(",", ":"))
            os.replace(tmp, cfile)
        except OSError:
            pass  # a read-only cache only costs speed
    return summary, False


def analyse_files(files: list[Path], cache: bool = True, jobs: int | None = None) -> tuple[list[dict], int]:
    cache_dir = str(default_cache_dir()) if cache else None
    args = [(str(f), cache_dir) for f in files]
    jobs = jobs or os.cpu_count() or 1
    if jobs > 1 and len(files) >= 24:
        with ProcessPoolExecutor(max_workers=jobs) as ex:
            results = list(ex.map(_analyse_one, args, chunksize=max(1, len(args) // (jobs * 8))))
    else:
        results = [_analyse_one(a) for a in args]
    return [r for r, _ in results], sum(1 for _, c in results if c)


def scan(paths: list[str], *, entry_points: list[str] | None = None, exclude: list[str] | None = None,
         select: list[str] | None = None, ignore: list[str] | None = None, root: Path | None = None,
         cache: bool = True, jobs: int | None = None) -> ScanResult:
    root = root or Path.cwd()
    codes = select_codes(select, ignore)
    files, findings = discover(paths, exclude, root)
    summaries, cached = analyse_files(files, cache=cache, jobs=jobs)
    rels = [_rel(f, root) for f in files]
    by_path: dict[str, dict] = {}
    modules: dict[str, str] = {}
    for f, rel, summ in zip(files, rels, summaries):
        if "error" in summ:
            findings.append(Finding("GC904", "static", rel, 0, message=format_message("GC904", error=summ["error"])))
            continue
        mod, is_pkg = module_name(f)
        summ["is_package"] = is_pkg
        by_path[rel] = summ
        modules[rel] = mod
    prog = Program(by_path, modules)
    scoped = bool(entry_points) or any(f.get("capturable") for s in by_path.values() for f in s["functions"].values())
    reach = prog.reachable(entry_points or []) if scoped else None

    def in_scope(path: str, function: str) -> bool:
        return reach is None or (path, function) in reach

    suppressed = 0
    for rel, summ in by_path.items():
        raw = [Finding(d["rule"], "static", rel, d["line"], d["col"], d["function"], d["message"], d["source"])
               for d in summ["findings"]]
        raw += _callee_findings(prog, rel, summ, reach, root)
        sups = summ["suppressions"]
        used = [False] * len(sups)
        for f in raw:
            if f.rule == "GC903":
                findings.append(f)
                continue
            hit = _suppressing(sups, f)
            if hit is not None:
                used[hit] = True
            if not in_scope(rel, f.function) or f.rule not in codes:
                continue
            if hit is not None and sups[hit]["reason"]:
                suppressed += 1
                continue
            findings.append(f)
        for i, s in enumerate(sups):
            src = s["source"]
            unknown = [c for c in s["codes"] if not any(r.startswith(c) for r in RULES)]
            if unknown:
                findings.append(Finding("GC905", "static", rel, s["line"], message=format_message("GC905", codes=",".join(unknown)), source=src))
            elif not s["reason"]:
                findings.append(Finding("GC901", "static", rel, s["line"], message=format_message("GC901", codes=",".join(s["codes"])), source=src))
            elif not used[i]:
                findings.append(Finding("GC902", "static", rel, s["line"], message=format_message("GC902", codes=",".join(s["codes"])), source=src))
    findings = [f for f in findings if f.rule in codes or f.rule in ("GC903", "GC904")]
    findings.sort(key=Finding.sort_key)
    return ScanResult(findings, len(files), suppressed, cached, len(reach) if reach is not None else None, by_path)


def _suppressing(sups: list[dict], f: Finding) -> int | None:
    for i, s in enumerate(sups):
        if s["target"] == f.line or s["line"] == f.line:
            if any(f.rule.startswith(c) for c in s["codes"]):
                return i
    return None


def _callee_findings(prog: Program, rel: str, summ: dict, reach, root: Path) -> list[Finding]:
    """GC704: explicit helper calls whose callee reads back (the call site in the hot path gets a finding)."""
    out: list[Finding] = []
    lines: list[str] | None = None
    for q in summ["functions"]:
        if reach is not None and (rel, q) not in reach:
            continue
        for (tpath, tq), call in prog.callees(rel, q):
            if call[0] not in ("name", "attr", "self") or (tpath, tq) == (rel, q):
                continue
            if call[0] == "self" and tq.rsplit(".", 1)[-1] != call[1]:
                continue   # `self.ffn(x)` runs a submodule's forward: its findings are reported there, in scope
            hits = [d for d in prog.s[tpath]["findings"] if d["function"] == tq and is_readback(d["rule"])]
            if not hits:
                continue
            first = hits[0]
            line, col = call[-2], call[-1]
            if lines is None:
                text, _ = _read(root / rel if not Path(rel).is_absolute() else Path(rel))
                lines = (text or "").splitlines()
            out.append(Finding("GC704", "static", rel, line, col, q,
                               format_message("GC704", callee=tq, where=f"{tpath}:{first['line']} {first['rule']}"),
                               lines[line - 1].strip() if 0 < line <= len(lines) else ""))
    return out
