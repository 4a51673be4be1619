"""Regions (where a finding's line runs: captured, per-step, allowed, one-time, eager-only), how they flow through
findings -> result -> gate -> report, and fan-out: a dispatch call with too many implementations is one scope
warning. The region fixture carries its expectations inline (`# GC101:11 @one-time`)."""
import json
import re
import shutil
import textwrap
from pathlib import Path

import pytest

from conftest import run_graphcheck as gc, write_pkg
from graphcheck import baseline as bl
from graphcheck.findings import Finding
from graphcheck.inventory import SCHEMA_PATH, merge
from graphcheck.report.render import render, summary_line
from graphcheck.result import Result, ResultError, classify
from graphcheck.static.regions import RegionError
from graphcheck.static.scanner import scan

FIXTURES = Path(__file__).with_name("fixtures")
_EXPECT = re.compile(r"\b(GC\d{3}):(\d+)(?:\s+@([a-z-]+))?")
CONFIG = dict(entry_points=["regions:Runner.forward"], per_step_entry_points=["regions:Runner.prepare"],
              allowed_contexts=["gpu_sync_allowed"], eager_only=["regions:Encoder"])


def _expected(path: Path) -> set:
    out = set()
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if "#" in line and not line.lstrip().startswith("#"):
            for code, col, region in _EXPECT.findall(line[line.index("#"):]):
                out.add((code, i, int(col), region or "captured"))
    return out


def _scan_fixture(tmp_path, **over):
    shutil.copy(FIXTURES / "regions.py", tmp_path / "regions.py")
    return scan([str(tmp_path)], root=tmp_path, cache=False, jobs=1, **{**CONFIG, **over})


def test_every_region_kind_on_the_fixture(tmp_path):
    want = _expected(FIXTURES / "regions.py")
    assert {r for *_, r in want} == {"captured", "per-step", "allowed", "one-time", "eager-only"}
    res = _scan_fixture(tmp_path)
    got = {(f.rule, f.line, f.col, f.region) for f in res.findings}
    assert got == want, f"missing {sorted(want - got)}, unexpected {sorted(got - want)}"
    assert res.unresolved == [] and res.warnings == []


def test_without_the_region_keys_only_what_the_source_says_remains(tmp_path):
    """No per-step entry point: prepare's own lines are out of scope; no allow-block or eager-only configured: those
    lines are captured. One-time branches and capture-only branches are read from the source alone."""
    res = _scan_fixture(tmp_path, per_step_entry_points=[], allowed_contexts=[], eager_only=[])
    got = {(f.rule, f.line, f.col): f.region for f in res.findings}
    src = (FIXTURES / "regions.py").read_text().splitlines()
    for code, line, col, region in _expected(FIXTURES / "regions.py"):
        text = src[line - 1]
        if region == "per-step":
            want = None                     # prepare and host_only, which only prepare calls, are not reached
        elif region == "allowed" or region == "eager-only" and "encoder" in src[line - 2]:
            want = "captured"
        else:
            want = region
        assert got.get((code, line, col)) == want, (line, text)


def test_unscoped_scan_keeps_the_line_regions(tmp_path):
    """--all-functions: no call graph, every def's own region (eager-only, once per key) and its blocks still count."""
    res = _scan_fixture(tmp_path, entry_points=[], per_step_entry_points=[])
    by_line = {f.line: f.region for f in res.findings}
    src = (FIXTURES / "regions.py").read_text().splitlines()
    assert by_line[next(i for i, s in enumerate(src, 1) if "self._cache[key] = x" in s)] == "one-time"
    assert by_line[next(i for i, s in enumerate(src, 1) if "def table(" in s) + 1] == "one-time"
    assert by_line[next(i for i, s in enumerate(src, 1) if "def helper_of_encoder" in s) + 1] == "captured"


def test_eager_only_that_names_nothing_is_an_error(tmp_path):
    shutil.copy(FIXTURES / "regions.py", tmp_path / "regions.py")
    for spec, why in (("nope.mod", "module 'nope.mod' is not among the scanned files"),
                      ("regions:NoSuch", "no function or class 'NoSuch' in module 'regions'")):
        with pytest.raises(RegionError, match=re.escape(why)):
            scan([str(tmp_path)], root=tmp_path, cache=False, jobs=1, **{**CONFIG, "eager_only": [spec]})


# ------------------------------------------------------------------------------------------------ fan-out

def _models(n: int, runner: str) -> dict:
    classes = "".join(f'''
        class M{i}(Base):
            def embed(self, x):
                return x.sum().item()
    ''' for i in range(n))
    return {"models.py": '''
        import torch

        class Base(torch.nn.Module):
            def embed(self, x):
                raise NotImplementedError
    ''' + classes, "runner.py": runner}


RUNNER = '''
    import torch
    from .models import Base, M0

    class Runner:
        model: Base

        def __init__(self, model: Base):
            self.model = model

        def step(self, x: torch.Tensor):
            a = self.model.embed(x)
            b = self.model.embed(x + 1)
            return a, b
'''


_pkg = write_pkg


def test_a_dispatch_to_more_implementations_than_the_limit_is_one_warning(tmp_path):
    root = _pkg(tmp_path, _models(9, RUNNER))
    res = scan([str(root / "pkg")], entry_points=["pkg.runner:Runner.step"], root=root, cache=False, jobs=1)
    assert res.findings == []                       # none of the ten implementations was pulled into scope
    assert [(fo["call"], fo["implementations"], fo["classes"], fo["sites"]) for fo in res.fanouts] == \
        [("self.model.embed()", 10, 10, 2)]
    assert len(res.warnings) == 1 and "fan-out: self.model.embed()" in res.warnings[0] and "1 other site" in res.warnings[0]
    report = res.scope_report()
    assert "1 fan-out call(s) not followed" in report and "    pkg/models.py:M8.embed" in report
    assert "fan-out call(s) not followed" in res.scope_line()
    # at the limit it is followed, as before: every implementation's finding, no warning
    res8 = scan([str(root / "pkg")], entry_points=["pkg.runner:Runner.step"], root=root, cache=False, jobs=1,
                fanout_limit=10)
    assert len(res8.findings) == 9 and res8.fanouts == [] and res8.warnings == []
    none = scan([str(root / "pkg")], entry_points=["pkg.runner:Runner.step"], root=root, cache=False, jobs=1,
                fanout_limit=0)
    assert len(none.findings) == 9 and none.fanouts == []


def test_a_constructor_narrows_the_annotated_base_class(tmp_path):
    runner = RUNNER.replace("self.model = model", "self.model = M0()")
    root = _pkg(tmp_path, _models(9, runner))
    res = scan([str(root / "pkg")], entry_points=["pkg.runner:Runner.step"], root=root, cache=False, jobs=1)
    assert res.fanouts == [] and res.warnings == []
    assert {(f.rule, f.function) for f in res.findings} == {("GC101", "M0.embed")}
    assert "pkg/models.py:M1.embed" not in res.scope


def test_fan_out_limit_and_region_keys_from_the_configuration(tmp_path):
    root = _pkg(tmp_path, _models(3, RUNNER))
    (root / "pyproject.toml").write_text('[tool.graphcheck]\npaths = ["pkg"]\nentry-points = ["pkg.runner:Runner.step"]\n'
                                         'fan-out-limit = 2\n')
    r = gc(root, "scan", "--output-format", "json", "--show-scope")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["findings"] == [], r.stdout + r.stderr
    assert [fo["classes"] for fo in doc["layers"]["static"]["fan_out"]] == [4]
    assert "pkg/models.py:M2.embed" in r.stderr and "fan-out" in doc["layers"]["static"]["scope_warnings"][0]
    full = gc(root, "scan")
    assert "warning: fan-out: self.model.embed()" in full.stdout and "All checks passed" not in full.stdout


@pytest.mark.parametrize("key,value,fragment", [
    ("fan-out-limit", "-1", "fan-out-limit must be a non-negative integer, found -1"),
    ("fan-out-limit", '"8"', "fan-out-limit must be a non-negative integer, found '8'"),
    ("eager-only", '["a:b:c"]', "eager-only: expected 'pkg.mod', 'pkg.mod:Class' or 'pkg.mod:Class.method', found 'a:b:c'"),
    ("eager-only", '["pkg.nope"]', "eager-only 'pkg.nope': module 'pkg.nope' is not among the scanned files"),
    ("allowed-sync-contexts", '[""]', "allowed-sync-contexts: expected a context manager's name"),
    ("allowed-sync-contexts", '"gpu_sync_allowed"', "allowed-sync-contexts must be a list of strings"),
    ("per-step-entry-points", '["pkg.runner"]', "per-step-entry-points: expected 'pkg.mod:Class.method', found 'pkg.runner'"),
    ("per-step-entry-points", '["pkg.runner:Nope.step"]', "entry point 'pkg.runner:Nope.step': no function"),
])
def test_a_bad_region_key_is_one_line_and_exit_2(tmp_path, key, value, fragment):
    root = _pkg(tmp_path, _models(1, RUNNER))
    (root / "pyproject.toml").write_text(f'[tool.graphcheck]\npaths = ["pkg"]\nentry-points = ["pkg.runner:Runner.step"]\n'
                                         f'{key} = {value}\n')
    r = gc(root, "scan")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and fragment in r.stderr, r.stderr
    assert r.stderr.startswith("graphcheck: error: ") and "Traceback" not in r.stderr


# ------------------------------------------------------------------------------------------------ gate and reports

def _rows():
    return [Finding("GC101", "static", "a.py", 3, 4, "f", "`.item()` reads", "x.item()"),
            Finding("GC101", "static", "a.py", 5, 4, "g", "`.item()` reads", "y.item()", region="per-step"),
            Finding("GC102", "static", "a.py", 7, 4, "h", "`.tolist()` copies", "z.tolist()", region="one-time"),
            Finding("GC601", "static", "a.py", 9, 4, "k", "sync", "torch.cuda.synchronize()", region="allowed")]


def test_the_gate_counts_captured_and_per_step_rows_only():
    res = classify("scan", _rows(), None, layers={"static": {"files": 1, "findings": 4}})
    assert [res.status[f.fingerprint] for f in res.findings] == ["new", "new", "ungated", "ungated"]
    assert res.counts()["ungated"] == 2 and res.failed()
    assert res.by_region() == {"allowed": 1, "one-time": 1}
    concise = render(res, "concise")
    assert "a.py:7" not in concise and "a.py:9" not in concise and "a.py:5:5: GC101 `.item()` reads [per-step]" in concise
    assert "2 row(s) outside the gated regions (allowed 1, one-time 1; --show-all-regions lists them)" in concise
    shown = render(res, "concise", all_regions=True)
    assert "a.py:7:5: GC102 `.tolist()` copies [one-time] (not gated)" in shown and "a.py:9:5: GC601" in shown
    assert "--show-all-regions lists them" not in shown
    full = render(res, "full", all_regions=True)
    assert "[allowed] (not gated)" in full
    assert "one-time" not in render(res, "github") and "::notice " in render(res, "github", all_regions=True)
    sarif = json.loads(render(res, "sarif"))["runs"][0]["results"]
    assert [(r["properties"]["region"], r["level"]) for r in sarif] == [
        ("captured", "error"), ("per-step", "error"), ("one-time", "note"), ("allowed", "note")]
    assert "<td>one-time</td>" in render(res, "html")
    assert render(res, "concise", statistics=True).count("GC1") == 1     # GC101 twice; GC102 is not gated
    only_out = classify("scan", _rows()[2:], None, layers={"static": {"files": 1, "findings": 2}})
    assert not only_out.failed() and only_out.exit_code() == 0
    assert summary_line(only_out).startswith("All checks passed in 1 file(s); 2 row(s) outside the gated regions")


def test_inventory_round_trip_keeps_regions_and_the_verdict(tmp_path):
    res = classify("scan", _rows(), None, layers={"static": {"files": 1, "findings": 4}})
    doc = res.to_doc()
    assert doc["version"] == 3 and [f["region"] for f in doc["findings"]] == ["captured", "per-step", "one-time", "allowed"]
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, json.loads(SCHEMA_PATH.read_text()))
    back = Result.from_doc(json.loads(json.dumps(doc)))
    assert [(f.region, back.status[f.fingerprint]) for f in back.findings] == \
        [(f.region, res.status[f.fingerprint]) for f in res.findings]
    assert render(back, "concise", all_regions=True) == render(res, "concise", all_regions=True)
    # version 2 (no regions): every row is captured, as every row was counted then
    old = json.loads(json.dumps(doc))
    old["version"] = 2
    old["findings"] = [{k: v for k, v in f.items() if k != "region"} for f in old["findings"][:2]]
    assert [f.region for f in Result.from_doc(old).findings] == ["captured", "captured"]
    # a status that contradicts the region is a defect of the document, named
    bad = json.loads(json.dumps(doc))
    bad["findings"][2]["status"] = "new"
    with pytest.raises(ResultError, match=r"findings\[2\]: status 'new' with region 'one-time'"):
        Result.from_doc(bad)
    broken = json.loads(json.dumps(doc))
    broken["layers"]["static"]["fan_out"] = "self.model.embed()"
    with pytest.raises(ResultError, match="'layers.static.fan_out' must be a list of objects"):
        Result.from_doc(broken)
    bad["findings"][2]["region"] = "warm"
    with pytest.raises(ResultError, match="'region' must be one of captured, per-step, allowed, one-time, eager-only"):
        Result.from_doc(bad)


def test_the_baseline_adds_gated_rows_and_keeps_entries_of_rows_that_left_the_gate(tmp_path):
    res = classify("scan", _rows(), None)
    path = tmp_path / "b.json"
    kept, added, dropped = bl.write(path, res.findings, {}, "known")
    assert (kept, added, dropped) == (0, 2, 0)
    assert {e["rule"] for e in json.loads(path.read_text())["entries"]} == {"GC101"}
    # the per-step row moves into an allow-block: still found, so its entry stays and is not stale
    moved = _rows()
    moved[1].region = "allowed"
    old = bl.load(path)
    gate = classify("run", moved, old, baseline_name="b.json")
    assert not gate.failed()
    assert gate.counts()["accepted"] == 1 and gate.counts()["ungated"] == 3 and gate.stale == []
    assert bl.write(path, gate.findings, old, None) == (2, 0, 0)
    # back in a gated region: accepted as before, no reason asked
    again = classify("run", _rows(), bl.load(path), baseline_name="b.json")
    assert again.counts()["accepted"] == 2 and again.counts()["new"] == 0


def test_a_runtime_row_takes_the_region_the_static_layer_knows_for_its_line(tmp_path):
    res = _scan_fixture(tmp_path)
    src = (FIXTURES / "regions.py").read_text().splitlines()
    allowed_line = next(i for i, s in enumerate(src, 1) if "m = x.max().item()" in s)
    once_line = next(i for i, s in enumerate(src, 1) if "a = x.sum().item()" in s)
    plain_line = next(i for i, s in enumerate(src, 1) if "z = x.min().item()" in s)
    helper = next(i for i, s in enumerate(src, 1) if "def in_allow_block" in s) + 1
    static = [f for f in res.findings if f.line == helper]
    runtime = [Finding("GC108", "sync", "regions.py", allowed_line, 0, "Runner.forward", "cmp", count=2),
               Finding("GC108", "sync", "regions.py", once_line, 0, "Runner.forward", "cmp"),
               Finding("GC108", "sync", "regions.py", plain_line, 0, "Runner.forward", "cmp"),
               Finding("GC101", "sync", "regions.py", helper, 11, "in_allow_block", "item"),
               Finding("GC006", "capture", "elsewhere.py", 3, 0, "f", "raised")]
    rows = merge(static, runtime, res.regions.for_runtime)
    by = {(f.line, f.rule): f.region for f in rows}
    assert by[(allowed_line, "GC108")] == "allowed" and by[(once_line, "GC108")] == "one-time"
    assert by[(plain_line, "GC108")] == "captured" and by[(3, "GC006")] == "captured"
    # linked to the static row: the static region, which knows the helper runs inside the caller's allow-block
    assert [(f.rule, f.region, f.evidence["kinds"]) for f in rows if f.line == helper] == [("GC101", "allowed", ["static", "sync"])]
    assert all(f.region == "captured" for f in merge([], runtime[:3]))    # no static layer: the step is captured


def test_a_capture_row_is_captured_whatever_the_source_says_around_its_line(tmp_path):
    """The capture ran the step as one graph: a failure at a line inside an allow-block is still a failed capture,
    and the gate must count it (the static row it links to moves with it)."""
    res = _scan_fixture(tmp_path)
    src = (FIXTURES / "regions.py").read_text().splitlines()
    allowed_line = next(i for i, s in enumerate(src, 1) if "m = x.max().item()" in s)
    static = [f for f in res.findings if f.line == allowed_line]
    assert static and all(f.region == "allowed" for f in static)
    runtime = [Finding("GC001", "capture", "regions.py", allowed_line, 0, "Runner.forward", "capture failed")]
    rows = merge(static, runtime, res.regions.for_runtime)
    assert {f.region for f in rows if f.line == allowed_line} == {"captured"}
    alone = merge([], [Finding("GC001", "capture", "regions.py", allowed_line, 0, "Runner.forward", "failed")],
                  res.regions.for_runtime)
    assert [f.region for f in alone] == ["captured"]


def test_explain_regions_documents_every_region_and_key(tmp_path):
    r = gc(tmp_path, "explain", "regions")
    assert r.returncode == 0
    for word in ("captured", "per-step", "allowed", "one-time", "eager-only", "per-step-entry-points",
                 "allowed-sync-contexts", "eager-only =", "fan-out-limit", "--show-all-regions", "--show-scope"):
        assert word in r.stdout, word
    assert gc(tmp_path, "explain", "fan-out").stdout == r.stdout


@pytest.mark.slow
def test_run_report_and_baseline_end_to_end_with_an_allow_block(project):
    """The demo step's `int(self.pos)` inside a declared allow-block. The scan places the line `allowed`: the static
    gate passes, the summary counts it, `report --show-all-regions` lists it, and `graphcheck baseline` needs no entry
    for it. The capture runs the target's step as one graph, though, and the readback breaks it whatever block it
    sits in: in `run` the linked row is `captured` and fails the gate."""
    step = project / "demo" / "step.py"
    src = step.read_text()
    step.write_text("import contextlib\n" + src.replace(
        "        n = int(self.pos)\n", "        with sync_ok():\n            n = int(self.pos)\n").replace(
        "def make():", "@contextlib.contextmanager\ndef sync_ok():\n    yield\n\n\ndef make():"))
    cfg = project / "pyproject.toml"
    cfg.write_text(cfg.read_text() + 'allowed-sync-contexts = ["sync_ok"]\n')
    r = gc(project, "scan", "--output-format", "json", "-o", "scan.json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((project / "scan.json").read_text())
    row = next(f for f in doc["findings"] if f["rule"] == "GC104")
    assert (row["region"], row["status"]) == ("allowed", "ungated")
    assert all(f["status"] == "ungated" for f in doc["findings"]), doc["findings"]
    shown = gc(project, "report", "scan.json", "--output-format", "concise", "--show-all-regions")
    assert shown.returncode == 0 and "GC104 `int()` of a tensor reads it back to the host [allowed] (not gated)" in shown.stdout
    assert "GC104" not in gc(project, "report", "scan.json", "--output-format", "concise").stdout
    b = gc(project, "baseline", "--from", "scan.json")
    assert b.returncode == 0 and "0 kept, 0 added" in b.stdout, b.stdout + b.stderr
    # the whole run: the audit saw it and the capture failed there, so the row runs in the graph
    full = gc(project, "run", "--no-progress", "--output-format", "json", "-o", "inv.json")
    assert full.returncode == 1 and "FAILED" in full.stdout, full.stdout + full.stderr
    row = next(f for f in json.loads((project / "inv.json").read_text())["findings"] if f["rule"] == "GC104")
    assert (row["region"], row["status"]) == ("captured", "new") and "capture" in row["evidence"]["kinds"], row


def test_narrowing_keeps_what_a_class_variable_says(tmp_path):
    """The narrowing pass splits an attribute's entries into constructors and annotations; a class variable naming
    a class from outside the tree (`model_cls = ExternalModel`) must still make `self.model_cls(x)` external, not
    an unresolved call (an edit of that pass once dropped it silently)."""
    root = _pkg(tmp_path, {"m.py": '''
        import torch
        from outside import ExternalModel

        class Runner:
            model_cls = ExternalModel

            def step(self, x: torch.Tensor):
                return self.model_cls(x)
    '''})
    res = scan([str(root / "pkg")], entry_points=["pkg.m:Runner.step"], root=root, cache=False, jobs=1)
    assert res.unresolved == [] and res.warnings == []


def test_a_file_given_on_the_command_line_needs_no_eager_only_module(tmp_path):
    """`graphcheck scan one.py` (or a buffer on stdin) scans part of the project: an eager-only entry naming a
    module outside that part is no error there; scanning the configured paths, it is."""
    root = _pkg(tmp_path, _models(1, RUNNER))
    (root / "pyproject.toml").write_text('[tool.graphcheck]\npaths = ["pkg"]\neager-only = ["pkg.models"]\n')
    (root / "other.py").write_text("def f(x):\n    return x.sum().item()\n")
    one = gc(root, "scan", "other.py", "--output-format", "concise")
    assert one.returncode == 1 and "other.py:2:12: GC101" in one.stdout, one.stdout + one.stderr
    piped = gc(root, "scan", "-", "--stdin-filename", "other.py", "--output-format", "concise",
               stdin="def f(x):\n    return x.sum().item()\n")
    assert piped.returncode == 1 and "GC101" in piped.stdout, piped.stdout + piped.stderr
    (root / "pyproject.toml").write_text('[tool.graphcheck]\npaths = ["pkg"]\neager-only = ["pkg.nope"]\n')
    whole = gc(root, "scan")
    assert whole.returncode == 2 and "eager-only 'pkg.nope'" in whole.stderr, whole.stderr


def test_per_step_entry_points_alone_resolve_when_a_file_is_named(tmp_path):
    """Only per-step entry points configured: a staged file given on the command line (the pre-commit hook) is
    scanned with the configured paths, so the entry point resolves and the file's per-step rows are reported."""
    root = _pkg(tmp_path, {"runner.py": '''
        import torch
        from .helpers import count

        class Runner:
            def prepare(self, x: torch.Tensor):
                return count(x)
    ''', "helpers.py": '''
        def count(x):
            return x.sum().item()
    '''})
    (root / "pyproject.toml").write_text('[tool.graphcheck]\npaths = ["pkg"]\n'
                                         'per-step-entry-points = ["pkg.runner:Runner.prepare"]\n')
    r = gc(root, "scan", "pkg/helpers.py", "--output-format", "concise")
    assert r.returncode == 1 and "pkg/helpers.py:3:12: GC101" in r.stdout and "[per-step]" in r.stdout, r.stdout + r.stderr


def test_a_region_follows_only_the_calls_the_scope_followed(tmp_path):
    """`count` runs from the per-step `Runner.prepare`, and from M1.embed, a sibling override that the captured
    `Llama.forward` never runs (its `self.embed` is Llama's): the row is per-step. The region pass once walked every
    implementation of each call, so the sibling's edge made it captured."""
    root = _pkg(tmp_path, {"m.py": '''
        import torch

        def count(x):
            return x.sum().item()

        class Base(torch.nn.Module):
            def forward(self, x):
                return self.embed(x)

        class Llama(Base):
            def embed(self, x):
                return x * 2

        class M1(Base):
            def embed(self, x):
                return count(x)

        class Runner:
            def prepare(self, x: torch.Tensor):
                return count(x)
    '''})
    res = scan([str(root / "pkg")], entry_points=["pkg.m:Llama.forward"], per_step_entry_points=["pkg.m:Runner.prepare"],
               root=root, cache=False, jobs=1)
    assert [(f.rule, f.function, f.region) for f in res.findings] == [("GC101", "count", "per-step")]
