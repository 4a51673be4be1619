"""The `graphcheck` command line. Exit codes: 0 clean, 1 findings (or new findings for `run`), 2 usage errors."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import __version__
from .config import FORMATS, Config, ConfigError, load_config


def _codes(s: str | None) -> list[str]:
    return [c.strip() for c in s.split(",") if c.strip()] if s else []


def _common(p: argparse.ArgumentParser, formats=FORMATS) -> None:
    p.add_argument("--format", choices=formats, help="output format (default: text, or [tool.graphcheck] format)")
    p.add_argument("--config", type=Path, help="pyproject.toml to read instead of the nearest one")
    p.add_argument("-o", "--output", type=Path, help="also write the JSON result to this file")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="graphcheck", description="CUDA-graph conformance and sync auditing for PyTorch")
    ap.add_argument("--version", action="version", version=f"graphcheck {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    p = sub.add_parser("scan", help="static rules over the captured region")
    p.add_argument("paths", nargs="*", help="files or directories (default: [tool.graphcheck] paths)")
    p.add_argument("--select", help="comma-separated codes or prefixes to report")
    p.add_argument("--ignore", help="comma-separated codes or prefixes to skip")
    p.add_argument("--entry-point", action="append", default=None, metavar="MOD:QUAL", help="capture entry point (repeatable)")
    p.add_argument("--all-functions", action="store_true", help="ignore configured entry points: scan every function")
    p.add_argument("--show-scope", action="store_true", help="list the functions in the captured region and the calls that could not be resolved")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the per-file cache")
    p.add_argument("--jobs", type=int, help="worker processes (default: all cores)")
    _common(p)

    for name, help_ in (("audit", "run a target's step and inventory every sync it performs"),
                        ("capture", "capture-under-test: capture, replay on fresh inputs, compare with eager")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("target", nargs="?", help="module:factory returning a graphcheck.Target (default: configured targets)")
        p.add_argument("--steps", type=int, help="steps to check after warm-up (default 3)")
        p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
        if name == "audit":
            p.add_argument("--strict", action="store_true", help="CUDA layer in 'error' mode: stop at the first sync")
        _common(p, ("text", "json"))

    p = sub.add_parser("run", help="scan + audit + capture, then the baseline gate")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="capture on CUDA or the CPU emulation")
    p.add_argument("--baseline", type=Path, help="baseline file (default: [tool.graphcheck] baseline)")
    p.add_argument("--strict-baseline", action="store_true", help="fail on stale baseline entries too")
    p.add_argument("--no-runtime", action="store_true", help="static layer only")
    p.add_argument("--no-progress", action="store_true")
    _common(p)

    p = sub.add_parser("baseline", help="accept the current findings into the baseline (written atomically)")
    p.add_argument("--reason", help="reason recorded for new entries (existing reasons are kept)")
    p.add_argument("--baseline", type=Path)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--config", type=Path)
    p.add_argument("--from", dest="from_inventory", type=Path, help="take findings from a saved inventory instead of running")

    p = sub.add_parser("report", help="render a saved inventory")
    p.add_argument("inventory", type=Path)
    p.add_argument("--format", choices=("text", "html", "json", "sarif", "github"), default="text")
    p.add_argument("-o", "--output", type=Path, help="write here (never over the input)")

    sub.add_parser("rules", help="list the rules")
    p = sub.add_parser("explain", help="print a rule's documentation")
    p.add_argument("code")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args)
    except ConfigError as e:
        print(f"graphcheck: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _config(args) -> Config:
    return load_config(explicit=getattr(args, "config", None))


def _dispatch(args) -> int:
    if args.cmd == "rules":
        return _rules()
    if args.cmd == "explain":
        from .rules import RULES
        code = args.code.upper()
        if code not in RULES:
            raise ConfigError(f"unknown rule {args.code!r}; run `graphcheck rules` for the list")
        print(RULES[code].doc())
        return 0
    if args.cmd == "scan":
        return _scan(args)
    from . import commands
    return getattr(commands, f"cmd_{args.cmd}")(args, _config(args))


def _rules() -> int:
    from rich.console import Console
    from rich.table import Table
    from .rules import FAMILIES
    t = Table(title="graphcheck rules", show_lines=False)
    for col in ("code", "name", "family", "message"):
        t.add_column(col)
    for fam in FAMILIES:
        for r in fam.rules.values():
            t.add_row(r.code, r.name, fam.title, r.message.replace("{", "").replace("}", ""))
    Console(width=160 if not sys.stdout.isatty() else None).print(t)
    return 0


def _scan(args) -> int:
    from .findings import assign_fingerprints
    from .report.render import emit, to_json
    from .static.scanner import scan
    from .static.scope import ScopeError
    cfg = _config(args)
    paths = args.paths or [str(cfg.root / p) for p in cfg.paths]
    entry = [] if args.all_functions else (args.entry_point if args.entry_point is not None else cfg.entry_points)
    try:
        res = scan(paths, entry_points=entry, exclude=cfg.exclude, select=_codes(args.select) or cfg.select,
                   ignore=_codes(args.ignore) or cfg.ignore, root=cfg.root, cache=not args.no_cache, jobs=args.jobs)
    except (ScopeError, ValueError) as e:
        raise ConfigError(str(e)) from None
    findings = assign_fingerprints(res.findings)
    fmt = args.format or cfg.format
    scope = f", {res.scope_line()}" if res.scope_line() else ""
    # a scope with unresolved calls or gaps is never reported "clean": the scan did not see all of it
    clean = "[bold green]clean[/]" if not (res.unresolved or res.warnings) else "no findings in the part it could resolve"
    summary = (f"{len(findings)} finding(s) in {res.files} file(s){scope}; {res.suppressed} suppressed"
               if findings else f"{clean}: {res.files} file(s){scope}; {res.suppressed} suppressed")
    summary += "".join(f"\nwarning: {w}" for w in res.warnings)
    if args.show_scope:
        print(res.scope_report(), file=sys.stderr)
    emit(findings, fmt, __version__, summary=summary if fmt == "text" else "")
    if args.output:
        from .io import write_atomic
        write_atomic(args.output, to_json(findings, __version__))
    return 1 if findings else 0
