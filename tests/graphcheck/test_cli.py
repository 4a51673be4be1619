"""The command line as people use it: in a terminal, in a pipe, with ruff's conventions, and `run` and `report`
agreeing on the verdict in every format."""
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import DATA, STEP, graphcheck_env, run_graphcheck
from graphcheck.findings import normalise_source
from graphcheck.inventory import SCHEMA_PATH


def _env(cwd):
    return graphcheck_env(cwd, COLUMNS="100")


def gc(cwd, *args, stdin=None):
    return run_graphcheck(cwd, *args, stdin=stdin, env=_env(cwd))


def in_terminal(cwd, *args, timeout=300):
    """Run graphcheck with stdin, stdout and stderr on a pseudo-terminal (what a user's shell gives it)."""
    pid, fd = pty.fork()
    if pid == 0:    # child
        os.chdir(cwd)
        os.execve(sys.executable, [sys.executable, "-m", "graphcheck", *args], _env(cwd))
    out, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 1.0)
        if r:
            try:
                chunk = os.read(fd, 65536)
            except OSError:       # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def test_output_naming_a_directory_never_replaces_the_file(project):
    """Path() drops a trailing "/" and "/.": `-o keep.json/.` replaced keep.json."""
    (project / "keep.json").write_text("kept")
    for bad in ("keep.json/", "keep.json/.", "keep.json/.."):
        r = gc(project, "scan", "-o", bad)
        assert r.returncode == 2 and "it names a directory" in r.stderr, (bad, r.stderr)
    assert (project / "keep.json").read_text() == "kept"


def test_rules_fit_the_terminal(project):
    """`graphcheck rules` in a terminal of 100 columns (_env) is drawn in 100: a fixed 160 wrapped every row in two;
    piped, it stays 160 wide whatever the terminal."""
    import re
    rc, out = in_terminal(project, "rules")
    lines = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", ln) for ln in out.splitlines() if ln.strip()]
    assert rc == 0 and "GC101" in out and max(len(ln) for ln in lines) <= 100, max(lines, key=len)
    piped = gc(project, "rules").stdout.splitlines()
    assert max(len(ln) for ln in piped) == 160


@pytest.mark.slow
def test_run_and_baseline_in_a_pseudo_terminal(project):
    rc, out = in_terminal(project, "run")
    assert "Traceback" not in out and rc == 1, out
    assert "GC104" in out and "FAILED" in out
    rc, out = in_terminal(project, "baseline", "--reason", "host position read, kept on purpose")
    assert rc == 0 and "Traceback" not in out and "wrote graphcheck-baseline.json" in out, out
    rc, out = in_terminal(project, "run")
    assert rc == 0 and "PASSED" in out, out


def test_run_in_a_pipe_prints_no_live_display(project):
    r = gc(project, "run", "--no-runtime")
    assert r.returncode == 1 and r.stderr == "" and "\x1b[" not in r.stdout


def _baselined_project(project):
    """Two static findings, one accepted in the baseline, plus one stale baseline entry."""
    (project / "demo" / "extra.py").write_text(textwrap.dedent("""
        import torch
        from graphcheck import capturable

        @capturable
        def hot(x: torch.Tensor):
            return x.sum().item()
    """))
    r = gc(project, "run", "--no-runtime", "--output-format", "json")
    rows = json.loads(r.stdout)["findings"]
    accepted = next(d for d in rows if d["rule"] == "GC104")
    base = {"version": 1, "entries": [
        {"fingerprint": accepted["fingerprint"], "rule": "GC104", "path": accepted["path"], "reason": "known"},
        {"fingerprint": "0" * 20, "rule": "GC101", "path": "demo/gone.py", "function": "f",
         "source": "print('[/INST]') and x.item()", "reason": "fixed since"}]}
    (project / "graphcheck-baseline.json").write_text(json.dumps(base))
    return accepted["fingerprint"]


@pytest.mark.parametrize("fmt", ["concise", "full", "json", "sarif", "github", "html"])
def test_report_agrees_with_run_in_every_format(project, fmt):
    fp = _baselined_project(project)
    run = gc(project, "run", "--no-runtime", "--output-format", fmt)
    saved = gc(project, "run", "--no-runtime", "--output-format", "json", "-o", "inv.json")
    rep = gc(project, "report", "inv.json", "--output-format", fmt)
    assert run.returncode == saved.returncode == rep.returncode == 1, run.stderr + rep.stderr
    timing = re.compile(r"\d+\.\ds")
    assert timing.sub("", rep.stdout) == timing.sub("", run.stdout)
    if fmt in ("sarif", "json"):
        jsonschema = pytest.importorskip("jsonschema")
        schema = DATA / "sarif-schema-2.1.0-rtm.5.json" if fmt == "sarif" else SCHEMA_PATH
        jsonschema.validate(json.loads(run.stdout), json.loads(schema.read_text()))
    if fmt == "sarif":
        res = json.loads(run.stdout)["runs"][0]["results"]
        acc = next(x for x in res if x["partialFingerprints"]["graphcheck/v1"] == fp)
        assert acc["suppressions"][0]["kind"] == "external"
        assert [x["ruleId"] for x in res if "suppressions" not in x] == ["GC101"]
    if fmt == "github":
        errors = [ln for ln in run.stdout.splitlines() if ln.startswith("::error")]
        assert len(errors) == 1 and "GC101" in errors[0] and "GC104" not in run.stdout
        assert "stale baseline" in run.stdout
    if fmt in ("full", "concise"):
        assert "1 accepted, 1 new, 1 stale" in run.stdout
    if fmt == "full":
        assert "print('[/INST]')" in run.stdout         # rich markup in a stale entry's source is printed verbatim


def test_concise_is_path_line_col_and_columns_are_one_based_everywhere(project):
    (project / "m.py").write_text("import torch\ndef f(x: torch.Tensor):\n    y = 1; z = x.item()\n")
    c = gc(project, "scan", "m.py", "--all-functions", "--output-format", "concise", "--no-cache")
    assert c.returncode == 1
    assert c.stdout.splitlines()[0] == "m.py:3:16: GC101 `.item()` reads a device value back to the host"
    j = json.loads(gc(project, "scan", "m.py", "--all-functions", "--output-format", "json", "--no-cache").stdout)
    assert [(d["line"], d["col"]) for d in j["findings"]] == [(3, 16)]
    gh = gc(project, "scan", "m.py", "--all-functions", "--output-format", "github", "--no-cache").stdout
    assert "line=3,col=16," in gh
    s = json.loads(gc(project, "scan", "m.py", "--all-functions", "--output-format", "sarif", "--no-cache").stdout)
    assert s["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]["startColumn"] == 16


def test_exit_zero_statistics_quiet_and_noqa(project):
    (project / "m.py").write_text(textwrap.dedent("""
        import torch
        def f(x: torch.Tensor):
            a = x.item()
            b = x.item()
            c = x.tolist()
            d = x.item()  # noqa: GC101 -- read once, outside capture
            return a, b, c, d
    """))
    args = ("scan", "m.py", "--all-functions", "--no-cache")
    st = gc(project, *args, "--statistics")
    assert st.returncode == 1 and st.stdout.splitlines() == ["2\tGC101\ttensor-item", "1\tGC102\ttensor-tolist"]
    assert gc(project, *args, "--exit-zero").returncode == 0
    q = gc(project, *args, "--output-format", "concise", "--quiet")
    assert len(q.stdout.splitlines()) == 3 and "Found" not in q.stdout


def test_select_and_ignore_on_run(project):
    _baselined_project(project)
    only = gc(project, "run", "--no-runtime", "--output-format", "json", "--select", "GC101")
    assert {d["rule"] for d in json.loads(only.stdout)["findings"]} == {"GC101"}
    none = gc(project, "run", "--no-runtime", "--output-format", "json", "--ignore", "GC1")
    assert json.loads(none.stdout)["findings"] == [] and none.returncode == 0


@pytest.mark.slow
def test_a_formatter_does_not_churn_the_baseline(project):
    src = textwrap.dedent('''
        import torch
        from graphcheck import capturable

        @capturable
        def hot(x: torch.Tensor, names):
            y = x.sum(dim = 0, keepdim = True, ).item()   # the total
            z = x.to("cpu",)
            return y, z
    ''')
    reformatted = textwrap.dedent("""
        import torch
        from graphcheck import capturable


        @capturable
        def hot(x: torch.Tensor, names):
            y = x.sum(dim=0, keepdim=True).item()
            z = x.to('cpu')  # quoted differently
            return y, z
    """)
    (project / "demo" / "extra.py").write_text(src)
    assert gc(project, "baseline", "--reason", "known").returncode == 0
    before = json.loads((project / "graphcheck-baseline.json").read_text())["entries"]
    assert {e["rule"] for e in before} >= {"GC101", "GC103"}
    (project / "demo" / "extra.py").write_text(reformatted)
    r = gc(project, "run", "--no-runtime", "--output-format", "concise", "--strict-baseline")
    assert r.returncode == 0 and "0 new, 0 stale" in r.stdout, r.stdout


def test_normalised_source_ignores_layout_not_meaning():
    same = ['x = f("a", b ,)  # c', "x = f('a', b)", "x=f( 'a',b )"]
    assert len({normalise_source(s) for s in same}) == 1
    assert normalise_source("if t.any():") == normalise_source("if t.any() :  # why")
    assert normalise_source('    foo("x",') == normalise_source("foo('x',")       # a line inside a call
    assert normalise_source("x = f('a')") != normalise_source("x = f('b')")
    assert normalise_source("x.item()") != normalise_source("y.item()")


def test_config_is_the_nearest_pyproject_with_a_graphcheck_table(project, tmp_path_factory):
    sub = project / "demo" / "nested"
    sub.mkdir()
    (sub / "pyproject.toml").write_text("[project]\nname = 'nested'\n")        # no [tool.graphcheck]: passed over
    (sub / "m.py").write_text("import torch\ndef f(x: torch.Tensor):\n    return x.item()\n")
    r = gc(sub, "scan", "--output-format", "json")
    # the project's config applies: scope from its entry point, so the helper outside it is not reported
    assert r.returncode == 1 and {d["path"] for d in json.loads(r.stdout)["findings"]} == {"demo/step.py"}
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    r = gc(elsewhere, "scan", str(sub / "m.py"), "--output-format", "json")
    assert json.loads(r.stdout)["findings"] == []          # discovered from the scanned path, not the cwd
    alt = project / "graphsafe.toml"
    alt.write_text('[tool.graphcheck]\npaths = ["demo/nested"]\nbaseline = "graphsafe-baseline.json"\n')
    r = gc(elsewhere, "scan", "--config", str(alt), "--output-format", "json")
    assert [d["path"] for d in json.loads(r.stdout)["findings"]] == ["demo/nested/m.py"]


def test_stdin(project):
    src = "import torch\ndef f(x: torch.Tensor):\n    return x.item()\n"
    r = gc(project, "scan", "-", "--stdin-filename", "demo/fake.py", "--all-functions", "--output-format", "concise", stdin=src)
    assert r.returncode == 1 and r.stdout.startswith("demo/fake.py:3:12: GC101"), r.stdout + r.stderr


def test_ctrl_c_leaves_no_partial_file_and_exits_130(project):
    # an interrupt while the target is built (a KeyboardInterrupt the step raises itself is a GC006 row instead:
    # test_badinput.py step-keyboard-interrupt; a real SIGINT in the step: test_interrupt_signal_during_a_run)
    (project / "demo" / "step.py").write_text(STEP.replace("    s = Step()", "    raise KeyboardInterrupt"))
    (project / "out.json").write_text("previous\n")
    r = gc(project, "run", "--output-format", "json", "-o", "out.json")
    assert r.returncode == 130 and "interrupted" in r.stderr and "Traceback" not in r.stderr
    assert (project / "out.json").read_text() == "previous\n"
    assert [p.name for p in project.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("args", [("explain", "GC101"), ("rules",), ("scan", "demo", "--output-format", "concise")])
def test_a_closed_pipe_exits_quietly(project, args):
    p = subprocess.Popen([sys.executable, "-m", "graphcheck", *args], cwd=project, env=_env(project),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()          # the reader is gone before the first write (`| head` after its lines)
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141 and err == ""


def test_scan_imports_no_torch(project):
    """The static install has no torch: block it and scan; the runtime commands name the extra instead."""
    code = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None          # `import torch` now raises ImportError
        from graphcheck.cli import main
        rc = main(sys.argv[1:])
        loaded = sorted(m for m in sys.modules if m.split(".")[0] == "torch" and sys.modules[m] is not None)
        assert not loaded, loaded
        raise SystemExit(rc)
    """)
    env = _env(project)
    scan = subprocess.run([sys.executable, "-c", code, "scan", "--output-format", "concise", "--no-cache", "--jobs", "2"],
                          cwd=project, env=env, capture_output=True, text=True)
    assert scan.returncode == 1 and "GC104" in scan.stdout, scan.stderr
    static = subprocess.run([sys.executable, "-c", code, "run", "--no-runtime"], cwd=project, env=env, capture_output=True, text=True)
    assert static.returncode == 1 and "GC104" in static.stdout, static.stderr
    audit = subprocess.run([sys.executable, "-c", code, "audit"], cwd=project, env=env, capture_output=True, text=True)
    assert audit.returncode == 2 and "pip install 'torch-graphcheck[runtime]'" in audit.stderr
    assert audit.stderr.count("\n") == 1


def test_interrupt_signal_during_a_run(project):
    """A real SIGINT (what Ctrl-C sends) while the target runs: exit 130, the previous output intact."""
    (project / "demo" / "step.py").write_text(STEP.replace("        self.pos += 1", "        open('started', 'w').close(); __import__('time').sleep(60)"))
    (project / "out.json").write_text("previous\n")
    p = subprocess.Popen([sys.executable, "-m", "graphcheck", "run", "--output-format", "json", "-o", "out.json"],
                         cwd=project, env=_env(project), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (project / "started").exists():
        time.sleep(0.2)       # the step is running
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130 and "Traceback" not in err, err
    assert (project / "out.json").read_text() == "previous\n"


@pytest.mark.slow
def test_a_step_that_raises_is_never_a_pass(project):
    """GC006 rows are 'unchecked': exit 2 in run and in report, and a baseline entry for them accepts nothing."""
    (project / "demo" / "step.py").write_text(STEP.replace("        self.pos += 1", "        raise RuntimeError('cache not allocated')"))
    r = gc(project, "run", "--output-format", "json", "-o", "inv.json")
    assert r.returncode == 2 and "could not check demo/step.py:13: GC006" in r.stderr
    doc = json.loads((project / "inv.json").read_text())
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, json.loads(SCHEMA_PATH.read_text()))
    unchecked = [d for d in doc["findings"] if d["status"] == "unchecked"]
    assert {d["rule"] for d in unchecked} == {"GC006"} and doc["problems"]
    entries = [{"fingerprint": d["fingerprint"], "rule": d["rule"], "path": d["path"], "reason": "hand-written"} for d in doc["findings"]]
    (project / "graphcheck-baseline.json").write_text(json.dumps({"version": 1, "entries": entries}))
    again = gc(project, "run", "--output-format", "concise")
    assert again.returncode == 2 and "(not checked)" in again.stdout and "NOT CHECKED" in again.stdout
    assert gc(project, "report", "inv.json", "--output-format", "github").returncode == 2
    assert gc(project, "run", "--exit-zero").returncode == 2        # --exit-zero never hides what was not checked


def test_output_to_a_fifo_is_written_through_and_files_keep_their_mode(project, tmp_path):
    """`-o` a FIFO (as `-o /dev/null`) writes into it: an atomic replace would leave a regular file in place of
    the device. A replaced output keeps its permissions (mkstemp's 0600 would hide a committed baseline from the
    group), and a new one gets the umask's."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    r = gc(project, "scan", "-o", str(fifo), "--output-format", "json")
    got = reader.communicate(timeout=60)[0]
    assert r.returncode == 1 and json.loads(got)["findings"], r.stderr
    assert fifo.is_fifo()
    out = project / "inv.json"
    out.write_text("{}")
    out.chmod(0o644)
    assert gc(project, "scan", "-o", "inv.json").returncode == 1
    assert out.stat().st_mode & 0o777 == 0o644 and out.read_text() != "{}"
    r = gc(project, "scan", "-o", "-", "--output-format", "concise")
    assert "GC104" in r.stdout and not (project / "-").exists()


def test_a_file_name_that_is_not_utf8_is_reported_not_a_crash(project):
    name = os.fsdecode(b"st\xe9p.py")
    (project / "demo" / name).write_text((project / "demo" / "step.py").read_text())
    for fmt in ("full", "json", "sarif"):
        r = gc(project, "scan", "--all-functions", "--output-format", fmt, "-o", f"out.{fmt}")
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    paths = {f["path"] for f in json.loads((project / "out.json").read_text())["findings"]}
    assert f"demo/{name}" in paths, paths


def test_a_target_with_rich_markup_in_a_terminal(project):
    rc, out = in_terminal(project, "audit", "[/]:fn")
    assert rc == 2 and "Traceback" not in out and "MarkupError" not in out, out
    assert "cannot import module '[/]'" in out


@pytest.mark.slow
def test_a_target_that_prints_keeps_stdout_machine_readable(project):
    """A model that logs with print() while loading and stepping, and C-level code that writes to file descriptor 1
    (an extension's build, a C++ logger): its lines go to stderr, the JSON to stdout."""
    (project / "demo" / "noisy.py").write_text(
        "print('loading weights')\nfrom demo.step import make as _make\n\n\ndef make():\n    print('building')\n"
        "    import os\n    os.write(1, b'C-level loading message\\n')\n"
        "    t = _make()\n    inner = t.step\n\n    def step(x):\n        print('step')\n        return inner(x)\n"
        "    t.step = step\n    return t\n")
    for cmd in ("audit", "capture"):
        r = gc(project, cmd, "demo.noisy:make", "--output-format", "json")
        assert r.returncode == 1 and json.loads(r.stdout)["findings"], r.stdout[:300] + r.stderr
        assert all(line in r.stderr.splitlines() for line in ("loading weights", "building", "step",
                                                                 "C-level loading message")), r.stderr


def test_stdin_is_decoded_like_a_file(project):
    """`scan -` reads bytes and decodes them as Python reads a file: a coding declaration is honoured, and bytes
    that decode to nothing are one line naming the buffer (exit 2), not a GC903 about surrogates."""
    def scan(data: bytes):
        return subprocess.run([sys.executable, "-m", "graphcheck", "scan", "-", "--stdin-filename", "demo/x.py"],
                              cwd=project, input=data, capture_output=True, env=_env(project), timeout=300)
    ok = scan(b'# -*- coding: latin-1 -*-\nx = "\xff"\n')
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = scan(b'x = "\xff"\n')
    err = bad.stderr.decode()
    assert bad.returncode == 2 and err.count("\n") == 1 and "demo/x.py (from stdin): cannot decode" in err, err


def test_stdin_reports_only_the_buffer_and_its_name_is_from_the_current_directory(project):
    """An editor pipes a buffer with the project's entry points configured: the other files are scanned to resolve
    the scope, but their findings are not the buffer's; and from a subdirectory the buffer replaces the file it
    names there (it was taken relative to the configuration's root, so demo/step.py was scanned from disk)."""
    r = gc(project, "scan", "-", "--stdin-filename", "demo/other.py", "--output-format", "concise", stdin="x = 1\n")
    assert r.returncode == 0 and r.stdout == "All checks passed in 3 file(s).\n", r.stdout + r.stderr
    src = "import torch\n\n\nclass Step:\n    def __call__(self, x: torch.Tensor):\n        return x.item()\n"
    r = run_graphcheck(project / "demo", "scan", "-", "--stdin-filename", "step.py", "--output-format", "concise",
                       stdin=src, env=_env(project))
    assert r.returncode == 1 and r.stdout.splitlines()[0] == "demo/step.py:6:16: GC101 `.item()` reads a device value back to the host", r.stdout + r.stderr
    assert "GC104" not in r.stdout
