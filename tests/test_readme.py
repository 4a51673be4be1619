"""The README's sample output is a fresh run's output: `graphcheck run --baseline empty.json` on this repository,
compared after the timings (and the table width they set) are normalised away. When the model or graphcheck changes
what the run prints, regenerate the block with `python tests/test_readme.py --update` and read the diff."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
COMMAND = ["graphcheck", "run", "--baseline", "empty.json", "--no-progress"]   # the README's own words
START, END = "```text\n", "```"


def sample_block(text: str) -> tuple[int, int]:
    """(start, end) of the code block under "## Sample output"."""
    at = text.index(START, text.index("## Sample output")) + len(START)
    return at, text.index(END, at)


def fresh_run() -> str:
    assert not (ROOT / "empty.json").exists(), "empty.json exists at the repository root: the sample needs it missing"
    env = dict(os.environ, NO_COLOR="1", COLUMNS="120")
    r = subprocess.run([sys.executable, "-m", "graphcheck", *COMMAND[1:]], cwd=ROOT, capture_output=True, text=True,
                       env=env, timeout=900)
    assert r.returncode == 1 and r.stdout, r.stderr[-2000:]       # the reference decode's known hazards: FAILED
    return r.stdout


def normalise(text: str) -> str:
    text = re.sub(r"\b\d+\.\ds\b", "X.Xs", text)
    # a wider timing widens the table's last column: compare the table's cells, not its padding
    return "\n".join(re.sub(r"[ ━─]+", " ", ln).rstrip() if ln[:1] in "┏┃┡│└" else ln.rstrip()
                     for ln in text.splitlines())


@pytest.mark.slow
def test_readme_sample_output_is_a_fresh_run():
    text = README.read_text(encoding="utf-8")
    a, b = sample_block(text)
    assert normalise(text[a:b]) == normalise(fresh_run()), \
        "README.md's sample output differs from a fresh `graphcheck run --baseline empty.json`; regenerate it with " \
        "`python tests/test_readme.py --update`"


if __name__ == "__main__" and sys.argv[1:] == ["--update"]:
    text = README.read_text(encoding="utf-8")
    a, b = sample_block(text)
    README.write_text(text[:a] + fresh_run() + text[b:], encoding="utf-8")
    print(f"README.md: sample output regenerated from `{' '.join(COMMAND)}`")
