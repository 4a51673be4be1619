"""Inventory, baseline gate, `graphcheck run`, `report`, the pytest plugin and the pre-commit hooks."""
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT, run_graphcheck as gc
from graphcheck import baseline as bl
from graphcheck.findings import Finding, assign_fingerprints
from graphcheck.inventory import SCHEMA_PATH, merge


def test_run_links_static_and_runtime_and_gates(project):
    r = gc(project, "run", "--no-progress", "--output-format", "json", "-o", "inv.json")
    assert r.returncode == 1, r.stderr
    assert "0 accepted, 1 new, 0 stale" in r.stdout
    doc = json.loads((project / "inv.json").read_text())
    row = next(d for d in doc["findings"] if d["rule"] == "GC104")
    # predicted by the scan, seen once per audited step, and the reason the frozen capture fails
    assert row["evidence"]["kinds"] == ["static", "sync", "capture"]
    sync, cap = row["evidence"]["runtime"]
    assert (sync["rule"], sync["count"], sync["op"]) == ("GC104", 2, "Tensor.__int__") and cap["rule"] == "GC001"
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, json.loads(SCHEMA_PATH.read_text()))

    # accept it with a reason: the gate passes, the file is byte-identical run to run
    b = gc(project, "baseline", "--reason", "host position read; the graph-safe path keeps it on device")
    assert b.returncode == 0, b.stderr
    base = json.loads((project / "graphcheck-baseline.json").read_text())
    assert base["version"] == 1 and all(e["reason"].startswith("host position") for e in base["entries"])
    r2 = gc(project, "run", "--no-progress", "--output-format", "json", "-o", "inv2.json")
    assert r2.returncode == 0, r2.stdout + r2.stderr
    assert "PASSED" in r2.stdout
    r3 = gc(project, "run", "--no-progress", "--output-format", "json", "-o", "inv3.json")
    assert (project / "inv2.json").read_bytes() == (project / "inv3.json").read_bytes()

    # an unrelated edit above the finding moves its line, not its fingerprint
    src = (project / "demo" / "step.py").read_text()
    (project / "demo" / "step.py").write_text("# a comment\n\n" + src)
    assert gc(project, "run", "--no-progress").returncode == 0

    # a new readback fails at its line; fixing the old one leaves a stale entry
    (project / "demo" / "step.py").write_text(src.replace("n = int(self.pos)", "n = self.pos.item()"))
    r4 = gc(project, "run", "--no-progress", "--format", "github")
    assert r4.returncode == 1
    assert "GC101" in r4.stdout and "line=14" in r4.stdout and "stale" in r4.stdout
    (project / "demo" / "step.py").write_text(src.replace("n = int(self.pos)", "n = self.pos"))
    assert gc(project, "run", "--no-progress").returncode == 0
    strict = gc(project, "run", "--no-progress", "--strict-baseline")
    assert strict.returncode == 1 and "stale" in strict.stdout


def test_corrupt_or_wrong_version_baseline_is_exit_2(project):
    (project / "graphcheck-baseline.json").write_text("{not json")
    r = gc(project, "run", "--no-progress")
    assert r.returncode == 2 and "corrupt baseline" in r.stderr and r.stderr.count("\n") == 1
    (project / "graphcheck-baseline.json").write_text(json.dumps({"version": 99, "entries": []}))
    r = gc(project, "run", "--no-progress")
    assert r.returncode == 2 and "version 99" in r.stderr


def test_output_never_overwrites_inputs(project):
    (project / "graphcheck-baseline.json").write_text(json.dumps({"version": 1, "entries": []}))
    r = gc(project, "run", "--no-progress", "-o", "graphcheck-baseline.json")
    assert r.returncode == 2 and "refusing to overwrite" in r.stderr
    assert json.loads((project / "graphcheck-baseline.json").read_text()) == {"version": 1, "entries": []}


def test_baseline_needs_a_reason_and_writes_atomically(project, monkeypatch):
    r = gc(project, "baseline")
    assert r.returncode == 2 and "--reason" in r.stderr
    assert not (project / "graphcheck-baseline.json").exists()
    f = assign_fingerprints([Finding("GC101", "static", "a.py", 3, 0, "f", "m", "x.item()")])
    path = project / "b.json"
    bl.write(path, f, {}, "ok")
    before = path.read_text()

    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        bl.write(path, f, {}, "other reason")
    assert path.read_text() == before and [p.name for p in project.glob(".b.json.*")] == []


def test_bad_target_is_a_config_error(project):
    r = gc(project, "audit", "demo.step:missing")
    assert r.returncode == 2 and "demo.step:missing" in r.stderr


def test_audit_and_capture_commands(project):
    a = gc(project, "audit", "--format", "json")
    assert a.returncode == 1
    assert [f["rule"] for f in json.loads(a.stdout)["findings"]] == ["GC104"]
    c = gc(project, "capture", "--format", "json")
    assert c.returncode == 1, c.stdout + c.stderr
    assert [(f["rule"], f["line"]) for f in json.loads(c.stdout)["findings"]] == [("GC001", 14)]


def test_report_html_and_text(project):
    gc(project, "run", "--no-progress", "--output-format", "json", "-o", "inv.json")
    h = gc(project, "report", "inv.json", "--format", "html", "-o", "inv.html")
    assert h.returncode == 1          # the saved run failed the gate: report says so too
    page = (project / "inv.html").read_text()
    assert "<h2>Static scan" in page and "<h2>Sync audit" in page and "<details>" in page and "GC104" in page
    assert "<tr class='new'>" in page
    t = gc(project, "report", "inv.json")
    assert "GC104" in t.stdout
    same = gc(project, "report", "inv.json", "-o", "inv.json")
    assert same.returncode == 2
    bad = gc(project, "report", "pyproject.toml")
    assert bad.returncode == 2 and "pyproject.toml" in bad.stderr


def test_merge_prefers_same_rule_on_the_line():
    s = [Finding("GC201", "static", "a.py", 5, 0, "f", "branch", "if t:"), Finding("GC104", "static", "a.py", 5, 0, "f", "cast", "if t:")]
    r = [Finding("GC104", "sync", "a.py", 5, 0, "f", "int", "if t:", count=3, evidence={"op": "Tensor.__bool__"})]
    rows = merge(s, r)
    assert len(rows) == 2
    hit = next(x for x in rows if x.rule == "GC104")
    assert hit.evidence["kinds"] == ["static", "sync"] and hit.count == 3


PLUGIN_TEST = '''
import pytest
import torch

def test_fixture_audits(graphcheck):
    t = graphcheck_target()
    found = graphcheck.audit(t, steps=2)
    assert [f.rule for f in found] == ["GC101"], graphcheck.describe(found)

@pytest.mark.graph_safe
def test_clean_body():
    x = torch.randn(4)
    torch.where(x > 0, x, 0).topk(2)

@pytest.mark.graph_safe
def test_syncing_body():
    x = torch.randn(4)
    x.sum().item()

def graphcheck_target():
    from graphcheck import Target
    return Target(step=lambda x: x.sum().item(), make_inputs=lambda k: torch.randn(3), state=dict, name="t")
'''


def test_pytest_plugin(pytester):
    pytester.makepyfile(PLUGIN_TEST)
    res = pytester.runpytest_subprocess()       # the plugin loads through its pytest11 entry point
    res.assert_outcomes(passed=2, failed=1)
    res.stdout.fnmatch_lines(["*SyncError*GC101*"])


def _pre_commit() -> str:
    exe = shutil.which("pre-commit") or str(Path(sys.executable).parent / "pre-commit")
    if not Path(exe).exists():
        pytest.skip("pre-commit is not installed")
    return exe


def _user_repo(tmp_path, hooks_yaml: str):
    """A user's repository: the entry point in pkg/model.py reaches pkg/helpers.py; the hook config given."""
    repo = tmp_path / "user"
    (repo / "pkg").mkdir(parents=True)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pc-home"), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    run = lambda *a: subprocess.run(a, cwd=repo, capture_output=True, text=True, env=env, timeout=600)  # noqa: E731
    run("git", "init", "-q")
    (repo / "pyproject.toml").write_text('[tool.graphcheck]\npaths = ["pkg"]\nentry-points = ["pkg.model:step"]\n')
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "model.py").write_text("import torch\nfrom .helpers import log\n\ndef step(x: torch.Tensor):\n    log(x)\n    return x * 2\n")
    (repo / "pkg" / "helpers.py").write_text("import torch\n\ndef log(x: torch.Tensor):\n    return x.sum()\n")
    (repo / "tools.py").write_text("import torch\n\ndef report(x: torch.Tensor):\n    return x.item()   # not reached from the entry point\n")
    (repo / ".pre-commit-config.yaml").write_text(textwrap.dedent(hooks_yaml))
    run("git", "add", ".")
    run("git", "commit", "-qm", "init", "--no-verify")
    return repo, run


def test_pre_commit_scan_hook_without_the_entry_module_staged(tmp_path):
    """The hook passes the staged files; the entry point resolves from the configured paths all the same."""
    exe = _pre_commit()
    repo, run = _user_repo(tmp_path, f"""
        repos:
          - repo: local
            hooks:
              - id: graphcheck-scan
                name: graphcheck scan
                entry: {sys.executable} -m graphcheck scan --output-format concise --no-cache
                language: system
                types: [python]
        """)
    (repo / "pkg" / "helpers.py").write_text("import torch\n\ndef log(x: torch.Tensor):\n    return x.sum()  # edited\n")
    (repo / "tools.py").write_text((repo / "tools.py").read_text() + "# edited\n")
    run("git", "add", ".")
    ok = run(exe, "run")                       # stages helpers.py and tools.py, not pkg/model.py
    assert ok.returncode == 0, ok.stdout + ok.stderr
    (repo / "pkg" / "helpers.py").write_text("import torch\n\ndef log(x: torch.Tensor):\n    return x.sum().item()\n")
    run("git", "add", ".")
    bad = run(exe, "run")
    assert bad.returncode == 1 and "pkg/helpers.py:4:12: GC101" in bad.stdout, bad.stdout


def test_pre_commit_builds_the_shipped_hook_without_torch(tmp_path):
    """pre-commit itself installs the hook from .pre-commit-hooks.yaml (a fresh env from this repository's HEAD);
    that env has no torch, and a commit that does not stage the entry module passes. Needs PyPI for rich."""
    exe = _pre_commit()
    if not (ROOT / ".git").exists():
        pytest.skip("needs the repository checkout (pre-commit clones it)")
    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    repo, run = _user_repo(tmp_path, f"""
        repos:
          - repo: {ROOT}
            rev: {rev}
            hooks: [{{id: graphcheck-scan}}]
        """)
    inst = run(exe, "install-hooks")
    if inst.returncode != 0 and re.search(r"(?i)connection|could not find a version|network", inst.stdout + inst.stderr):
        pytest.skip("PyPI is not reachable: " + (inst.stdout + inst.stderr)[-200:])
    assert inst.returncode == 0, inst.stdout + inst.stderr
    envs = list((tmp_path / "pc-home").glob("repo*/py_env-*"))
    assert envs, "pre-commit built no python env"
    py = next(envs[0].glob("bin/python"))
    assert subprocess.run([py, "-c", "import torch"], capture_output=True).returncode != 0   # the light install
    (repo / "pkg" / "helpers.py").write_text("import torch\n\ndef log(x: torch.Tensor):\n    return x.sum().item()\n")
    run("git", "add", "pkg/helpers.py")
    bad = run(exe, "run")
    assert bad.returncode == 1 and "pkg/helpers.py:4:12: GC101" in bad.stdout, bad.stdout + bad.stderr
    (repo / "pkg" / "helpers.py").write_text("import torch\n\ndef log(x: torch.Tensor):\n    return x.sum()\n")
    run("git", "add", "pkg/helpers.py")
    ok = run(exe, "run")
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_two_identical_hazards_in_one_function_get_different_fingerprints(scan_src):
    """The fingerprint ends with the occurrence index of its (rule, path, function, source) key: without it the
    second of two identical readbacks in one function would share the first one's fingerprint, and a baseline that
    accepts one would silently accept both (and `merge` could fold them into one row)."""
    found = scan_src("""
        import torch

        def step(x: torch.Tensor):
            a = x.sum().item()
            a = x.sum().item()
            return a
        """)
    rows = assign_fingerprints([f for f in found if f.rule == "GC101"])
    assert [f.line for f in rows] == [5, 6]
    assert rows[0].fingerprint != rows[1].fingerprint
    # and the pair is stable: the same source gives the same two fingerprints, in the same order
    again = assign_fingerprints([Finding.from_dict(f.to_dict()) for f in reversed(rows)])
    assert [f.fingerprint for f in again] == [f.fingerprint for f in rows]


def test_rebaselining_keeps_the_reasons_already_written(project):
    """README: `graphcheck baseline` "keeps known reasons": a second run with another --reason gives that reason
    to the new findings only; the entries already accepted keep theirs, byte for byte."""
    first = "host position read; the graph-safe path keeps it on device"
    assert gc(project, "baseline", "--reason", first).returncode == 0
    src = (project / "demo" / "step.py").read_text()
    (project / "demo" / "step.py").write_text(src.replace("        n = int(self.pos)\n",
                                                          "        n = int(self.pos)\n        m = self.pos.item()\n"))
    r = gc(project, "baseline", "--reason", "a second readback, accepted later")
    assert r.returncode == 0, r.stderr
    entries = json.loads((project / "graphcheck-baseline.json").read_text())["entries"]
    reasons = {e["rule"]: e["reason"] for e in entries}
    assert reasons == {"GC104": first, "GC101": "a second readback, accepted later"}, entries
