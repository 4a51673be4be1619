"""`graphcheck scan`: discover files, analyse them in parallel with a content-hash cache, apply scope and
suppressions, and return findings. Never stops at a bad file: unreadable or unparsable files are findings."""
from __future__ import annotations

import fnmatch
import gc
import hashlib
import io
import marshal
import os
import re
import sys
import signal
import stat
import tempfile
import tokenize
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..findings import Finding
from ..rules import RULES, format_message, select_codes
from .engine import ENGINE_VERSION, analyse_text
from .placement import NO_PLACEMENT, Placement
from .gitignore import GitIgnore
from .regions import RegionMap
from .scope import Program

DEFAULT_EXCLUDE = [".git", "__pycache__", ".venv", "venv", ".tox", ".nox", "build", "dist", "node_modules", ".eggs",
                   "*.egg-info", ".mypy_cache", ".pytest_cache"]


def _rules_digest() -> str:
    # the cache format is marshal's, which is specific to the Python version
    h = hashlib.sha256(f"{ENGINE_VERSION} {sys.version_info[:2]}".encode())
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
    unresolved: list[dict] = field(default_factory=list)   # calls in scope that resolve to nothing: path, line, call
    scope: list[str] = field(default_factory=list)         # 'path:function' of every function in the captured region
    warnings: list[str] = field(default_factory=list)      # entry points that reach less than their class constructs
    fanouts: list[dict] = field(default_factory=list)      # dispatch calls not followed (also one warning each)
    regions: RegionMap | None = field(default=None, repr=False)   # each line's region, for the runtime rows

    def scope_report(self, warnings: bool = True) -> str:
        """What `--show-scope` prints: the functions in the captured region, the calls that could not be followed,
        each fan-out call with its implementations and (unless the report prints them) the warnings."""
        out = [f"{len(self.scope)} function(s) in the captured region:"] + [f"  {s}" for s in self.scope]
        out.append(f"{len(self.unresolved)} unresolved call(s) in scope:")
        out += [f"  {u['path']}:{u['line']} {u['function']}: {u['call']}" for u in self.unresolved]
        out.append(f"{len(self.fanouts)} fan-out call(s) not followed:")
        for fo in self.fanouts:
            out.append(f"  {fo['path']}:{fo['line']} {fo['function']}: {fo['call']} -> {fo['implementations']} "
                       f"implementation(s) in {fo['classes']} class(es):")
            out += [f"    {t}" for t in fo["targets"]]
        out += [f"warning: {w}" for w in self.warnings] if warnings else []
        return "\n".join(out)

    def scope_line(self) -> str:
        """One summary line about the scope, '' for an unscoped scan: never let a partial scope read as clean."""
        if self.in_scope_functions is None:
            return ""
        line = f"{self.in_scope_functions} function(s) in the captured region"
        if self.unresolved:
            line += f", {len(self.unresolved)} call(s) in it could not be resolved (--show-scope lists them)"
        if self.fanouts:
            line += f", {len(self.fanouts)} fan-out call(s) not followed (--show-scope lists them)"
        return line


def discover(paths: list[str], exclude: list[str] | None = None, root: Path | None = None,
             force_exclude: bool = False) -> tuple[list[Path], list[Finding]]:
    """Python files under paths, minus excludes and what .gitignore ignores; a path that does not exist, or is
    not a regular file, is a finding, not a crash (a FIFO named x.py would block the scan forever). A path named
    explicitly is scanned even if it matches an exclude, unless `force_exclude` (ruff's --force-exclude: what
    pre-commit passes are explicit paths, and the configured excludes must still hold)."""
    pats = DEFAULT_EXCLUDE + list(exclude or [])
    root = root or Path.cwd()
    out: list[Path] = []
    errors: list[Finding] = []
    # names match any component below the scanned directory (the walk prunes excluded directories, so only the
    # new component needs checking); paths match relative to the project root
    name_rx = re.compile("|".join(fnmatch.translate(p) for p in pats))
    path_rx = re.compile("|".join(fnmatch.translate(p) + "|" + fnmatch.translate(p.rstrip("/") + "/*") for p in pats))
    aroot = os.path.abspath(root)

    def excluded(p: Path, top: Path) -> bool:
        if name_rx.match(p.name):
            return True
        ap = os.path.abspath(p)
        rel = ap[len(aroot) + 1:].replace(os.sep, "/") if ap.startswith(aroot + os.sep) else Path(p).as_posix()
        return bool(path_rx.match(rel))

    def forced_out(p: Path) -> bool:
        ap = os.path.abspath(p)
        rel = ap[len(aroot) + 1:].replace(os.sep, "/") if ap.startswith(aroot + os.sep) else Path(p).as_posix()
        return bool(path_rx.match(rel)) or any(name_rx.match(part) for part in rel.split("/") if part)

    for raw in paths:
        p = Path(raw)
        if force_exclude and forced_out(p):
            continue
        try:
            st = os.stat(p)
        except OSError:
            errors.append(Finding("GC904", "static", rel_path(p, root), 0, message=format_message("GC904", error="no such file or directory")))
            continue
        if stat.S_ISREG(st.st_mode):
            out.append(p)  # named explicitly: scanned even if it matches an exclude
        elif not stat.S_ISDIR(st.st_mode):
            errors.append(Finding("GC904", "static", rel_path(p, root), 0, message=format_message("GC904", error="not a regular file")))
        else:
            ignore = GitIgnore(p)
            # a directory that cannot be listed was not checked: a GC904 row (exit 2), never a silent "clean"
            for dirpath, dirnames, filenames in os.walk(p, onerror=lambda e: errors.append(Finding(
                    "GC904", "static", rel_path(Path(e.filename or p), root), 0,
                    message=format_message("GC904", error=e.strerror or str(e))))):
                d = Path(dirpath)
                dirnames[:] = sorted(n for n in dirnames if not excluded(d / n, p) and not ignore.ignored(d / n, True))
                for f in sorted(filenames):
                    if not f.endswith(".py"):
                        continue
                    fp = d / f
                    if excluded(fp, p) or ignore.ignored(fp, False):
                        continue
                    try:
                        if not stat.S_ISREG(os.stat(fp).st_mode):
                            continue       # FIFOs, sockets, devices, dangling links: never opened
                    except OSError:
                        continue
                    out.append(fp)
    seen: set[str] = set()
    uniq = []
    for p in out:
        r = os.path.abspath(p)
        if r not in seen:
            seen.add(r)
            uniq.append(p)
    return uniq, errors


def rel_path(p: Path | str, root: Path) -> str:
    """`p` relative to `root` in POSIX form, as findings name files; a path outside `root` stays as given."""
    rel = os.path.relpath(os.path.abspath(p), os.path.abspath(root))
    return Path(p).as_posix() if rel.startswith("..") else Path(rel).as_posix()


def package_dirs(root: Path) -> dict[str, str]:
    """`[tool.setuptools] package-dir` of the project's pyproject.toml as {absolute directory: package name}, so a
    tree installed under another name (`kernels/` as `dsv4_kernels`) resolves imports of the installed name."""
    try:
        import tomllib
        with open(root / "pyproject.toml", "rb") as fh:
            data = tomllib.load(fh)
    except (OSError, ValueError, ImportError):
        return {}
    mapping = data.get("tool", {})
    for key in ("setuptools", "package-dir"):      # any level of another type (`tool = "x"`) means no mapping
        mapping = mapping.get(key, {}) if isinstance(mapping, dict) else {}
    if not isinstance(mapping, dict):
        return {}
    out = {}
    for pkg, d in mapping.items():
        if isinstance(pkg, str) and isinstance(d, str):
            out[os.path.abspath(root / d)] = pkg
    return out


class ModuleNamer:
    """Dotted module names by walking up through packages, honouring package-dir mappings."""

    def __init__(self, mapping: dict[str, str] | None = None, root: Path | str | None = None):
        self.mapping = mapping or {}
        self.root = os.path.abspath(root) if root is not None else None
        self._pkg: dict[str, str] = {}

    def _inside(self, d: str) -> bool:
        return self.root is not None and d.startswith(self.root.rstrip(os.sep) + os.sep)

    def package_of(self, d: str) -> str:
        hit = self._pkg.get(d)
        if hit is not None:
            return hit
        mapped = self.mapping.get(d)
        if mapped is not None:
            name = mapped       # "" maps the project root: packages directly below it are top level
        elif self.root is not None and d == self.root:
            name = ""           # the project root is on sys.path: names never climb above it into a parent package
        else:
            up = os.path.dirname(d)
            parent = self.package_of(up) if up != d else ""
            if os.path.isfile(os.path.join(d, "__init__.py")):
                name = f"{parent}.{os.path.basename(d)}" if parent else os.path.basename(d)
            else:
                # a directory without __init__.py inside a package of the project is a namespace subpackage (PEP
                # 420: `import pkg.sub.mod` finds it through pkg.__path__), e.g. sglang/srt; elsewhere, nothing
                name = f"{parent}.{os.path.basename(d)}" if parent and self._inside(d) else ""
        self._pkg[d] = name
        return name

    def __call__(self, p: Path) -> tuple[str, bool]:
        ap = os.path.abspath(p)
        pkg = self.package_of(os.path.dirname(ap))
        stem = Path(ap).stem
        if stem == "__init__":
            return pkg or Path(ap).parent.name, True
        return f"{pkg}.{stem}" if pkg else stem, False


# One source this large is generated data, not code to review (the largest hand-written modules of big projects are
# well under 1 MB); parsing and analysing one took minutes and gigabytes (a 50 MB file: 493 s, 13.4 GB), so it is
# refused, as a file that could not be read: never a silent pass.
MAX_SOURCE_BYTES = 5_000_000


def too_large(size: int) -> str | None:
    """Why a source of `size` bytes is not analysed, or None."""
    if size <= MAX_SOURCE_BYTES:
        return None
    return (f"{size / 1e6:.1f} MB, over the {MAX_SOURCE_BYTES / 1e6:g} MB limit for one Python source "
            "(generated code? add it to [tool.graphcheck] exclude)")


def _read(path: Path) -> tuple[str | None, str | None]:
    try:
        big = too_large(os.stat(path).st_size)
        if big:
            return None, big
        data = path.read_bytes()
    except OSError as e:
        return None, e.strerror or str(e)
    return decode_source(data)


def decode_source(data: bytes) -> tuple[str | None, str | None]:
    """Python source bytes as text, the way Python reads a file (a coding declaration or BOM, else UTF-8): (text,
    None), or (None, why not)."""
    try:
        enc, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(enc), None
    except (SyntaxError, UnicodeDecodeError, LookupError) as e:
        return None, f"cannot decode ({e.__class__.__name__}: {str(e)[:80]})"


_SUMMARY_KEYS = {"v": str, "imports": dict, "functions": dict, "classes": dict, "registries": dict, "findings": list,
                 "suppressions": list}


def _valid_summary(d) -> bool:
    """A cache entry of the wrong shape (another version, a truncated or hand-edited file) is ignored."""
    return isinstance(d, dict) and d.get("v") == ENGINE_VERSION and all(
        isinstance(d.get(k), t) for k, t in _SUMMARY_KEYS.items()) and all(
        isinstance(f, dict) and isinstance(f.get("rule"), str) and isinstance(f.get("line"), int) for f in d["findings"])


def _analyse_one(args: tuple) -> tuple[dict, bool, bytes | None]:
    path, cache_dir, tag, placement = args
    text, err = _read(Path(path))
    if text is None:
        return {"error": err}, False, None
    return _analyse_text_cached(text, cache_dir, tag, placement)


def _analyse_one_packed(args: tuple) -> tuple[bytes, bool]:
    # workers hand summaries back as marshal bytes: several times cheaper to move between processes than pickle;
    # the bytes just written to the cache are those bytes
    summ, cached, data = _analyse_one(args)
    return (data if data is not None else marshal.dumps(summ)), cached


def _cache_file(text: str, cache_dir: str) -> Path:
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return Path(cache_dir) / digest[:2] / f"{digest}.bin"


def _lookup(cfile: Path) -> dict | None:
    try:
        # marshal: the summary is plain dicts/lists/strings, and loads several times faster than JSON
        hit = marshal.loads(cfile.read_bytes())
    except (OSError, ValueError, EOFError, TypeError, RecursionError):
        return None
    return hit if _valid_summary(hit) else None


def _analyse_text_cached(text: str, cache_dir: str | None, tag: str,
                         placement: Placement = NO_PLACEMENT) -> tuple[dict, bool, bytes | None]:
    """The summary, whether it came from the cache, and its marshal bytes when they were written to the cache."""
    cfile = _cache_file(text, cache_dir) if cache_dir else None
    if cfile is not None:
        hit = _lookup(cfile)
        if hit is not None:
            return hit, True, None
    summary = analyse_text(text, placement)
    data = None
    if cfile is not None:
        tmp = None
        try:
            cfile.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=cfile.parent, prefix=f".{tag}.", suffix=".tmp")
            data = marshal.dumps(summary)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, cfile)
        except (OSError, ValueError, RecursionError):
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass   # a read-only cache only costs speed
    return summary, False, data


def _worker_init() -> None:
    # Ctrl-C goes to the whole process group: the parent decides; workers must not die mid-write with a traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # ASTs and summaries are trees (no reference cycles): reference counting frees them, and the cyclic collector
    # would only re-traverse the millions of nodes each parse allocates (a third of the analysis time)
    gc.disable()


class _NoCyclicGC:
    """The same, for the analysis and the cross-file pass in this process; restores the collector's state.

    `freeze`: also exempt every object alive at the end from later collections (`gc.freeze`), when the collector
    was on. The summaries the scan returns are millions of container objects made while it was off, all still in
    the youngest generation: each of the next collections (the report's first few hundred allocations trigger
    them) would walk every one of them again, about 0.7 s of CPU after a scan of torch's tree. Frozen objects are
    still freed by reference counting; only a reference cycle among them (the worker pool's bookkeeping) lives on
    until `gc.unfreeze()` or the end of the process."""

    def __init__(self, freeze: bool = False):
        self.freeze = freeze

    def __enter__(self):
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc):
        if self.was:
            if self.freeze:
                gc.freeze()
            gc.enable()


def _remove_partial(cache_dir: str | None, tag: str) -> None:
    if not cache_dir or not os.path.isdir(cache_dir):
        return
    for sub in os.scandir(cache_dir):
        if sub.is_dir():
            for f in os.scandir(sub.path):
                if f.name.startswith(f".{tag}.") and f.name.endswith(".tmp"):
                    try:
                        os.unlink(f.path)
                    except OSError:
                        pass


_CHUNK = 8     # files per task sent to a worker: few enough to balance the workers' load, enough to amortise the pipe


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0     # the worker reports the unreadable file


def _cache_dir(placement: Placement) -> str:
    """The cache of summaries made under these declarations: what a file holds depends on them."""
    base = default_cache_dir()
    if not placement:
        return str(base)
    return str(base / ("p-" + hashlib.sha256(placement.key().encode()).hexdigest()[:12]))


def analyse_files(files: list[Path], cache: bool = True, jobs: int | None = None,
                  placement: Placement = NO_PLACEMENT) -> tuple[list[dict], int]:
    """Summaries of the files, in parallel with a content-hash cache. A KeyboardInterrupt stops the workers,
    removes this run's half-written cache files and is re-raised (the CLI exits 130)."""
    cache_dir = _cache_dir(placement) if cache else None
    tag = f"{os.getpid()}"
    jobs = jobs or os.cpu_count() or 1
    done: dict[int, tuple[dict, bool]] = {}
    if cache_dir and jobs > 1 and os.path.isdir(cache_dir):
        # cache hits are read here: a warm scan then starts no workers at all (a cache directory not made yet, as
        # on a first scan, holds none: reading every file here then only delays the workers)
        for i, f in enumerate(files):
            text, err = _read(f)
            if text is None:
                done[i] = ({"error": err}, False)
                continue
            hit = _lookup(_cache_file(text, cache_dir))
            if hit is not None:
                done[i] = (hit, True)
    todo = [i for i in range(len(files)) if i not in done]
    args = [(str(files[i]), cache_dir, tag, placement) for i in todo]
    try:
        if jobs > 1 and len(args) >= 24:
            # the largest files first, in small chunks: the last chunks are then short and the workers finish
            # together (in path order, chunks of 1/16 of the files left one worker running alone for the last 1.5 s)
            order = sorted(range(len(args)), key=lambda i: -_size(args[i][0]))
            results = [None] * len(args)
            ex = ProcessPoolExecutor(max_workers=jobs, initializer=_worker_init)
            try:
                packed = ex.map(_analyse_one_packed, [args[i] for i in order], chunksize=_CHUNK)
                for i, (b, c) in zip(order, packed):
                    results[i] = (marshal.loads(b), c)
            except BaseException:
                for p in list(getattr(ex, "_processes", {}).values()):
                    p.terminate()
                ex.shutdown(wait=True, cancel_futures=True)
                raise
            ex.shutdown(wait=True)
        else:
            with _NoCyclicGC():
                results = [_analyse_one(a)[:2] for a in args]
    except KeyboardInterrupt:
        _remove_partial(cache_dir, tag)
        raise
    done.update(zip(todo, results))
    ordered = [done[i] for i in range(len(files))]
    return [r for r, _ in ordered], sum(1 for _, c in ordered if c)


def scan(paths: list[str], *, entry_points: list[str] | None = None, exclude: list[str] | None = None,
         select: list[str] | None = None, ignore: list[str] | None = None, root: Path | None = None,
         cache: bool = True, jobs: int | None = None, source: str | None = None,
         source_name: str | None = None, per_step_entry_points: list[str] | None = None,
         allowed_contexts: list[str] | None = None, eager_only: list[str] | None = None,
         fanout_limit: int = 8, placement: Placement = NO_PLACEMENT, force_exclude: bool = False,
         partial: bool = False) -> ScanResult:
    """Scan files under ``paths``; ``source`` (e.g. read from stdin) is scanned as if it were the file
    ``source_name`` (relative to ``root``), in place of that file on disk if it exists. The region keys
    (``per_step_entry_points``, ``allowed_contexts``, ``eager_only``, ``fanout_limit``) are those of
    `graphcheck explain regions`; ``placement``: the host-resident declarations of `[tool.graphcheck]`;
    ``partial``: the paths are part of the project (files named on the command line), so an eager-only entry
    that names none of them is no error."""
    regions = (list(per_step_entry_points or []), list(allowed_contexts or []), list(eager_only or []), fanout_limit,
               partial)
    with _NoCyclicGC(freeze=True):
        return _scan(paths, entry_points, exclude, select, ignore, root, cache, jobs, source, source_name, regions,
                     placement, force_exclude)


def _scan(paths, entry_points, exclude, select, ignore, root, cache, jobs, source, source_name, regions,
          placement, force_exclude) -> ScanResult:
    per_step, allowed, eager_only, fanout_limit, partial = regions
    root = root or Path.cwd()
    codes = select_codes(select, ignore)
    files, findings = discover(paths, exclude, root, force_exclude) if paths else ([], [])
    if source is not None:
        if not source_name:
            raise ValueError("a source given as text needs a display filename (source_name), e.g. pkg/mod.py")
        sp = Path(source_name) if Path(source_name).is_absolute() else root / source_name
        files = [f for f in files if os.path.abspath(f) != os.path.abspath(sp)]
    summaries, cached = analyse_files(files, cache=cache, jobs=jobs, placement=placement)
    namer = ModuleNamer(package_dirs(root), root)
    rels = [rel_path(f, root) for f in files]
    if source is not None:
        files.append(sp)
        rels.append(rel_path(sp, root))
        summaries.append(_analyse_text_cached(source, _cache_dir(placement) if cache else None, str(os.getpid()),
                                              placement)[0])
    by_path: dict[str, dict] = {}
    modules: dict[str, str] = {}
    texts: dict[str, list[str]] = {}
    if source is not None:
        texts[rels[-1]] = source.splitlines()
    for f, rel, summ in zip(files, rels, summaries):
        if "error" in summ:
            findings.append(Finding("GC904", "static", rel, 0, message=format_message("GC904", error=summ["error"])))
            continue
        mod, is_pkg = namer(f)
        summ["is_package"] = is_pkg
        by_path[rel] = summ
        modules[rel] = mod
    prog = Program(by_path, modules)
    capturable = [(p, q) for p, s in by_path.items() for q, f in s["functions"].items() if f.get("capturable")]
    scoped = bool(entry_points) or bool(per_step) or bool(capturable)
    prog.open_scope = not scoped
    reach = prog.reachable([*(entry_points or []), *per_step], fanout_limit) if scoped else None
    within = reach.functions if reach is not None else None
    rmap = RegionMap(by_path, modules, allowed=allowed, eager_only=eager_only, strict=not partial)
    if reach is not None:
        rmap.assign(reach, [prog.entry(e) for e in entry_points or []] + capturable,
                    [prog.entry(e) for e in per_step])

    suppressed = 0
    for rel, summ in by_path.items():
        sups = summ["suppressions"]
        used = [False] * len(sups)
        for d in summ["findings"]:
            # a Finding only for the rows kept: most conditional rows do not hold (160,000 of flashinfer's tree
            # for 7,400 kept)
            rule, line, function = d["rule"], d["line"], d["function"]
            if rule == "GC903":
                findings.append(Finding(rule, "static", rel, line, d["col"], function, d["message"], d["source"]))
                continue
            hit = _suppressing(sups, rule, line)
            if hit is not None:
                used[hit] = True
            if reach is not None and (rel, function) not in reach:
                continue
            if rule not in codes:
                continue
            when = d.get("when")
            if when and not prog.holds(rel, function, when, within):
                continue
            if hit is not None:
                if sups[hit]["reason"]:
                    suppressed += 1
                    continue
            f = Finding(rule, "static", rel, line, d["col"], function, d["message"], d["source"])
            f.region = rmap.at(rel, f.function, f.line, f.col)
            if reach is not None:
                chain = reach.chain((rel, f.function))
                if chain:
                    f.evidence = {"call_chain": chain,
                                  "reached_from": " -> ".join(c["function"] for c in chain) + f" -> {f.function}"}
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
    res = ScanResult(findings, len(files), suppressed, cached, len(reach) if reach is not None else None, by_path)
    res.regions = rmap
    if reach is not None:
        res.unresolved = sorted(reach.unresolved, key=lambda u: (u["path"], u["line"], u["call"]))
        res.scope = sorted(f"{p}:{q}" for p, q in reach.functions)
        res.fanouts = sorted(reach.fanouts, key=lambda fo: (fo["path"], fo["line"], fo["call"]))
        res.warnings = reach.gaps + [_fanout_warning(fo, fanout_limit) for fo in res.fanouts]
    return res


def _fanout_warning(fo: dict, limit: int) -> str:
    sites = f" and {fo['sites'] - 1} other site(s)" if fo["sites"] > 1 else ""
    return (f"fan-out: {fo['call']} at {fo['path']}:{fo['line']} ({fo['function']}){sites} resolves to "
            f"{fo['implementations']} implementation(s) in {fo['classes']} class(es), more than fan-out-limit {limit}; "
            "not followed (name the receiver's class, configure them eager-only, or raise fan-out-limit; "
            "--show-scope lists them)")


def _suppressing(sups: list[dict], rule: str, line: int) -> int | None:
    """The suppression comment that covers a row of `rule` at `line` (its own line or the one it targets)."""
    for i, s in enumerate(sups):
        if s["target"] == line or s["line"] == line:
            if any(rule.startswith(c) for c in s["codes"]):
                return i
    return None
