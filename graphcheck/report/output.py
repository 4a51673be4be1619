"""Where a rendered Result goes: -o FILE (atomically) or stdout, what could not be checked named on stderr, and
the exit code. The CLI's commands and the torchrun entry point (runtime/distributed.py) both end here; it lives
below both of them so neither imports the other."""
from __future__ import annotations

import os
import sys

from ..io import OutputError, write_atomic
from ..result import Result
from .render import render
from .summary import summary_line


def finish(result: Result, args, fmt: str) -> int:
    """Render, write to -o or stdout, name on stderr what could not be checked, return the exit code."""
    to_file = args.output is not None and str(args.output) != "-"      # `-o -` is stdout
    color = not to_file and fmt in ("full", "text") and sys.stdout.isatty() and "NO_COLOR" not in os.environ
    text = render(result, fmt, statistics=args.statistics, quiet=args.quiet, color=color)
    if to_file:
        try:
            write_atomic(args.output, text)
        except OSError as e:
            raise OutputError(f"-o {args.output}: cannot write it ({e.strerror or e})") from None
        if not args.quiet:
            print(f"wrote {args.output}: {summary_line(result)}")
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    for p in result.problems:
        print(f"graphcheck: error: {p}", file=sys.stderr)
    return result.exit_code(args.exit_zero)
