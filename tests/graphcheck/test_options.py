"""One table of output formats and one set of defaults (graphcheck/options.py): the command line, the
configuration, the renderer, the runtime layers and the torchrun entry point all take theirs from it."""
import ast
import inspect
import textwrap

import pytest

from graphcheck import options
from graphcheck.cli import build_parser
from graphcheck.options import FORMAT_ALIASES, FORMATS, Output
from graphcheck.result import classify


def _choices(parser, dest):
    sub = next(a for a in parser._actions if a.dest == "cmd")
    return {name: next((a.choices for a in p._actions if a.dest == dest), None) for name, p in sub.choices.items()}


def test_every_format_the_cli_offers_renders(tmp_path, capsys):
    """Each name the CLI accepts (formats and aliases) renders through the one `finish`, to stdout and to -o."""
    from graphcheck.report.output import finish
    offered = {n: set(c) for n, c in _choices(build_parser(), "format").items() if c}
    assert offered and all(c == set(FORMATS) | set(FORMAT_ALIASES) for c in offered.values()), offered
    result = classify("scan", [], None, layers={"static": {"files": 1, "findings": 0}})
    for fmt in (*FORMATS, *FORMAT_ALIASES):
        assert finish(result, Output(format=fmt)) == 0
        assert finish(result, Output(format=fmt, file=tmp_path / f"out.{fmt}", quiet=True)) == 0
        assert (tmp_path / f"out.{fmt}").exists()
    capsys.readouterr()
    with pytest.raises(ValueError, match="unknown output format 'xml'; expected one of concise, full"):
        finish(result, Output(format="xml"))


def test_the_runtime_defaults_are_the_options_defaults():
    """audit, capture, the emulation, the pytest fixture, run_ranks and the configuration default to the same
    steps, warm-up and device (there were ten literal `steps=3` defaults)."""
    from graphcheck.config import Config
    from graphcheck.pytest_plugin import GraphcheckFixture
    from graphcheck.runtime.audit import audit
    from graphcheck.runtime.capture import capture_test
    from graphcheck.runtime.distributed import run_ranks
    from graphcheck.runtime.emulate import emulate
    for fn in (audit, capture_test, emulate, run_ranks, GraphcheckFixture.audit, GraphcheckFixture.capture):
        # the default is the name from options, not a literal that happens to equal it today
        node = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
        args = node.args.args + node.args.kwonlyargs
        defaults = dict(zip([a.arg for a in node.args.args][-len(node.args.defaults):], node.args.defaults))
        defaults.update({a.arg: d for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults) if d is not None})
        want = {"steps": "STEPS", "warmup": "WARMUP", "device": "DEVICE"}
        got = {a.arg: ast.unparse(defaults[a.arg]) for a in args if a.arg in want}
        assert got == {k: v for k, v in want.items() if k in got} and {"steps", "warmup"} <= set(got), (fn, got)
    assert (Config().steps, Config().warmup, Config().format) == (options.STEPS, options.WARMUP, options.DEFAULT_FORMAT)
