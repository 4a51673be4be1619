"""Every row of the README's bad-input table, one test each: the input, the one line it prints, the exit code.
A last test checks that the README's table and this list are the same rows."""
import copy
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import PROJECT, ROOT, STEP, graphcheck_env, run_graphcheck as gc


def _targets(p: Path, body: str, spec: str = "demo.bad:make"):
    (p / "demo" / "bad.py").write_text(body)
    (p / "pyproject.toml").write_text(PROJECT.replace('targets = ["demo.step:make"]', f'targets = ["{spec}"]'))


def _inventory(p: Path, line, **top):
    doc = json.loads(gc(p, "run", "--no-runtime", "--output-format", "json").stdout)
    if line is not None:
        doc["findings"][0]["line"] = line
    doc.update(top)
    (p / "inv.json").write_text(json.dumps(doc))


def _checkpoint(p: Path):
    (p / "ckpt").mkdir()
    (p / "ckpt" / "model.safetensors").write_bytes(b"\0" * 8)
    (p / "ckpt" / "config.json").write_text("{}")


RAISING_STEP = STEP.replace("        self.pos += 1", "        raise RuntimeError('cache not allocated')")


def _step_does(body: str):
    """The demo step with its `self.pos += 1` replaced by `body` (one line of the step's indentation)."""
    return lambda p: (p / "demo" / "step.py").write_text(STEP.replace("        self.pos += 1", "        " + body))

# (README input, setup, args, exit code, the message fragment the README row quotes)
CASES = {
    "out-source": ("`-o` a Python source", None, ("scan", "-o", "demo/step.py"), 2, "refusing to write a .py file"),
    "out-config": ("`-o pyproject.toml`", None, ("scan", "-o", "pyproject.toml"), 2, "refusing to overwrite an input"),
    "out-baseline": ("`run -o` the baseline", lambda p: (p / "graphcheck-baseline.json").write_text('{"version": 1, "entries": []}'),
                     ("run", "--no-runtime", "-o", "graphcheck-baseline.json"), 2, "refusing to overwrite an input"),
    "out-checkpoint": ("`-o` a file in a checkpoint directory", _checkpoint, ("scan", "-o", "ckpt/config.json"), 2,
                       "refusing to overwrite a file in a checkpoint directory"),
    "out-trailing-slash": ("`-o` a name ending in `/` or `/.` (`--baseline` too)", lambda p: (p / "inv.json").write_text("{}"),
                           ("scan", "-o", "inv.json/"), 2, "expected a file path, found 'inv.json/' (it names a directory)"),
    "out-dir": ("`-o` a directory (`report -o <dir>` too)", None, ("scan", "-o", "demo"), 2, "is a directory, expected a file path"),
    "out-unwritable": ("`-o` under a path that is not a directory", None, ("scan", "-o", "pyproject.toml/x.json"), 2,
                       "is not a writable directory"),
    "out-write-fails": ("`-o` a file the system refuses", None, ("scan", "-o", "/proc/graphcheck.json"), 2, "cannot write it"),
    "target-raises": ("a target factory that raises", lambda p: _targets(p, "def make():\n    raise OSError('no weights')\n"),
                      ("audit",), 2, "the factory raised OSError: no weights"),
    "target-not-factory": ("`os.path:join` as a target", None, ("audit", "os.path:join"), 2, "must be callable without arguments"),
    "target-needs-args": ("a factory that needs arguments", lambda p: _targets(p, "def make(device):\n    pass\n"),
                          ("capture",), 2, "must be callable without arguments"),
    "target-missing": ("a target attribute that does not exist", None, ("audit", "demo.step:missing"), 2, "has no attribute 'missing'"),
    "target-import": ("a target module that fails to import", lambda p: _targets(p, "import no_such_module\n"),
                      ("audit",), 2, "cannot import module 'demo.bad'"),
    "step-raises": ("a target whose step always raises (GC006)", lambda p: (p / "demo" / "step.py").write_text(RAISING_STEP),
                    ("run",), 2, "could not check demo/step.py:"),
    "baseline-unchecked": ("`baseline` over a step that raises", lambda p: (p / "demo" / "step.py").write_text(RAISING_STEP),
                           ("baseline", "--reason", "x"), 2, "cannot baseline what was not checked: GC006 demo/step.py:13"),
    "empty-dir": ("`run` in a directory with no Python file", lambda p: [shutil.rmtree(p / "demo"), (p / "pyproject.toml").unlink()],
                  ("run",), 2, "no Python file to check under ."),
    "baseline-dir": ("a baseline path that is a directory", lambda p: (p / "graphcheck-baseline.json").mkdir(),
                     ("run", "--no-runtime"), 2, "is a directory, expected a JSON file"),
    "baseline-corrupt": ("a baseline that is not JSON", lambda p: (p / "graphcheck-baseline.json").write_text("{nope"),
                         ("run", "--no-runtime"), 2, "corrupt baseline"),
    "report-dir": ("`report <dir>`", None, ("report", "demo"), 2, "is a directory, expected an inventory JSON file"),
    "report-not-json": ("`report pyproject.toml`", None, ("report", "pyproject.toml"), 2, "not valid JSON"),
    "report-bad-line": ("an inventory with a non-integer `line`", lambda p: _inventory(p, "14"),
                        ("report", "inv.json"), 2, "'line' must be a non-negative integer, found '14'"),
    "steps-negative": ("`audit --steps -1`", None, ("audit", "--steps", "-1"), 2, "expected a positive integer, found -1"),
    "config-no-table": ("`--config` a file without [tool.graphcheck]", lambda p: (p / "other.toml").write_text("[tool.x]\n"),
                        ("scan", "--config", "other.toml"), 2, "no [tool.graphcheck] table"),
    "config-unknown-key": ("an unknown key in [tool.graphcheck]",
                           lambda p: (p / "pyproject.toml").write_text("[tool.graphcheck]\nentry_point = []\n"),
                           ("scan",), 2, "unknown key 'entry_point'"),
    "select-empty-code": ("an empty code in `select`", lambda p: (p / "pyproject.toml").write_text(PROJECT + 'select = [""]\n'),
                          ("scan",), 2, "pyproject.toml: [tool.graphcheck] empty rule code in select; expected a code or prefix"),
    "fan-out-negative": ("`fan-out-limit = -1`", lambda p: (p / "pyproject.toml").write_text(PROJECT + "fan-out-limit = -1\n"),
                         ("scan",), 2, "pyproject.toml: [tool.graphcheck] fan-out-limit must be a non-negative integer, found -1"),
    "eager-only-nothing": ("an `eager-only` entry that names nothing scanned",
                           lambda p: (p / "pyproject.toml").write_text(PROJECT + 'eager-only = ["demo.nope"]\n'),
                           ("run", "--no-runtime"), 2,
                           "[tool.graphcheck] eager-only 'demo.nope': module 'demo.nope' is not among the scanned files"),
    "select-unknown": ("`--select GC999`", None, ("scan", "--select", "GC999"), 2, "GC999"),
    "stdin-mixed": ("`scan - other.py`", None, ("scan", "-", "demo"), 2, "cannot be combined with other paths"),
    "out-scanned-file": ("`scan F -o F`, whatever F is named", lambda p: shutil.copy(p / "demo" / "step.py", p / "step.txt"),
                         ("scan", "step.txt", "-o", "step.txt"), 2, "refusing to overwrite an input (step.txt)"),
    "scan-missing": ("`scan` a path that does not exist", None, ("scan", "nope/x.py"), 2,
                     "path nope/x.py: no such file or directory"),
    "config-path-missing": ("a configured path that does not exist",
                            lambda p: (p / "pyproject.toml").write_text(PROJECT.replace('paths = ["demo"]', 'paths = ["demo", "nope"]')),
                            ("run", "--no-runtime"), 2, "paths in "),
    "target-exits": ("a target factory that calls `sys.exit(3)`",
                     lambda p: _targets(p, "import sys\n\ndef make():\n    sys.exit(3)\n"),
                     ("audit",), 2, "the factory raised SystemExit: 3"),
    "target-empty": ("`audit ''`", None, ("audit", ""), 2, "target '': expected module:factory"),
    "baseline-list": ("a baseline that is a JSON list", lambda p: (p / "graphcheck-baseline.json").write_text("[]"),
                      ("run", "--no-runtime"), 2, "found a JSON list"),
    "out-baseline-not-yet": ("`-o` the configured baseline before it exists", None,
                             ("scan", "-o", "graphcheck-baseline.json"), 2, "refusing to overwrite an input"),
    "report-out-baseline": ("`report -o` the baseline",
                            lambda p: [_inventory(p, None), (p / "graphcheck-baseline.json").write_text('{"version": 1, "entries": []}')],
                            ("report", "inv.json", "-o", "graphcheck-baseline.json"), 2, "refusing to overwrite an input"),
    "baseline-over-source": ("`baseline --baseline` a source or config file", None,
                             ("baseline", "--reason", "x", "--baseline", "demo/step.py"), 2,
                             "--baseline demo/step.py: refusing to write a .py file"),
    "baseline-unwritable": ("`baseline --baseline` under a path that is not a directory", None,
                            ("baseline", "--reason", "x", "--baseline", "pyproject.toml/b.json"), 2,
                            "--baseline pyproject.toml/b.json: cannot write there"),
    "report-bad-targets": ("an inventory whose `targets` is not a list", lambda p: _inventory(p, None, targets=None),
                           ("report", "inv.json"), 2, "'targets' must be a list of strings, found None"),
    "baseline-duplicate": ("a baseline with one fingerprint twice",
                           lambda p: (p / "graphcheck-baseline.json").write_text(json.dumps({"version": 1, "entries": [
                               {"fingerprint": "f" * 20, "rule": "GC104", "path": "demo/step.py", "reason": r} for r in "ab"]})),
                           ("run", "--no-runtime"), 2, "entries[1] repeats the fingerprint ffffffffffffffffffff of entries[0] "
                                                      "(GC104 demo/step.py); expected each fingerprint once"),
    "source-too-large": ("a 50 MB Python file", lambda p: (p / "demo" / "big.py").write_text("x = [" + "1, " * 17_000_000 + "]\n"),
                         ("scan",), 2, "could not check demo/big.py: GC904 file could not be read: 51.0 MB, over the 5 MB limit"),
    # the target's own code cannot choose graphcheck's exit code, pose as Ctrl-C, or hang the gate (issue 40)
    "step-exit-0": ("a step that calls `sys.exit(0)`", _step_does("import sys; sys.exit(0)"), ("run",), 2,
                    "the target's step raised SystemExit(0) (sys.exit in the target"),
    "step-exit-4": ("a step that raises `SystemExit(4)`", _step_does("raise SystemExit(4)"), ("audit",), 2,
                    "the target's step raised SystemExit(4)"),
    "step-exit-baseline": ("`baseline` over a step that calls `sys.exit(0)`", _step_does("import sys; sys.exit(0)"),
                           ("baseline", "--reason", "x"), 2, "cannot baseline what was not checked: GC006"),
    "inputs-exit": ("a `make_inputs` that calls `sys.exit(0)`",
                    lambda p: (p / "demo" / "step.py").write_text(STEP.replace("lambda k: torch.full", "lambda k: exit(0) or torch.full")),
                    ("capture",), 2, "the target's make_inputs raised SystemExit(0)"),
    "step-keyboard-interrupt": ("a step that raises KeyboardInterrupt itself", _step_does("raise KeyboardInterrupt"),
                                ("audit",), 2, "raised KeyboardInterrupt itself (no Ctrl-C was pressed)"),
    "step-timeout": ("a step that runs past `--step-timeout` (default 600 s; `step-timeout` in [tool.graphcheck])",
                     _step_does("import time; time.sleep(60)"), ("run", "--step-timeout", "1"), 2,
                     "the target's step ran past the step timeout of 1 s"),
    "step-timeout-bad": ("`--step-timeout -1`", None, ("run", "--step-timeout", "-1"), 2,
                         "argument --step-timeout: expected a non-negative number of seconds (0: no limit), found -1"),
    "config-step-timeout-bad": ("`step-timeout = \"10s\"` in [tool.graphcheck]",
                                lambda p: (p / "pyproject.toml").write_text(PROJECT + 'step-timeout = "10s"\n'),
                                ("audit",), 2, "[tool.graphcheck] step-timeout must be a non-negative number of seconds"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_and_its_exit_code(project, case):
    _, setup, args, code, fragment = CASES[case]
    if setup:
        setup(project)
    before = {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}
    r = gc(project, *args)
    assert r.returncode == code, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and fragment in r.stderr, r.stderr
    lines = r.stderr.splitlines()
    if "usage:" in r.stderr:        # argparse: usage, then the one error line
        assert lines[-1].startswith("graphcheck ") and fragment in lines[-1]
    elif case in ("step-raises", "step-exit-0", "step-timeout"):     # one line per layer that could not run the step
        assert 1 <= len(lines) <= 2 and all(ln.startswith("graphcheck: error: could not check") for ln in lines)
    else:
        assert len(lines) == 1 and lines[0].startswith("graphcheck: error: "), r.stderr
    assert {p: p.read_bytes() for p in before if p.exists()} == before      # no input touched


# README rows whose behaviour is not "one line, exit 2"; each is tested where named
ELSEWHERE = {
    "Ctrl-C during any command": "test_cli.py::test_ctrl_c_leaves_no_partial_file_and_exits_130, ::test_interrupt_signal_during_a_run",
    "a closed pipe (`graphcheck explain GC101 | head`)": "test_cli.py::test_a_closed_pipe_exits_quietly",
    "a stale baseline entry whose source contains `[/INST]`": "test_cli.py::test_report_agrees_with_run_in_every_format[full]",
    "a nested `pyproject.toml` without [tool.graphcheck]": "test_cli.py::test_config_is_the_nearest_pyproject_with_a_graphcheck_table",
    "`audit`/`capture`/`run` without torch installed": "test_cli.py::test_scan_imports_no_torch",
    "an unreadable package directory": "test_badinput.py::test_unreadable_directory_is_not_a_pass",
    "`scan > /dev/full` (a stdout that refuses)": "test_workflow.py::test_a_stdout_that_refuses_is_one_line",
    "a 50 MB source on stdin (`scan -`)": "test_workflow.py::test_a_huge_stdin_is_refused_in_bounded_memory",
    'a comment-only edit to a file whose hazard the baseline accepts (`scan F`, the pre-commit hook)':
        'test_workflow.py::test_scan_accepts_what_the_baseline_accepts, test_gate.py::test_hook_from_a_tag_honours_the_baseline_exclude_and_ruff',
    'a file under an `exclude`d directory that pre-commit names (`scan --force-exclude F`)':
        'test_workflow.py::test_force_exclude_applies_exclude_to_named_files',
    '`scan helper.py` (or `scan -`) where no entry point reaches the file':
        'test_workflow.py::test_a_named_file_no_entry_point_reaches_is_not_all_checks_passed',
    '`run --no-runtime --strict-baseline` with runtime rows in the baseline':
        'test_workflow.py::test_no_runtime_leaves_runtime_rows_unexamined_not_stale',
    '`# noqa: E501, GC101 -- why`, `# noqa: GC101, E501 -- why`, `# NOQA: GC101 -- why`':
        'test_scan.py::test_noqa_as_ruff_reads_it, test_gate.py::test_hook_from_a_tag_honours_the_baseline_exclude_and_ruff',
    'a command that could not check everything and found nothing else':
        'test_workflow.py::test_not_checked_is_never_all_checks_passed',
    "a real SIGINT while the step runs": "test_cli.py::test_interrupt_signal_during_a_run",
    "a step stuck in native code past the timeout": "test_runtime.py::test_a_step_stuck_in_native_code_is_ended_with_one_line",
}


def test_readme_table_is_these_rows():
    text = (ROOT / "README.md").read_text()
    start = text.index("| input | message | exit |")
    rows = [r for r in text[start:].split("\n\n", 1)[0].splitlines()[2:]]
    inputs = [r.split(" | ", 1)[0].removeprefix("| ").replace("\\|", "|") for r in rows]
    assert sorted(inputs) == sorted([c[0] for c in CASES.values()] + list(ELSEWHERE))
    for inp, _, _, code, fragment in CASES.values():
        row = rows[inputs.index(inp)]
        assert fragment in row and row.rstrip(" |").endswith(f" {code}"), row


def test_unreadable_directory_is_not_a_pass(project, monkeypatch, capsys):
    """As root every directory is readable, so the refusal is simulated where os.walk lists it."""
    from graphcheck.cli import main
    sub = project / "demo" / "private"
    sub.mkdir()
    (sub / "hidden.py").write_text("import torch\ndef f(x: torch.Tensor):\n    return x.item()\n")
    real = os.scandir

    def scandir(path="."):
        if Path(path).resolve() == sub:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)
    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.chdir(project)
    rc = main(["scan", "demo", "--all-functions", "--no-cache", "--jobs", "1", "--output-format", "concise"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("graphcheck: error: could not check demo/private: GC904") and err.count("\n") == 1


@pytest.mark.parametrize("toml", ['tool = "graphcheck"\n', 'tool = ["graphcheck"]\n', '[tool]\nsetuptools = 3\n',
                                  '[tool.setuptools]\npackage-dir = 3\n'])
def test_a_tool_key_of_another_type_is_no_table_not_a_crash(project, toml):
    """`"graphcheck" in data["tool"]` is a substring test on a string: the table was then indexed like a dict."""
    (project / "other.toml").write_text(toml)
    r = gc(project, "scan", "--config", "other.toml")
    assert r.returncode == 2 and r.stderr == "graphcheck: error: other.toml: no [tool.graphcheck] table\n", r.stderr
    (project / "pyproject.toml").write_text(toml)             # discovered: passed over, the defaults apply
    r = gc(project, "scan", "demo", "--all-functions", "--output-format", "concise")
    assert r.returncode == 1 and "Traceback" not in r.stderr and r.stdout.startswith("demo/step.py:14:13: GC104"), r.stderr


def test_a_symlink_loop_given_as_the_path_is_reported_not_a_crash(project):
    (project / "demo" / "a.py").symlink_to("b.py")
    (project / "demo" / "b.py").symlink_to("a.py")
    r = gc(project, "scan", "demo/a.py", "--output-format", "concise")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "could not check demo/a.py: GC904" in r.stderr, r.stderr


@pytest.fixture(scope="module")
def demo_inventory(tmp_path_factory):
    """One `run` of the demo project, shared: each case below edits its own copy (a run costs ~2 s of CPU)."""
    p = tmp_path_factory.mktemp("demo-inventory")
    (p / "pyproject.toml").write_text(PROJECT)
    (p / "demo").mkdir()
    (p / "demo" / "__init__.py").write_text("")
    (p / "demo" / "step.py").write_text(STEP)
    # module scope comes before the autouse per-test cache fixture: name the session's cache here
    env = graphcheck_env(p, GRAPHCHECK_CACHE_DIR=str(tmp_path_factory.getbasetemp() / "gc-cache"))
    r = gc(p, "run", "--output-format", "json", env=env)
    doc = json.loads(r.stdout)
    assert {"sync", "capture", "static"} <= set(doc["layers"]), r.stderr
    return doc


@pytest.mark.parametrize("edit,message", [
    (lambda d: d["layers"]["sync"].pop("targets"), "'layers.sync.targets' must be a non-negative integer, found None"),
    (lambda d: d["layers"]["capture"].update(findings="1"), "'layers.capture.findings' must be a non-negative integer, found '1'"),
    (lambda d: d["layers"]["static"].update(scope_warnings=None), "'layers.static.scope_warnings' must be a list of strings, found None"),
])
def test_an_inventory_with_a_malformed_layer_is_one_line(project, demo_inventory, edit, message):
    """The run table reads these fields: a hand-edited inventory missing one was a KeyError in `report`."""
    doc = copy.deepcopy(demo_inventory)
    edit(doc)
    (project / "inv.json").write_text(json.dumps(doc))
    for fmt in ("full", "json"):
        r = gc(project, "report", "inv.json", "--output-format", fmt)
        assert r.returncode == 2 and r.stderr == f"graphcheck: error: inv.json: {message}\n", r.stderr
