"""graphcheck in a user's repository (issue 40): the baseline and `exclude` in `scan` and the hook, what a run that
skipped a layer may call stale, what a scan that reached nothing says, and the SARIF suppression's reason."""
import json

import pytest

from conftest import STEP, run_graphcheck as gc


def _baseline(project):
    r = gc(project, "baseline", "--reason", "read once per request")
    assert r.returncode == 0, r.stderr
    return json.loads((project / "graphcheck-baseline.json").read_text())


def test_scan_accepts_what_the_baseline_accepts(project):
    _baseline(project)
    step = project / "demo" / "step.py"
    step.write_text(step.read_text().replace("        n = int(self.pos)", "        # a comment-only edit\n        n = int(self.pos)"))
    r = gc(project, "scan", "demo/step.py", "--output-format", "concise")
    assert r.returncode == 0 and "1 accepted, 0 new, 0 stale" in r.stdout and "GC104" not in r.stdout, r.stdout + r.stderr
    r = gc(project, "scan", "demo/step.py", "--no-baseline", "--output-format", "concise")
    assert r.returncode == 1 and "demo/step.py:15:13: GC104" in r.stdout, r.stdout
    step.write_text(step.read_text().replace("        return self.cache", "        m = self.pos.item()\n        return self.cache"))
    r = gc(project, "scan", "demo/step.py", "--output-format", "concise")
    assert r.returncode == 1 and r.stdout.startswith("demo/step.py:16:13: GC101") and "GC104" not in r.stdout, r.stdout


@pytest.mark.slow
def test_scan_of_some_files_calls_no_entry_of_another_file_stale(project):
    _baseline(project)
    (project / "demo" / "other.py").write_text("x = 1\n")
    r = gc(project, "scan", "demo/other.py", "--output-format", "concise")
    assert r.returncode == 0 and "0 stale, 1 not examined by this run" in r.stdout, r.stdout


@pytest.mark.slow
def test_no_runtime_leaves_runtime_rows_unexamined_not_stale(project):
    """A run without the runtime layers cannot have found their rows: not 'stale … fixed', not a --strict-baseline
    failure."""
    step = project / "demo" / "step.py"           # a readback only the runtime layers see (the scan reads no getattr)
    step.write_text(step.read_text().replace("        n = int(self.pos)", "        n = int(self.pos)\n        getattr(self.pos, 'item')()"))
    doc = _baseline(project)
    assert "sync" in {e["kind"] for e in doc["entries"]}, doc
    r = gc(project, "run", "--no-runtime", "--strict-baseline")
    assert r.returncode == 0 and "0 stale" in r.stdout and "fixed" not in r.stdout, r.stdout + r.stderr
    assert "not examined by this run" in r.stdout
    r = gc(project, "run", "--no-runtime", "--strict-baseline", "--select", "GC2")   # a rule not selected: the same
    assert r.returncode == 0 and "0 stale" in r.stdout, r.stdout


@pytest.mark.slow
def test_sarif_suppression_carries_the_baseline_reason(project):
    _baseline(project)
    doc = json.loads(gc(project, "run", "--output-format", "sarif").stdout)
    sups = [s for res in doc["runs"][0]["results"] for s in res.get("suppressions", [])]
    assert sups and all(s["justification"] == "accepted in the graphcheck baseline: read once per request" for s in sups)
    inv = gc(project, "run", "--output-format", "json")
    (project / "inv.json").write_text(inv.stdout)
    again = json.loads(gc(project, "report", "inv.json", "--output-format", "sarif").stdout)     # the saved inventory too
    assert [r.get("suppressions") for r in again["runs"][0]["results"]] == [r.get("suppressions") for r in doc["runs"][0]["results"]]


def test_a_named_file_no_entry_point_reaches_is_not_all_checks_passed(project):
    (project / "helper.py").write_text("import torch\n\ndef f(x: torch.Tensor):\n    return x.item()\n")
    r = gc(project, "scan", "helper.py", "--output-format", "concise")
    assert "All checks passed" not in r.stdout and r.returncode == 0, r.stdout
    assert "helper.py: no function in it is reachable from the entry points" in r.stderr and "--all-functions" in r.stderr
    r = gc(project, "scan", "-", "--stdin-filename", "helper.py", "--output-format", "concise",
           stdin=(project / "helper.py").read_text())
    assert "All checks passed" not in r.stdout and "no function in it is reachable" in r.stderr, r.stdout + r.stderr
    r = gc(project, "scan", "helper.py", "--all-functions", "--output-format", "concise")
    assert r.returncode == 1 and "helper.py:4:12: GC101" in r.stdout


def test_force_exclude_applies_exclude_to_named_files(project):
    (project / "pyproject.toml").write_text((project / "pyproject.toml").read_text() + 'exclude = ["vendored"]\n')
    (project / "demo" / "vendored").mkdir()
    (project / "demo" / "vendored" / "fast.py").write_text("import torch\n\ndef f(x: torch.Tensor):\n    return x.item()\n")
    args = ("scan", "demo/vendored/fast.py", "--all-functions", "--output-format", "concise")
    assert gc(project, *args).returncode == 1                       # named explicitly: scanned, as ruff does
    r = gc(project, *args, "--force-exclude")
    assert r.returncode == 0 and "GC101" not in r.stdout and r.stderr == "", r.stdout + r.stderr


def test_not_checked_is_never_all_checks_passed(project):
    (project / "demo" / "step.py").write_text(STEP.replace("        self.pos += 1", "        raise RuntimeError('boom')")
                                               .replace("        n = int(self.pos)\n", ""))
    r = gc(project, "audit", "--output-format", "concise")
    assert r.returncode == 2 and "NOT CHECKED" in r.stdout and "All checks passed" not in r.stdout, r.stdout


def test_rule_listings_show_placeholders_as_placeholders(project):
    """`at step step`, `max abs diff diff`: the braces were dropped from the templates in `rules`, SARIF and README."""
    from conftest import ROOT
    from graphcheck.rules import RULES
    listing = gc(project, "rules").stdout
    readme = (ROOT / "README.md").read_text()
    assert "at step step" not in listing and "diff diff" not in listing and "at step <step>" in listing
    for code, r in RULES.items():
        if "{" in r.message:
            assert f"| `{code}` | {r.name} | {r.message} |" in readme, code     # markdown-safe braces there
    from graphcheck.report.sarif import to_sarif
    from graphcheck.findings import Finding
    from graphcheck.result import classify
    res = classify("run", [Finding("GC003", "capture", "a.py", 1, message="m")], None)
    assert to_sarif(res, "0")["runs"][0]["tool"]["driver"]["rules"][0]["shortDescription"]["text"] == RULES["GC003"].template
    assert "<step>" in RULES["GC003"].template


def test_a_stdout_that_refuses_is_one_line(project):
    import subprocess
    import sys
    from conftest import graphcheck_env
    for args in (("scan", "demo"), ("rules",), ("explain", "GC101"), ("scan", "demo", "-o", "inv.json"),
                 ("scan", "demo", "--output-format", "json")):
        with open("/dev/full", "w") as full:
            r = subprocess.run([sys.executable, "-m", "graphcheck", *args], cwd=project, stdout=full, stderr=subprocess.PIPE,
                               text=True, env=graphcheck_env(project), timeout=300)
        assert r.returncode == 2 and r.stderr == "graphcheck: error: stdout: cannot write the output (No space left on device)\n", (args, r.stderr)


def test_a_huge_stdin_is_refused_in_bounded_memory(project):
    big = "x = [" + "1, " * 17_000_000 + "]\n"
    r = gc(project, "scan", "-", stdin=big)
    assert r.returncode == 2 and r.stdout == "" and r.stderr == (
        "graphcheck: error: stdin: 51.0 MB, over the 5 MB limit for one Python source (generated code? add it to "
        "[tool.graphcheck] exclude)\n"), r.stderr


@pytest.mark.slow
def test_evidence_stacks_hold_no_launcher_frames(project):
    """The console script's absolute path ended every evidence stack (and runpy's under `python -m`)."""
    import subprocess
    import sys
    from pathlib import Path
    from conftest import graphcheck_env
    script = Path(sys.executable).parent / "graphcheck"
    for cmd in ([str(script)] if script.exists() else []) + [[sys.executable, "-m", "graphcheck"]]:
        cmd = cmd if isinstance(cmd, list) else [cmd]
        r = subprocess.run([*cmd, "audit", "--output-format", "json"], cwd=project, capture_output=True, text=True,
                           env=graphcheck_env(project), timeout=300)
        stacks = [f["evidence"]["stack"] for f in json.loads(r.stdout)["findings"]]
        assert stacks == [["demo/step.py:14:Step.__call__"]], (cmd, stacks)
