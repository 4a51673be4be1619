"""Where a rendered Result goes: -o FILE (atomically) or stdout, what could not be checked named on stderr, and
the exit code. The CLI's commands and the torchrun entry point (runtime/distributed.py) both end here; it lives
below both of them so neither imports the other."""
from __future__ import annotations

import os
import sys

from ..io import OutputError, write_atomic, write_stdout
from ..options import Output
from ..result import Result
from .render import render
from .summary import summary_line


def finish(result: Result, out: Output) -> int:
    """Render, write to -o or stdout, name on stderr what could not be checked, return the exit code."""
    to_file = out.file is not None and str(out.file) != "-"      # `-o -` is stdout
    color = not to_file and out.format in ("full", "text") and sys.stdout.isatty() and "NO_COLOR" not in os.environ
    text = render(result, out.format, statistics=out.statistics, quiet=out.quiet, color=color,
                  all_regions=out.all_regions)
    if to_file:
        try:
            write_atomic(out.file, text)
        except OSError as e:
            raise OutputError(f"-o {out.file}: cannot write it ({e.strerror or e})") from None
        if not out.quiet:
            write_stdout(f"wrote {out.file}: {summary_line(result)}\n")
    else:
        write_stdout(text)
    if out.format not in ("full", "text"):     # the full format prints them itself; the others carry no such line
        for w in (result.layers.get("static") or {}).get("scope_warnings", []):
            print(f"graphcheck: warning: {w}", file=sys.stderr)
    for p in result.problems:
        print(f"graphcheck: error: {p}", file=sys.stderr)
    return result.exit_code(out.exit_zero)
