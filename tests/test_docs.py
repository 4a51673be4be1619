"""Documentation that cannot drift silently: every document a tracked file cites is in the repository (a design
note outside it, `CONTRACTS §2`, `design/gpu-facts.md`, was cited from the code and the README while no reader of
the repository could open it)."""
import re
import subprocess

from conftest import ROOT

# names that end in .md but are outputs a command writes, not documents cited
# files the scripts write, not documents: README's `thirdparty_verdicts.py --out table.md`, and the A/B table
# benchmarks/cutedsl.py writes into its output directory
OUTPUTS = {"table.md", "cutedsl-ab.md"}
CITE = re.compile(r"(?<![\w$/.{-])([\w][\w./-]*\.md)\b|\b(CONTRACTS)\b|\b(design/[\w-]+\.md)")
# a path into the tree (`benchmarks/h200.sh`, `benchmarks/results/h200-...-run4-*`); `rev:path` names a file of an
# earlier commit and is not checked
PATH = re.compile(r"(?<![\w$/.{<:-])((?:benchmarks|tests|graphcheck|dsv4_model|kernels|ci|\.ci)/[\w./*{},-]*[\w*}])")


def tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    # the measured logs quote what was on the screen then; they are records, not documentation
    # this file names what it forbids
    return [p for p in out if not p.startswith("benchmarks/results/") and not p.endswith((".json", ".patch"))
            and p != "tests/test_docs.py"]


def lines():
    """(path, line number, line) of every tracked text file."""
    for rel in tracked():
        try:
            text = (ROOT / rel).read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            yield rel, n, line


def test_every_cited_document_exists():
    missing = []
    for rel, n, line in lines():
        for m in CITE.finditer(line):
            name = next(g for g in m.groups() if g)
            if name in OUTPUTS or name.startswith("http"):
                continue
            here = (ROOT / rel).parent
            if not ((ROOT / name).exists() or (here / name).exists()):
                missing.append(f"{rel}:{n}: {name}")
    assert missing == [], "documents cited but not in the repository: " + "; ".join(missing)


def _exists(name: str, here) -> bool:
    if "{" in name:         # `run3{5,6,7}-*`
        head, alts, tail = re.match(r"(.*?)\{([^}]*)\}(.*)", name).groups()
        return all(_exists(head + a + tail, here) for a in alts.split(","))
    if "*" in name:
        return any(ROOT.glob(name))
    return any(p.exists() for p in (ROOT / name, here / name, ROOT / (name + ".py")))


# patterns a script fills in, not paths to open
TEMPLATES = {"benchmarks/results/scan_speed-DATE.txt", "benchmarks/results/h200", "graphcheck/v1", "kernels/op.py",
             "graphcheck/rules/gcNNN_name.py", "tests/graphcheck/fixtures/GCNNN.py"}


def test_every_cited_path_exists():
    """The README, BENCHMARKS.md, the run log and the code cite scripts, logs and modules by path: each must be in
    the tree (six session scripts were folded into benchmarks/h200.sh while BENCHMARKS.md still told readers to run
    them)."""
    missing = []
    for rel, n, line in lines():
        for m in PATH.finditer(line):
            name = m.group(1).rstrip(".,")
            if name not in TEMPLATES and not _exists(name, (ROOT / rel).parent):
                missing.append(f"{rel}:{n}: {name}")
    assert missing == [], "paths cited but not in the tree: " + "; ".join(missing)


def test_the_gpu_script_refuses_an_unknown_stage_before_running_any(tmp_path):
    """`bash benchmarks/h200.sh check bogus` on a device machine ran `check` (minutes of scarce device time) before
    it reached the typo; every stage named is now checked first, against STAGES, which must list every case."""
    script = (ROOT / "benchmarks/h200.sh").read_text()
    stages = set(re.search(r'^STAGES="([^"]+)"', script, re.M).group(1).split())
    cases = set(re.findall(r"^  ([a-z][a-z0-9-]*)\)", script, re.M))
    assert stages == cases, f"STAGES and the stage cases differ: {sorted(stages ^ cases)}"
    out = tmp_path / "out"
    r = subprocess.run(["bash", "benchmarks/h200.sh", "check", "bogus"], cwd=ROOT, capture_output=True, text=True,
                       env={"OUT": str(out), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert r.returncode == 2 and "unknown stage 'bogus'" in r.stderr, (r.returncode, r.stderr)
    assert not out.exists(), "the script wrote into OUT before it refused the stage"
