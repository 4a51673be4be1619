"""The `graphcheck` command line: argument parsing and the exit-code contract. The commands are in commands.py.

Exit codes: 0 clean (or --exit-zero), 1 findings (for `run`: new findings, or stale ones with --strict-baseline),
2 usage, configuration or input errors and anything that could not be checked, 130 interrupted (Ctrl-C),
141 the reader of the output went away (a closed pipe; nothing is printed).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import __version__
from .config import ConfigError
from .options import DEFAULT_FORMAT, FORMAT_ALIASES, FORMATS, STEPS
from .result import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_PIPE


def _positive(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, found {s!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, found {v}")
    return v


def _seconds(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds (0: no limit), found {s!r}") from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a non-negative number of seconds (0: no limit), found {s}")
    return v


def _file(s: str) -> Path:
    """A path to write a file at. Path() drops a trailing slash, so `-o out/` would replace a file named `out`."""
    if not s or s.endswith(("/", os.sep)) or os.path.basename(s) in (".", ".."):     # `out.json/.` is out.json too
        raise argparse.ArgumentTypeError(f"expected a file path, found {s!r}" + (" (it names a directory)" if s else ""))
    return Path(s)


def _output(p: argparse.ArgumentParser, default_help: str = f"{DEFAULT_FORMAT}, or [tool.graphcheck] format") -> None:
    g = p.add_argument_group("output")
    g.add_argument("--output-format", "--format", dest="format", choices=(*FORMATS, *FORMAT_ALIASES), metavar="FORMAT",
                   help=f"{'|'.join(FORMATS)} (default: {default_help}); concise is `path:line:col: CODE message`")
    g.add_argument("-o", "--output-file", "--output", dest="output", type=_file, metavar="FILE",
                   help="write the output here instead of stdout (atomically; never over a source, config, baseline "
                        "or checkpoint file)")
    g.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings (errors still exit 2)")
    g.add_argument("--statistics", action="store_true", help="count the reported findings per rule instead of listing them")
    g.add_argument("-q", "--quiet", action="store_true", help="findings only: no summary, no live progress")
    g.add_argument("--show-all-regions", action="store_true",
                   help="list the rows outside the gated regions too (allowed, one-time, eager-only); by default "
                        "they are only counted (`graphcheck explain regions`)")


def _config_opt(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, metavar="FILE",
                   help="a TOML file with a [tool.graphcheck] table (default: the nearest pyproject.toml that has one)")


def _runtime_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="capture on CUDA or the CPU emulation")
    p.add_argument("--no-progress", action="store_true", help="no live display (it only ever goes to a terminal's stderr)")
    p.add_argument("--nproc", type=_positive, default=1, metavar="N",
                   help="run each target on N ranks of one process group (NCCL on CUDA, gloo on CPU) and merge their verdicts")
    p.add_argument("--step-timeout", type=_seconds, metavar="SECONDS",
                   help="a call of a target's step (or make_inputs, state) running longer is a GC006 row, exit 2 "
                        "(default: [tool.graphcheck] step-timeout, 600; 0: no limit)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="graphcheck", description="CUDA-graph conformance and sync auditing for PyTorch")
    ap.add_argument("--version", action="version", version=f"graphcheck {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    p = sub.add_parser("scan", help="static rules over the captured region (needs no torch)")
    p.add_argument("paths", nargs="*", help="files or directories (default: [tool.graphcheck] paths); `-` reads stdin")
    p.add_argument("--stdin-filename", metavar="PATH", help="the path the source read from stdin is reported under")
    p.add_argument("--select", help="comma-separated codes or prefixes to report")
    p.add_argument("--ignore", help="comma-separated codes or prefixes to skip")
    p.add_argument("--entry-point", action="append", default=None, metavar="MOD:QUAL", help="capture entry point (repeatable)")
    p.add_argument("--all-functions", action="store_true", help="ignore configured entry points: scan every function")
    p.add_argument("--show-scope", action="store_true",
                   help="list the functions in the captured region, the calls that could not be resolved and the "
                        "implementations of each fan-out call (on stderr)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the per-file cache")
    p.add_argument("--jobs", type=_positive, help="worker processes (default: all cores)")
    p.add_argument("--force-exclude", action="store_true",
                   help="apply [tool.graphcheck] exclude to paths named on the command line too (as ruff's; what the "
                        "pre-commit hook passes)")
    p.add_argument("--baseline", type=_file, help="accept the rows in this baseline (default: [tool.graphcheck] baseline, "
                                                  "when it exists)")
    p.add_argument("--no-baseline", action="store_true", help="report every row, whatever the baseline accepts")
    _config_opt(p)
    _output(p)

    for name, help_ in (("audit", "run a target's step and inventory every sync it performs"),
                        ("capture", "capture-under-test: capture, replay on fresh inputs, compare with eager")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("target", nargs="?", help="module:factory returning a graphcheck.Target (default: configured targets)")
        p.add_argument("--steps", type=_positive, help=f"steps to check after warm-up (default {STEPS}, or [tool.graphcheck] steps)")
        if name == "audit":
            p.add_argument("--strict", action="store_true", help="CUDA layer in 'error' mode: stop at the first sync")
        _runtime_opts(p)
        _config_opt(p)
        _output(p)

    p = sub.add_parser("run", help="scan + audit + capture, then the baseline gate")
    p.add_argument("--baseline", type=_file, help="baseline file (default: [tool.graphcheck] baseline)")
    p.add_argument("--strict-baseline", action="store_true", help="fail on stale baseline entries too")
    p.add_argument("--no-runtime", action="store_true", help="static layer only (needs no torch)")
    p.add_argument("--select", help="comma-separated codes or prefixes to report")
    p.add_argument("--ignore", help="comma-separated codes or prefixes to skip")
    _runtime_opts(p)
    _config_opt(p)
    _output(p)

    p = sub.add_parser("baseline", help="accept the current findings into the baseline (written atomically)")
    p.add_argument("--reason", help="reason recorded for new entries (existing reasons are kept)")
    p.add_argument("--baseline", type=_file)
    p.add_argument("--from", dest="from_inventory", type=Path, help="take findings from a saved JSON inventory instead of running")
    p.add_argument("-q", "--quiet", action="store_true")
    _runtime_opts(p)
    _config_opt(p)

    p = sub.add_parser("report", help="render a saved JSON inventory (same verdict as the run that wrote it)")
    p.add_argument("inventory", type=Path)
    _output(p, DEFAULT_FORMAT)

    sub.add_parser("rules", help="list the rules")
    p = sub.add_parser("explain", help="print a rule's documentation, or a topic's: `regions` (also fan-out)")
    p.add_argument("code")
    return ap


def entry() -> None:
    """The console script and `python -m graphcheck`: main's exit code, and then the process ends at once. torch can
    leave a native thread running that aborts the interpreter's teardown (SIGABRT, "terminate called without an
    active exception", seen after `audit` of a target and after a SIGINT during its step, about one run in three on
    torch 2.13 CPU) and would turn a verdict into exit -6; by then every output is written (atomically) and flushed
    here, so skipping the teardown loses nothing."""
    rc = main()
    import logging
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):     # a reader gone after main returned (EXIT_PIPE's case): nothing to keep
            pass
    os._exit(rc)


def main(argv: list[str] | None = None) -> int:
    from .baseline import BaselineError
    from .inventory import InventoryError
    from .io import OutputError
    from .target import TargetError
    try:
        args = build_parser().parse_args(argv)
        from . import commands
        return commands.dispatch(args)
    except (ConfigError, OutputError, BaselineError, InventoryError, TargetError) as e:
        print(f"graphcheck: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        # outputs are written atomically, so nothing half-written is left behind
        print("graphcheck: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader closed the pipe (`graphcheck explain GC101 | head`): stop quietly; point stdout at
        # /dev/null so the interpreter's final flush does not raise again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_PIPE
