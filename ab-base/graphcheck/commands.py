"""The commands. Each builds one Result (result.py) and hands it to the renderer chosen by --output-format:
config -> scan / audit / capture -> findings -> Result (the gate) -> render -> stdout or -o FILE.

Only audit, capture, run (without --no-runtime) and baseline import torch, and only after checking it is there.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from pathlib import Path

from .config import Config, ConfigError, load_config
from .findings import UNCHECKED, Finding
from .io import OutputError, check_output, stdout_to_stderr, write_stdout
from .options import DEFAULT_FORMAT, Output, Runtime
from .report.output import finish
from .result import classify


def dispatch(args) -> int:
    if args.cmd == "rules":
        return _rules()
    if args.cmd == "explain":
        return _explain(args.code)
    if args.cmd == "report":
        return cmd_report(args)
    cfg = load_config(_config_start(args), explicit=args.config)
    return globals()[f"cmd_{args.cmd}"](args, cfg)


def _config_start(args) -> Path | None:
    """Where config discovery starts: the first scanned path (or --stdin-filename), else the current directory."""
    if getattr(args, "stdin_filename", None):
        return Path(args.stdin_filename)
    paths = [p for p in getattr(args, "paths", None) or [] if p != "-"]
    return Path(paths[0]) if paths else None


def _codes(s: str | None) -> list[str]:
    return [c.strip() for c in s.split(",") if c.strip()] if s else []


def _format(args, cfg: Config | None) -> str:
    return args.format or (cfg.format if cfg is not None else DEFAULT_FORMAT)


def _output(args, fmt: str) -> Output:
    """The output options of a command that has the `output` group (cli.py)."""
    return Output(format=fmt, file=args.output, statistics=args.statistics, quiet=args.quiet, exit_zero=args.exit_zero,
                  all_regions=args.show_all_regions)


def _runtime(args, cfg: Config) -> Runtime:
    """The runtime options of a command with `--device`/`--nproc` (cli.py), over the configured steps and warm-up;
    the one place the runtime layers' settings are read from the command line."""
    timeout = cfg.step_timeout if args.step_timeout is None else args.step_timeout
    return Runtime(steps=getattr(args, "steps", None) or cfg.steps, warmup=cfg.warmup, device=args.device,
                   strict=getattr(args, "strict", False), nproc=args.nproc, step_timeout=timeout)


# ---------------------------------------------------------------------------------------------------- output


def _check_out(args, cfg: Config | None, *extra) -> None:
    if args.output is not None:
        inputs = [p for p in getattr(args, "paths", None) or () if p != "-"]    # what `scan` reads, whatever its name
        check_output(args.output, [cfg.source if cfg else None, cfg.baseline_path if cfg else None, *extra, *inputs])


# ---------------------------------------------------------------------------------------------------- static layer


def static_layer(cfg: Config, *, paths: list[str] | None = None, entry_points: list[str] | None = None,
                 select: list[str], ignore: list[str], cache: bool = True, jobs: int | None = None,
                 stdin: tuple[str, str] | None = None, show_scope: bool = False,
                 scope_warnings: bool = True, force_exclude: bool = False) -> tuple[list[Finding], dict, list[str], object]:
    """Scan; returns (findings, layer summary, problems, the region map that places the runtime rows' lines).

    Explicit `paths` with configured entry points (what the pre-commit hook passes: the staged files) are scanned
    together with the configured paths, so the entry-point modules resolve whether or not they are staged, and
    only the findings in the explicit paths are kept."""
    from .static.scanner import rel_path, scan
    from .static.scope import ScopeError
    from .static.placement import Placement
    entry = cfg.entry_points if entry_points is None else entry_points
    # the per-step entry points belong with the configured ones: `--entry-point X` scans from X alone, and
    # `--all-functions` from nothing
    per_step = cfg.per_step_entry_points if entry_points is None else []
    rooted = bool(entry or per_step)      # a scope to resolve from the configured paths
    configured = [str(cfg.root / p) for p in cfg.paths]
    keep: list[str] | None = None
    if stdin is not None:
        # the configured paths resolve the entry points; only the buffer's own findings are its report (an
        # editor shows them on that buffer)
        scan_paths = configured if rooted else []
        keep = [rel_path(stdin[0], cfg.root)] if rooted else None
    elif paths:
        scan_paths = (configured + list(paths)) if rooted and entry_points is None else list(paths)
        keep = [rel_path(p, cfg.root) for p in paths] if rooted and entry_points is None else None
    else:
        scan_paths = configured
    gone = [p for p, c in zip(cfg.paths, configured) if c in scan_paths and not os.path.lexists(c)]
    if gone:     # one line naming the key, instead of "nothing to check" plus a per-file read error
        where = f"[tool.graphcheck] paths in {cfg.source}" if cfg.source else "paths"
        raise ConfigError(f"{where}: {gone[0]!r} does not exist under {cfg.root}")
    try:
        res = scan(scan_paths, entry_points=entry, exclude=cfg.exclude, select=select, ignore=ignore, root=cfg.root,
                   cache=cache, jobs=jobs, per_step_entry_points=per_step, allowed_contexts=cfg.allowed_sync_contexts,
                   eager_only=cfg.eager_only, fanout_limit=cfg.fan_out_limit,
                   placement=Placement(tuple(cfg.host_resident), tuple(cfg.host_field_markers)),
                   force_exclude=force_exclude,
                   partial=not all(c in scan_paths for c in configured),
                   **({"source_name": stdin[0], "source": stdin[1]} if stdin is not None else {}))
    except (ScopeError, ValueError) as e:
        raise ConfigError(str(e)) from None
    findings = list(res.findings)
    if keep is not None:
        findings = [f for f in findings if any(f.path == k or f.path.startswith(k.rstrip("/") + "/") or k == "."
                                               for k in keep)]
    if show_scope:   # scope_warnings False: the report that follows prints them itself (the full format)
        print(res.scope_report(warnings=scope_warnings), file=sys.stderr)
    # unresolved calls and scope gaps: the scan did not see all of the region, so no "all checks passed"
    warnings = list(res.warnings)
    if res.in_scope_functions is not None and (stdin is not None or paths):
        # a file named on the command line (or stdin) that no entry point reaches was not checked at all: say so,
        # instead of "All checks passed" on a `.item()` in it
        reached = {q.split(":", 1)[0] for q in res.scope}
        named = [rel_path(stdin[0], cfg.root)] if stdin is not None else [
            rel_path(p, cfg.root) for p in paths if os.path.isfile(p) and p.endswith(".py")]
        for rel in named:
            defs = [q for q in (res.summaries.get(rel) or {}).get("functions", ()) if not q.startswith("<")]
            if defs and rel not in reached:       # (a file of module-level code only has no function to reach)
                warnings.append(f"{rel}: no function in it is reachable from the entry points, so nothing in it was "
                                "checked (`graphcheck scan --all-functions` checks every function)")
    layer = {"files": res.files, "functions_in_scope": res.in_scope_functions, "suppressed": res.suppressed,
             "findings": len(findings), "unresolved_calls": len(res.unresolved), "scope_warnings": warnings,
             "fan_out": [{k: v for k, v in fo.items() if k != "targets"} for fo in res.fanouts]}
    problems = []
    if res.files == 0 and stdin is None and force_exclude and paths:
        pass      # every path given is excluded (pre-commit passing a file under an excluded directory): nothing to do
    elif res.files == 0 and stdin is None:
        where = ", ".join(paths or cfg.paths)
        problems.append(f"no Python file to check under {where} (root {cfg.root}); nothing was checked")
    return findings, layer, problems, res.regions


def cmd_scan(args, cfg: Config) -> int:
    fmt = _format(args, cfg)
    _check_out(args, cfg)
    stdin = None
    paths = list(args.paths)
    if "-" in paths:
        if paths != ["-"]:
            raise ConfigError("`-` (read the source from stdin) cannot be combined with other paths")
        # --stdin-filename is a path from the current directory, like every other path on the command line
        name = os.path.abspath(args.stdin_filename) if args.stdin_filename else "stdin.py"
        from .static.scanner import MAX_SOURCE_BYTES, decode_source, too_large
        # bytes, decoded as a file on disk is (the locale's text stream turned bad bytes into surrogates, GC903)
        data = sys.stdin.buffer.read(MAX_SOURCE_BYTES + 1)
        size = len(data)
        while size > MAX_SOURCE_BYTES and (chunk := sys.stdin.buffer.read(1 << 20)):   # counted, never kept
            size += len(chunk)
        why = too_large(size)
        text, why = (None, why) if why else decode_source(data)
        if text is None:
            raise ConfigError(f"{args.stdin_filename + ' (from stdin)' if args.stdin_filename else 'stdin'}: {why}")
        stdin = (name, text)
        paths = []
    elif args.stdin_filename:
        raise ConfigError("--stdin-filename needs `-` as the path")
    missing = [p for p in paths if not os.path.lexists(p)]
    if missing:    # one line naming it, instead of "nothing to check" plus a per-file read error
        raise ConfigError(f"path {missing[0]}: no such file or directory")
    entry = [] if args.all_functions else args.entry_point
    from . import baseline as bl
    # the baseline the gate uses accepts the same rows here (the pre-commit hook must not block an edit to a file
    # with an accepted hazard); a baseline that does not exist yet is no baseline
    bpath = None if args.no_baseline else _baseline_path(args, cfg)
    base = (bl.load(bpath) if bpath is not None and bpath.exists() else None) or None    # an empty one accepts nothing
    select, ignore = _codes(args.select) or cfg.select, _codes(args.ignore) or cfg.ignore
    t0 = time.perf_counter()
    findings, layer, problems, _ = static_layer(cfg, paths=paths, entry_points=entry, select=select, ignore=ignore,
                                                cache=not args.no_cache, jobs=args.jobs, stdin=stdin,
                                                show_scope=args.show_scope, scope_warnings=fmt != "full",
                                                force_exclude=args.force_exclude)
    named = [stdin[0]] if stdin is not None else paths
    result = classify("scan", findings, base, problems=problems, layers={"static": layer},
                      timing={"static": time.perf_counter() - t0},
                      baseline_name=_display(bpath, cfg) if base is not None else None,
                      examined=_examined(cfg, select, ignore, ("static",), named))
    return finish(result, _output(args, fmt))


def _examined(cfg: Config, select: list[str], ignore: list[str], kinds: tuple[str, ...], paths: list[str] | None = None):
    """Which baseline entries a run could have found: its layers (`kinds`: a row several layers found is kept
    under the static one), its rules, and (for explicit paths) the files it scanned. The others are not stale."""
    from .rules import select_codes
    from .static.scanner import rel_path
    codes = set(select_codes(select or None, ignore or None))
    keep = [rel_path(p, cfg.root) for p in paths] if paths else None

    def examined(entry: dict) -> bool:
        if entry.get("rule") not in codes or entry.get("kind", "static") not in kinds:
            return False
        path = str(entry.get("path", ""))
        return keep is None or any(k == "." or path == k or path.startswith(k.rstrip("/") + "/") for k in keep)
    return examined


# ---------------------------------------------------------------------------------------------------- runtime layers


def need_torch(command: str) -> None:
    """The runtime layers run the user's PyTorch code; the static install has no torch."""
    try:
        import torch  # noqa: F401  (the runtime layers import it anyway)
    except ImportError:
        hint = "; or `graphcheck run --no-runtime` for the static layer only" if command == "run" else ""
        raise ConfigError(f"graphcheck {command} runs your code under PyTorch, which is not installed: "
                          f"pip install 'torch-graphcheck[runtime]' (torch>=2.8){hint}")


def _prepare(rt: Runtime, cfg: Config) -> None:
    from .runtime.attribution import set_root
    set_root(cfg.root)
    if str(cfg.root) not in sys.path:
        sys.path.insert(0, str(cfg.root))
    if rt.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise ConfigError("--device cuda: no CUDA device is available")


def runtime_layers(kinds: tuple[str, ...], specs: list[str], cfg: Config, rt: Runtime, step) -> tuple[list[Finding], dict, list[str], dict]:
    """Build each target once per layer and run it; a target that cannot be built is a problem (exit 2) and
    the other targets still run. Returns (findings, layers, problems, timing)."""
    from .target import TargetError, load_target
    findings: list[Finding] = []
    layers: dict = {}
    problems: list[str] = []
    timing: dict = {}
    broken: set[str] = set()
    for kind in kinds:
        t0 = time.perf_counter()
        got: list[Finding] = []
        ran = 0
        for spec in specs:
            if spec in broken:
                continue
            # the user's code may print (a loading message, a per-step log, a C++ extension's build): to stderr
            with step(f"{'audit' if kind == 'sync' else 'capture'} {spec}"), stdout_to_stderr():
                nproc = rt.nproc
                if nproc > 1:             # every rank builds its shard of the target; verdicts merged with their ranks
                    from .runtime.distributed import DistributedError, run_ranks
                    try:
                        got += run_ranks(kind, spec, nproc, steps=rt.steps, warmup=rt.warmup, device=rt.device,
                                         root=cfg.root)
                    except DistributedError as e:
                        broken.add(spec)
                        r, err = next(iter(e.errors.items()))
                        last = [ln.strip() for ln in err.splitlines() if ln.strip()][-1:] or [err]
                        problems.append(f"target {spec} on {nproc} ranks: rank {r}: {last[0]}; it was not checked")
                        continue
                    ran += 1
                    continue
                try:
                    target = load_target(spec, cfg.root, device=None if rt.device == "auto" else rt.device)
                except TargetError as e:
                    broken.add(spec)
                    problems.append(f"{e}; it was not checked")
                    continue
                if kind == "sync":
                    from .runtime.audit import audit
                    got += audit(target, steps=rt.steps, warmup=rt.warmup, strict=rt.strict,
                                 step_timeout=rt.step_timeout)
                else:
                    from .runtime.capture import capture_test
                    got += capture_test(target, steps=rt.steps, warmup=rt.warmup, device=rt.device,
                                        step_timeout=rt.step_timeout)
                ran += 1
        layers[kind] = {"targets": ran, "findings": len(got)}
        findings += got
        timing[kind] = time.perf_counter() - t0
    return findings, layers, problems, timing


def _targets(args, cfg: Config) -> list[str]:
    given = getattr(args, "target", None)
    if given is not None and not given.strip():
        raise ConfigError("target '': expected module:factory (omit it to use `targets` from [tool.graphcheck])")
    specs = [given] if given else cfg.targets
    if not specs:
        raise ConfigError("no target: pass module:factory, or set `targets` in [tool.graphcheck]")
    return specs


def _runtime_command(args, cfg: Config, kind: str) -> int:
    fmt = _format(args, cfg)
    _check_out(args, cfg)
    need_torch(args.cmd)
    rt = _runtime(args, cfg)
    _prepare(rt, cfg)
    specs = _targets(args, cfg)
    with _progress(_live(args, fmt)) as step:
        findings, layers, problems, timing = runtime_layers((kind,), specs, cfg, rt, step)
    result = classify(args.cmd, findings, None, problems=problems, layers=layers, targets=specs, timing=timing)
    return finish(result, _output(args, fmt))


def cmd_audit(args, cfg: Config) -> int:
    return _runtime_command(args, cfg, "sync")


def cmd_capture(args, cfg: Config) -> int:
    return _runtime_command(args, cfg, "capture")


# ---------------------------------------------------------------------------------------------------- run / baseline


def _live(args, fmt: str) -> bool:
    """The live display goes to stderr, only when that is a terminal; it never changes what is checked."""
    return (not getattr(args, "no_progress", False) and not getattr(args, "quiet", False) and sys.stderr.isatty()
            and fmt in ("full", "concise", "text"))


@contextlib.contextmanager
def _progress(enabled: bool):
    if not enabled:
        yield lambda name: contextlib.nullcontext()
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    # markup=False: a step names user input (a target such as "[/]:fn"), which rich would parse as markup
    with Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn(), transient=True,
                  console=Console(file=sys.stderr)) as p:
        @contextlib.contextmanager
        def step(name: str):
            task = p.add_task(name, total=None)
            try:
                yield
            finally:
                p.remove_task(task)
        yield step


def collect(args, cfg: Config, *, live: bool, select: list[str], ignore: list[str]) -> tuple[list[Finding], dict, list[str], dict]:
    """scan -> audit -> capture for the configured project: (merged rows, layers, problems, timing)."""
    from .inventory import merge
    runtime = not getattr(args, "no_runtime", False)
    rt = _runtime(args, cfg)
    if runtime:
        need_torch(args.cmd)
        _prepare(rt, cfg)
    with _progress(live) as step:
        t0 = time.perf_counter()
        with step("static scan"):
            static, layer, problems, regions = static_layer(cfg, select=select, ignore=ignore)
        layers, timing = {"static": layer}, {"static": time.perf_counter() - t0}
        found: list[Finding] = []
        if runtime and cfg.targets:
            from .rules import select_codes
            found, rl, rp, rtime = runtime_layers(("sync", "capture"), cfg.targets, cfg, rt, step)
            codes = set(select_codes(select, ignore)) | set(UNCHECKED)   # what could not be checked is never filtered out
            found = [f for f in found if f.rule in codes]
            layers.update(rl)
            problems += rp
            timing.update(rtime)
    return merge(static, found, regions.for_runtime if regions is not None else None), layers, problems, timing


def _baseline_path(args, cfg: Config) -> Path:
    return Path(args.baseline) if getattr(args, "baseline", None) else cfg.baseline_path


def _display(p: Path, cfg: Config) -> str:
    try:
        return p.resolve().relative_to(cfg.root.resolve()).as_posix()
    except ValueError:
        return p.as_posix()


def cmd_run(args, cfg: Config) -> int:
    from . import baseline as bl
    fmt = _format(args, cfg)
    bpath = _baseline_path(args, cfg)
    _check_out(args, cfg, bpath)
    base = bl.load(bpath)
    select, ignore = _codes(args.select) or cfg.select, _codes(args.ignore) or cfg.ignore
    rows, layers, problems, timing = collect(args, cfg, live=_live(args, fmt), select=select, ignore=ignore)
    # --no-runtime (or no targets) leaves the runtime layers' entries unexamined: not stale, not "fixed"
    kinds = ("static", "sync", "capture") if not args.no_runtime and cfg.targets else ("static",)
    result = classify("run", rows, base, problems=problems, layers=layers, targets=cfg.targets,
                      baseline_name=_display(bpath, cfg), strict_baseline=args.strict_baseline, timing=timing,
                      examined=_examined(cfg, select, ignore, kinds))
    return finish(result, _output(args, fmt))


def cmd_baseline(args, cfg: Config) -> int:
    from . import baseline as bl
    from .inventory import load
    bpath = _baseline_path(args, cfg)
    if bpath.is_dir():
        raise bl.BaselineError(f"baseline {bpath} is a directory, expected a JSON file")
    # before the run, so a long one never dies at its last step; never over the config or the inventory it reads
    check_output(bpath, [cfg.source, args.from_inventory], flag="--baseline")
    old = bl.load(bpath)
    if args.from_inventory:
        result = load(args.from_inventory)
        findings, problems = result.findings, result.problems
    else:
        args.no_runtime = False
        findings, _, problems, _ = collect(args, cfg, live=_live(args, "full"), select=cfg.select, ignore=cfg.ignore)
    if problems:
        # a baseline over a run that could not check everything would accept blind spots
        raise bl.BaselineError(f"not writing {_display(bpath, cfg)}: {problems[0]}"
                               + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    try:
        kept, added, dropped = bl.write(bpath, findings, old, args.reason)
    except OSError as e:
        raise OutputError(f"--baseline {bpath}: cannot write it ({e.strerror or e})") from None
    if not args.quiet:
        write_stdout(f"wrote {_display(bpath, cfg)}: {kept} kept, {added} added, {dropped} stale removed\n")
    return 0


def cmd_report(args) -> int:
    from .inventory import load
    result = load(args.inventory)
    if args.output is not None:
        # report reads no configuration, but -o must not land on the baseline: the configured one, and the one
        # the inventory was gated against (its path is relative to the configuration's root)
        try:
            cfg = load_config()
        except ConfigError:
            cfg = None
        root = cfg.root if cfg is not None else Path.cwd()
        gated = root / result.baseline if isinstance(result.baseline, str) and result.baseline else None
        _check_out(args, cfg, args.inventory, gated)
    return finish(result, _output(args, args.format or DEFAULT_FORMAT))


# ---------------------------------------------------------------------------------------------------- catalogue


_TOPICS = ("regions", "fan-out")      # `graphcheck explain regions`: documentation that belongs to no one rule


def _explain(code: str) -> int:
    from .rules import RULES
    if code.lower() in _TOPICS:
        from .regions import DOC
        write_stdout(DOC)
        return 0
    if code.upper() not in RULES:
        raise ConfigError(f"unknown rule {code!r}; run `graphcheck rules` for the list, or `graphcheck explain "
                          f"regions` for regions and fan-out")
    write_stdout(RULES[code.upper()].doc() + "\n")
    return 0


def _rules() -> int:
    from rich.console import Console
    from rich.table import Table
    from .rules import FAMILIES
    t = Table(title="graphcheck rules", show_lines=False)
    for col in ("code", "name", "family", "message"):
        t.add_column(col)
    for fam in FAMILIES:
        for r in fam.rules.values():
            t.add_row(r.code, r.name, fam.title, r.template)
    import io
    buf = io.StringIO()   # rendered first, written here: a closed pipe is then ours to handle (rich exits 1 on it)
    # a terminal's own width (160 wrapped into a mess in 80 columns); a pipe a fixed 160, the same on every machine
    tty = sys.stdout.isatty()
    Console(file=buf, width=shutil.get_terminal_size((160, 24)).columns if tty else 160, force_terminal=tty).print(t)
    write_stdout(buf.getvalue())
    return 0
