"""The rule catalogue: every rule has a fixture (`fixtures/GCnnn.py`) whose expected findings are written inline
as `# GCnnn:col` on the flagged line, with look-alike negatives marked `# ok: why`; codes are unique, docs are
complete, runtime signatures are owned by one rule each."""
import re
from pathlib import Path

import pytest

from graphcheck import rules
from graphcheck.rules import FAMILIES, RULES, runtime_signatures
from graphcheck.static.scanner import scan

FIXTURES = Path(__file__).with_name("fixtures")
_EXPECT = re.compile(r"\b(GC\d{3}):(\d+)\b")
# Codes no static fixture can show: the runtime layers' own findings, and a file that cannot be decoded at all
# (tested in test_scan.py::test_never_crashes_on_bad_files).
NO_FIXTURE = {c for c in RULES if c.startswith("GC0")} | {"GC904"}


def _expected(path: Path) -> tuple[set, set]:
    want, ok_lines = set(), set()
    for i, line in enumerate(path.read_text().splitlines(), 1):
        comment = line.split("#", 1)[1] if "#" in line else ""
        for code, col in _EXPECT.findall(line[line.find("#"):] if "#" in line else ""):
            want.add((code, i, int(col)))
        if re.search(r"#\s*ok:", line):
            ok_lines.add(i)
        del comment
    return want, ok_lines


def _scan(path: Path):
    return scan([str(path)], root=path.parent, cache=False, jobs=1).findings


@pytest.mark.parametrize("code", sorted(set(RULES) - NO_FIXTURE))
def test_fixture(code):
    path = FIXTURES / f"{code}.py"
    assert path.exists(), f"{code} has no fixture {path.name}"
    want, ok_lines = _expected(path)
    assert any(c == code for c, _, _ in want), f"{path.name} has no positive `# {code}:col` expectation"
    assert ok_lines, f"{path.name} has no look-alike negative marked `# ok: why`"
    got = {(f.rule, f.line, f.col) for f in _scan(path)}
    assert got == want, f"{path.name}: missing {sorted(want - got)}, unexpected {sorted(got - want)}"
    assert not {line for _, line, _ in got} & ok_lines


def test_every_fixture_names_a_rule():
    assert {p.stem for p in FIXTURES.glob("GC*.py")} == set(RULES) - NO_FIXTURE


def test_catalogue_is_complete_and_unique():
    codes = [m.RULE.code for m in rules.MODULES]
    assert len(codes) == len(set(codes))
    names = [r.name for r in RULES.values()]
    assert len(names) == len(set(names))
    for m in rules.MODULES:
        r = m.RULE
        assert m.__name__.rsplit(".", 1)[-1] == f"{r.code.lower()}_{r.name.replace('-', '_')}", "one rule per file, named for it"
        assert re.fullmatch(r"GC\d{3}", r.code) and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", r.name)
        for part in (r.message, r.hint, r.what, r.why, r.example, r.instead):
            assert part.strip(), f"{r.code} has an empty doc section"
        assert not r.message.endswith("."), f"{r.code}: messages have no final period"
        doc = r.doc()
        for section in ("## What it does", "## Why is this bad?", "## Example", "## Use instead"):
            assert section in doc
        assert isinstance(m.RUNTIME, tuple) and all(isinstance(s, str) for s in m.RUNTIME)
    assert sum(len(f.rules) for f in FAMILIES) == len(RULES)


def test_runtime_signatures_belong_to_one_rule_each():
    sig = runtime_signatures()
    assert sig["torch.Tensor.item"] == "GC101" and sig["aten::nonzero"] == "GC301"
    assert sig["torch.cuda.synchronize"] == "GC601" and sig["aten::_local_scalar_dense"] == "GC104"
    assert all(re.fullmatch(r"(aten::\w+|torch(\.\w+)+|numpy(\.\w+)+|cutlass(\.\w+)+)", name) for name in sig), sig
    assert len(sig) == sum(len(m.RUNTIME) for m in rules.MODULES)   # no name claimed twice


def test_static_rules_never_import_torch():
    import subprocess
    import sys
    code = ("import sys, graphcheck.static.scanner, graphcheck.rules; "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
