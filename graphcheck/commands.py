"""The commands that run targets: audit, capture, run (the gate), baseline, report."""
from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

from . import __version__
from .config import Config, ConfigError
from .findings import Finding, assign_fingerprints
from .io import write_atomic


def _targets(args, cfg: Config) -> list[str]:
    specs = [args.target] if getattr(args, "target", None) else cfg.targets
    if not specs:
        raise ConfigError("no target: pass module:factory, or set `targets` in [tool.graphcheck]")
    return specs


def _prepare(args, cfg: Config) -> None:
    from .runtime.attribution import set_root
    set_root(cfg.root)
    if str(cfg.root) not in sys.path:
        sys.path.insert(0, str(cfg.root))
    dev = getattr(args, "device", "auto")
    if dev and dev != "auto":
        os.environ["GRAPHCHECK_DEVICE"] = dev   # factories that pick a device honour it (dsv4_model.target does)
        if dev == "cuda":
            import torch
            if not torch.cuda.is_available():
                raise ConfigError("--device cuda: no CUDA device is available")


def _load(spec: str, cfg: Config):
    from .target import TargetError, load_target
    try:
        return load_target(spec, cfg.root)
    except TargetError as e:
        raise ConfigError(str(e)) from None


def _runtime(kind: str, spec: str, cfg: Config, args) -> list[Finding]:
    target = _load(spec, cfg)
    steps = getattr(args, "steps", None) or cfg.steps
    if kind == "sync":
        from .runtime.audit import audit
        return audit(target, steps=steps, warmup=cfg.warmup, strict=getattr(args, "strict", False))
    from .runtime.capture import capture_test
    return capture_test(target, steps=steps, warmup=cfg.warmup, device=getattr(args, "device", "auto"))


def _emit_runtime(findings: list[Finding], args, cfg: Config, title: str) -> int:
    from .report.render import emit, to_json
    findings = assign_fingerprints(findings)
    fmt = args.format or ("json" if cfg.format == "json" else "text")
    summary = f"{len(findings)} finding(s)" if findings else "[bold green]clean[/]"
    emit(findings, fmt, __version__, title=title if fmt == "text" else "", summary=summary if fmt == "text" else "")
    if args.output:
        write_atomic(args.output, to_json(findings, __version__))
    return 1 if any(f.severity == "error" for f in findings) else 0


def cmd_audit(args, cfg: Config) -> int:
    _prepare(args, cfg)
    found = [f for spec in _targets(args, cfg) for f in _runtime("sync", spec, cfg, args)]
    return _emit_runtime(found, args, cfg, "graphcheck audit")


def cmd_capture(args, cfg: Config) -> int:
    _prepare(args, cfg)
    found = [f for spec in _targets(args, cfg) for f in _runtime("capture", spec, cfg, args)]
    return _emit_runtime(found, args, cfg, "graphcheck capture")


def collect(args, cfg: Config, progress: bool = False) -> dict:
    """scan -> audit -> capture for the configured project; returns the inventory document."""
    from .inventory import build, merge
    from .static.scanner import scan
    from .static.scope import ScopeError
    _prepare(args, cfg)
    layers: dict = {}
    with _progress(progress) as step:
        t0 = time.perf_counter()
        with step("static scan"):
            try:
                res = scan([str(cfg.root / p) for p in cfg.paths], entry_points=cfg.entry_points, exclude=cfg.exclude,
                           select=cfg.select, ignore=cfg.ignore, root=cfg.root, cache=True)
            except (ScopeError, ValueError) as e:
                raise ConfigError(str(e)) from None
        layers["static"] = {"files": res.files, "functions_in_scope": res.in_scope_functions, "suppressed": res.suppressed,
                            "findings": len(res.findings)}
        runtime: list[Finding] = []
        timing = {"static": time.perf_counter() - t0}
        if not getattr(args, "no_runtime", False):
            for kind in ("sync", "capture"):
                t0 = time.perf_counter()
                got = []
                for spec in cfg.targets:
                    with step(f"{'audit' if kind == 'sync' else 'capture'} {spec}"):
                        got += _runtime(kind, spec, cfg, args)
                from .rules import select_codes
                codes = select_codes(cfg.select, cfg.ignore)
                got = [f for f in got if f.rule in codes]
                layers[kind] = {"targets": len(cfg.targets), "findings": len(got)}
                runtime += got
                timing[kind] = time.perf_counter() - t0
    rows = merge(list(res.findings), runtime)
    doc = build(rows, targets=cfg.targets, layers=layers)
    doc["_timing"] = timing          # for the summary line only; dropped before anything is written
    return doc


@contextlib.contextmanager
def _progress(enabled: bool):
    if not enabled:
        yield lambda name: contextlib.nullcontext()
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), transient=True, file=sys.stderr) as p:
        @contextlib.contextmanager
        def step(name: str):
            task = p.add_task(name, total=None)
            try:
                yield
            finally:
                p.remove_task(task)
        yield step


def _baseline_path(args, cfg: Config) -> Path:
    return Path(args.baseline) if getattr(args, "baseline", None) else cfg.baseline_path


def cmd_run(args, cfg: Config) -> int:
    from . import baseline as bl
    from .inventory import dumps
    from .report.render import emit
    from .report.sarif import to_sarif
    fmt = args.format or cfg.format
    bpath = _baseline_path(args, cfg)
    try:
        base = bl.load(bpath)
    except bl.BaselineError as e:
        raise ConfigError(str(e)) from None
    _refuse_overwrite(args.output, [bpath, cfg.source])
    doc = collect(args, cfg, progress=not args.no_progress and sys.stderr.isatty() and fmt == "text")
    timing = doc.pop("_timing")
    findings = [Finding.from_dict(d) for d in doc["findings"]]
    res = bl.gate(findings, base)
    new_fps = {f.fingerprint for f in res.new}
    for d in doc["findings"]:
        d["baselined"] = d["fingerprint"] not in new_fps and d["severity"] == "error"
    doc["gate"] = {**res.summary(), "baseline": _display(bpath, cfg), "stale_entries": res.stale}
    failed = res.failed(args.strict_baseline)
    if args.output:
        write_atomic(args.output, dumps(doc))
    if fmt == "json":
        sys.stdout.write(dumps(doc))
    elif fmt == "sarif":
        import json
        sys.stdout.write(json.dumps(to_sarif(res.new, __version__), indent=2) + "\n")
    elif fmt == "github":
        emit(res.new, "github", __version__)
        for e in res.stale:
            print(f"::warning title=graphcheck stale baseline::{e.get('rule')} {e.get('path')} ({e.get('function')}) is no longer found; "
                  "remove it with `graphcheck baseline`")
    else:
        _print_run(doc, res, timing, failed, args.strict_baseline)
    return 1 if failed else 0


def _display(p: Path, cfg: Config) -> str:
    try:
        return p.resolve().relative_to(cfg.root.resolve()).as_posix()
    except ValueError:
        return p.as_posix()


def _refuse_overwrite(out: Path | None, protected: list) -> None:
    if out is None:
        return
    for p in protected:
        if p is not None and Path(p).exists() and Path(out).resolve() == Path(p).resolve():
            raise ConfigError(f"-o {out}: refusing to overwrite an input file ({p}); choose another path")


def _print_run(doc: dict, res, timing: dict, failed: bool, strict: bool) -> None:
    from rich.console import Console
    from rich.table import Table
    from .report.render import print_text
    con = Console(file=sys.stdout, highlight=False, width=120 if not sys.stdout.isatty() else None)
    if res.new:
        print_text(res.new, sys.stdout, title=f"{len(res.new)} new finding(s) not in the baseline")
    if res.exempt:
        print_text(res.exempt, sys.stdout, title=f"{len(res.exempt)} reported exemption(s)")
    t = Table(title="graphcheck run", title_justify="left")
    for c in ("layer", "checked", "findings", "time"):
        t.add_column(c)
    lay = doc["layers"]
    st = lay.get("static", {})
    t.add_row("static", f"{st.get('files', 0)} files, {st.get('functions_in_scope') if st.get('functions_in_scope') is not None else 'all'} fns in scope",
              str(st.get("findings", 0)), f"{timing.get('static', 0):.1f}s")
    for kind in ("sync", "capture"):
        if kind in lay:
            t.add_row(kind, f"{lay[kind]['targets']} target(s)", str(lay[kind]["findings"]), f"{timing.get(kind, 0):.1f}s")
    con.print(t)
    linked = sum(1 for d in doc["findings"] if len(d["evidence"].get("kinds", [])) > 1)
    con.print(f"{len(doc['findings'])} inventory rows ({linked} predicted by the scan and seen at run time); "
              f"baseline {doc['gate']['baseline']}: {len(res.accepted)} accepted, {len(res.new)} new, {len(res.stale)} stale")
    for e in res.stale:
        con.print(f"  [yellow]stale[/] {e.get('rule')} {e.get('path')} {e.get('function')}: {e.get('source', '')}")
    if res.stale and not strict:
        con.print("  [dim]stale entries are fixed hazards: shrink the baseline with `graphcheck baseline`[/]")
    con.print("[bold red]FAILED[/]" if failed else "[bold green]PASSED[/]")


def cmd_baseline(args, cfg: Config) -> int:
    from . import baseline as bl
    from .inventory import InventoryError, load
    bpath = _baseline_path(args, cfg)
    try:
        old = bl.load(bpath)
        if args.from_inventory:
            _, findings = load(args.from_inventory)
        else:
            args.no_runtime = False
            doc = collect(args, cfg, progress=sys.stderr.isatty())
            findings = [Finding.from_dict(d) for d in doc["findings"]]
        kept, added, dropped = bl.write(bpath, findings, old, args.reason)
    except (bl.BaselineError, InventoryError) as e:
        raise ConfigError(str(e)) from None
    print(f"wrote {_display(bpath, cfg)}: {kept} kept, {added} added, {dropped} stale removed")
    return 0


def cmd_report(args, cfg: Config) -> int:
    from .inventory import InventoryError, load
    from .report import html
    from .report.render import emit
    try:
        doc, findings = load(args.inventory)
    except InventoryError as e:
        raise ConfigError(str(e)) from None
    _refuse_overwrite(args.output, [args.inventory])
    if args.format == "html":
        text = html.render(doc, findings)
    else:
        import io
        buf = io.StringIO()
        if args.format == "json":
            from .inventory import dumps
            buf.write(dumps(doc))
        else:
            emit(findings, args.format, __version__, out=buf, title=f"inventory {args.inventory}",
                 summary=f"{len(findings)} row(s)" if args.format == "text" else "")
        text = buf.getvalue()
    if args.output:
        write_atomic(args.output, text)
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return 0
