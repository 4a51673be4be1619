"""Where each value lives, across calls and rebindings (issue 35): each fixture under `fixtures/placement/` names
its entry point on its first line (`# entry: module:Qual`), may declare placement on the next ones
(`# host-resident: PATTERN ...`, `# host-field-markers: NAME ...`, standing for the `[tool.graphcheck]` keys), and
marks its expected findings inline as `# GCnnn:col`, with look-alike negatives marked `# ok: why`, as the rule
fixtures do."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from graphcheck.static.placement import Placement
from graphcheck.static.scanner import scan

PLACEMENT = Path(__file__).with_name("fixtures") / "placement"
_EXPECT = re.compile(r"\b(GC\d{3}):(\d+)\b")


def _expected(path: Path) -> tuple[str, set, set]:
    lines = path.read_text().splitlines()
    entry = re.fullmatch(r"# entry: (\S+)", lines[0])
    assert entry, f"{path.name}: the first line must be `# entry: module:Qual`"
    want, ok_lines = set(), set()
    for i, line in enumerate(lines[1:], 2):
        comment = line[line.find("#"):] if "#" in line else ""
        want.update((code, i, int(col)) for code, col in _EXPECT.findall(comment))
        if re.search(r"#\s*ok:", line):
            ok_lines.add(i)
    return entry.group(1), want, ok_lines


def _declared(path: Path) -> Placement:
    head = dict(re.findall(r"^# (host-resident|host-field-markers): (.*)$", path.read_text(), re.M))
    return Placement(tuple(head.get("host-resident", "").split()), tuple(head.get("host-field-markers", "").split()))


def scan_fixture(path: Path, **kw):
    entry, _, _ = _expected(path)
    return scan([str(path)], entry_points=[entry], root=path.parent, cache=False, jobs=1,
                placement=_declared(path), **kw).findings


@pytest.mark.parametrize("name", sorted(p.stem for p in PLACEMENT.glob("*.py")))
def test_placement_fixture(name):
    path = PLACEMENT / f"{name}.py"
    _, want, ok_lines = _expected(path)
    assert want and ok_lines, f"{path.name} needs a positive `# GCnnn:col` and a negative `# ok: why`"
    got = {(f.rule, f.line, f.col) for f in scan_fixture(path)}
    assert got == want, f"{path.name}: missing {sorted(want - got)}, unexpected {sorted(got - want)}"


def test_declared_placement_comes_from_the_config_and_keys_the_cache(tmp_path):
    """The `[tool.graphcheck]` keys reach the scan (through the CLI), and a cached summary made without them is
    not reused with them (what a file holds depends on the declarations)."""
    src = (PLACEMENT / "declared.py").read_text()
    (tmp_path / "declared.py").write_text(src)
    base = '[tool.graphcheck]\npaths = ["declared.py"]\nentry-points = ["declared:Runner.step"]\n'
    env = {"GRAPHCHECK_CACHE_DIR": str(tmp_path / "cache"), "PATH": "", "PYTHONPATH": ":".join(sys.path)}

    def lines(extra: str) -> set[int]:
        (tmp_path / "pyproject.toml").write_text(base + extra)
        out = subprocess.run([sys.executable, "-m", "graphcheck", "scan", "--output-format", "concise",
                              "--exit-zero"], cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
        return {int(ln.split(":")[1]) for ln in out.stdout.splitlines() if ": GC10" in ln}

    everything = lines("")
    declared = lines('host-resident = ["tok_ids", "staged_*", "*.seq_lens_host_view", "Batch.lens", '
                     '"Runner.positions"]\nhost-field-markers = ["keep_on_cpu"]\n')
    assert declared == {32, 36}, declared
    assert everything == declared | {29, 30, 31, 33, 34, 35, 38}, everything


@pytest.mark.parametrize("key, value, why", [
    ("host-resident", '["a.b.c"]', "expected NAME, *.ATTR or Class.ATTR"),
    ("host-resident", '["x y"]', "expected NAME, *.ATTR or Class.ATTR"),
    ("host-field-markers", '["keep-on-cpu"]', "expected a keyword name"),
    ("host-resident", '"input_ids_cpu"', "must be a list of strings"),
])
def test_a_malformed_declaration_is_one_line_naming_the_key(tmp_path, key, value, why):
    (tmp_path / "m.py").write_text("x = 1\n")
    (tmp_path / "pyproject.toml").write_text(f'[tool.graphcheck]\npaths = ["m.py"]\n{key} = {value}\n')
    out = subprocess.run([sys.executable, "-m", "graphcheck", "scan", "--no-cache"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert key in out.stderr and why in out.stderr, out.stderr
