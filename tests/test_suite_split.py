"""The README's test command and CI skip nothing between them (issue 40): the default run skips the tests marked
`slow`, each counted with its reason at the end; any `-m` expression selects for itself; CI runs the README's
command and then `-m slow`, and the README says so."""
from types import SimpleNamespace

import conftest
import pytest
from conftest import ROOT


class _Item:
    def __init__(self, *marks):
        self.keywords, self.added = set(marks), []

    def add_marker(self, mark):
        self.added.append(mark)

    def skip_reasons(self):
        return [m.kwargs["reason"] for m in self.added if m.name == "skip"]


@pytest.mark.parametrize("markexpr,skipped", [("", True), ("slow", False), ("not slow", False),
                                              ("slow or not slow", False)])
def test_slow_tests_are_skipped_with_a_reason_only_without_m(markexpr, skipped):
    slow, plain = _Item("slow"), _Item()
    conftest.pytest_collection_modifyitems(SimpleNamespace(option=SimpleNamespace(markexpr=markexpr)), [slow, plain])
    assert (conftest._SLOW_SKIP in slow.skip_reasons()) == skipped, slow.skip_reasons()
    assert conftest._SLOW_SKIP not in plain.skip_reasons()
    assert "-m slow" in conftest._SLOW_SKIP          # the summary line says how to run them


def test_ci_runs_the_readme_command_then_the_slow_tests():
    runs = [ln.split("#")[0].strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()
            if ln.startswith("python -m pytest")]
    assert runs == ["python -m pytest -q", "python -m pytest -q -m slow"], runs
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "&& python -m pytest -q\n" in readme and "`python -m pytest -q -m slow`" in readme


@pytest.mark.slow    # ~6 s of CPU (a fresh `graphcheck run` beside the forked one): CI's second pass
def test_forked_commands_are_what_python_m_graphcheck_gives(project):
    """The runtime commands run forked from a server that imported torch once (conftest._Forks, issue 40's bound):
    `run` there gives what a fresh `python -m graphcheck run` gives, exit code, findings and their evidence stacks
    (every layer ran the step: its directory, import path and the runpy frames a stack leaves out are the same)."""
    import subprocess
    import sys
    from conftest import graphcheck_env
    args = ("run", "--output-format", "json")
    forked = conftest.run_graphcheck(project, *args)
    fresh = subprocess.run([sys.executable, "-m", "graphcheck", *args], cwd=project, capture_output=True, text=True,
                           env=graphcheck_env(project), timeout=300)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert fresh.returncode == 1 and '"stack"' in fresh.stdout
