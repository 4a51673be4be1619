pytest_plugins = ["pytester"]

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# One thread per process for the suite: on a loaded 2-core machine torch's default pool (one thread per core, OpenMP
# spin-waiting) in the test process and in every `graphcheck` / `python -m dsv4_model` subprocess made the suite
# 20+ minutes instead of ~3. The environment is set before torch is imported and inherited by subprocesses.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
import torch  # noqa: E402

torch.set_num_threads(1)

# A suite started in the background of a non-interactive shell (`pytest ... &`, a CI step's job control) inherits
# SIGINT ignored, and so does every child it starts: the Ctrl-C tests then see no interrupt at all (exit 1 instead of
# 130; a handler "restored" to SIG_IGN). Python's own handler here: it is reset to the default on exec, so the
# children start with the handler a terminal user has.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).with_name("data")


def pytest_collection_modifyitems(config, items):
    # the GPU reason first: where both apply, a slow GPU test is one CI cannot run either
    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason=_CUDA_SKIP)
        for item in items:
            if "cuda" in item.keywords:
                item.add_marker(skip)
    # The default run (`python -m pytest -q`) is bounded (issue 40: <= 5 min on a loaded 2-core machine): tests
    # marked `slow` are skipped, with their reason in the summary, and CI runs them in a second pass (`-m slow`).
    # Any `-m` expression decides for itself (`-m "slow or not slow"`: everything).
    if not config.option.markexpr:
        skip = pytest.mark.skip(reason=_SLOW_SKIP)
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip)


_CUDA_SKIP = "needs a CUDA GPU (torch.cuda.is_available() is False)"
_SLOW_SKIP = "slow: run by CI's second pass, `python -m pytest -q -m slow`"


def pytest_terminal_summary(terminalreporter):
    """Skips are never silent: every reason but "no GPU" is listed with its count (the corpus not fetched, triton
    missing, ...), since CI runs those tests. `-rs` lists each one."""
    from collections import Counter
    reasons = Counter()
    for rep in terminalreporter.stats.get("skipped", []):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    gpu = reasons.pop(_CUDA_SKIP, 0)
    if reasons:
        terminalreporter.write_sep("-", "skipped here, run in CI")
        for reason, n in reasons.most_common():
            terminalreporter.write_line(f"{n:4d} skipped: {reason}")
    if gpu:
        terminalreporter.write_line(f"{gpu:4d} skipped: no CUDA GPU (the GPU run: benchmarks/h200.sh)")


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    # the scanner's per-file cache and the tiny checkpoint are per-session, never the user's
    monkeypatch.setenv("GRAPHCHECK_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "gc-cache"))
    monkeypatch.setenv("DSV4_CACHE_DIR", os.environ.get("DSV4_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "dsv4-cache")))


def write_pkg(tmp_path: Path, files: dict[str, str]) -> Path:
    """A package `pkg/` under tmp_path holding `files` (name -> dedented source); returns tmp_path, its root."""
    d = tmp_path / "pkg"
    d.mkdir()
    (d / "__init__.py").write_text("")
    for name, src in files.items():
        (d / name).write_text(textwrap.dedent(src))
    return tmp_path


def scan_source(tmp_path: Path, src: str, name: str = "mod.py", entry_points=None, **kw):
    from graphcheck.static.scanner import scan
    p = tmp_path / name
    p.write_text(textwrap.dedent(src))
    return scan([str(p)], entry_points=entry_points, root=tmp_path, cache=False, jobs=1, **kw).findings


@pytest.fixture
def scan_src(tmp_path):
    def run(src, **kw):
        return scan_source(tmp_path, src, **kw)
    return run


# A two-step demo project with one host sync (`int(self.pos)`): the subject of the `graphcheck` command-line tests.
PROJECT = """
[project]
name = "demo"
version = "0"

[tool.graphcheck]
paths = ["demo"]
entry-points = ["demo.step:Step.__call__"]
targets = ["demo.step:make"]
steps = 2
"""
STEP = '''
import torch
from graphcheck import Target


class Step:
    def __init__(self):
        self.cache = torch.zeros(4, 3)
        self.pos = torch.zeros((), dtype=torch.long)

    def __call__(self, x: torch.Tensor):
        self.cache.index_copy_(0, self.pos.view(1) % 4, x.view(1, 3))
        self.pos += 1
        n = int(self.pos)
        return self.cache.sum(0) * 2


def make():
    s = Step()
    return Target(step=s, make_inputs=lambda k: torch.full((3,), float(k)),
                  state=lambda: {"cache": s.cache, "pos": s.pos}, name="demo")
'''


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PROJECT)
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "__init__.py").write_text("")
    (tmp_path / "demo" / "step.py").write_text(STEP)
    return tmp_path


def load_benchmark(stem: str, name: str | None = None):
    """A script of benchmarks/ (not a package) loaded as a module, e.g. `load_benchmark("decode")` for its functions;
    benchmarks/ on sys.path as when the script runs (its helpers, e.g. graph_timing, import by name)."""
    import importlib.util
    import sys
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name or stem, ROOT / "benchmarks" / f"{stem}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def triton_interpreter_env(**extra) -> dict:
    """The environment of a subprocess that runs Triton kernels' logic on CPU (TRITON_INTERPRET=1: it must be set
    before triton.jit runs). Skips where the interpreter cannot run: triton missing, or triton <= 3.6 with numpy >= 2.4
    (its interpreter converts 1-element arrays with int(), which numpy 2.4 refuses; CI pins numpy < 2.4)."""
    import pytest
    triton = pytest.importorskip("triton")
    import numpy
    ver = lambda v: tuple(int(p) for p in v.split("+")[0].split(".")[:2])   # noqa: E731
    if ver(numpy.__version__) >= (2, 4) and ver(triton.__version__) <= (3, 6):
        pytest.skip(f"triton {triton.__version__}'s interpreter fails under numpy {numpy.__version__} (needs < 2.4)")
    return {**os.environ, "TRITON_INTERPRET": "1", **extra}


def graphcheck_env(cwd, **extra):
    """The environment of a `graphcheck` subprocess: this checkout and the project in `cwd` importable."""
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{cwd}", **extra}


def run_graphcheck(cwd, *args, stdin=None, env=None, timeout=300):
    """`python -m graphcheck ARGS` in `cwd`; the CompletedProcess carries returncode, stdout and stderr. The commands
    that run a target import torch, about 1.3 s of CPU per process and most of the suite's command-line time on a
    loaded machine (issue 40): they run in a process forked from a server that imported torch once (``_Forks``), a
    fresh process each with the command line, directory, environment and streams `python -m graphcheck` would get."""
    env = env or graphcheck_env(cwd)
    if args and args[0] in ("audit", "capture", "run", "baseline") and "--no-runtime" not in args:
        return _FORKS.run(cwd, args, stdin, env, timeout)
    return subprocess.run([sys.executable, "-m", "graphcheck", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, input=stdin, timeout=timeout)


# The server: it imports torch and graphcheck, then for each request (a JSON line: directory, arguments, environment,
# the files for the three streams) forks a child that sets up what `python -m graphcheck ARGS` in that directory would
# have (sys.path[0] the directory, then PYTHONPATH; the environment; fds 0-2; sys.argv) and runs the package as
# __main__; the server answers with the child's exit status (a signal as -N, as subprocess reports it). It never runs
# torch itself, so it has no thread pool for a fork to break.
_SERVER = r"""
import json, os, runpy, sys, traceback
import torch, graphcheck.cli  # noqa: F401
base = list(sys.path)
req_fd, ans_fd = int(sys.argv[1]), int(sys.argv[2])
requests = os.fdopen(req_fd, "r")
answers = os.fdopen(ans_fd, "w")
for line in requests:
    r = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            requests.close(); answers.close()
            for fd, path, mode in ((0, r["stdin"], os.O_RDONLY), (1, r["stdout"], os.O_WRONLY), (2, r["stderr"], os.O_WRONLY)):
                f = os.open(path, mode)
                os.dup2(f, fd)
                os.close(f)
            os.chdir(r["cwd"])
            os.environ.clear()
            os.environ.update(r["env"])
            extra = [p for p in r["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
            sys.path[:] = [r["cwd"], *extra, *[p for p in base if p not in extra]]
            sys.argv = ["graphcheck", *r["args"]]
            code = 0
            try:
                runpy.run_module("graphcheck", run_name="__main__", alter_sys=True)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else (print(e.code, file=sys.stderr) or 1))
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stdout.flush(); sys.stderr.flush()
        finally:
            os._exit(locals().get("code", 1))
    _, status = os.waitpid(pid, 0)
    answers.write(f"{os.waitstatus_to_exitcode(status)}\n")
    answers.flush()
"""


class _Forks:
    def __init__(self):
        self.proc = None

    def _start(self):
        import tempfile
        req_r, req_w = os.pipe()
        ans_r, ans_w = os.pipe()
        # The server's file is named runpy.py: it stands in for `python -m`'s runpy, whose frames graphcheck's
        # attribution leaves out by name, so a finding's evidence stack is the one `python -m graphcheck` records
        # (`-P`: its directory is not put on sys.path, where it would shadow the real runpy)
        self.dir = tempfile.TemporaryDirectory(prefix="graphcheck-forks-")
        script = os.path.join(self.dir.name, "runpy.py")
        with open(script, "w") as f:
            f.write(_SERVER)
        # a session of its own: its forked children share its process group, so a timeout can kill them with it
        self.proc = subprocess.Popen([sys.executable, "-P", script, str(req_r), str(ans_w)], pass_fds=(req_r, ans_w),
                                     stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                     start_new_session=True)
        os.close(req_r)
        os.close(ans_w)
        self.requests, self.answers = os.fdopen(req_w, "w"), os.fdopen(ans_r, "r")

    def run(self, cwd, args, stdin, env, timeout):
        import json
        import select
        import signal
        import tempfile
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        with tempfile.TemporaryDirectory() as d:
            paths = {k: os.path.join(d, k) for k in ("stdin", "stdout", "stderr")}
            for k, path in paths.items():
                with open(path, "w") as f:
                    f.write(stdin or "" if k == "stdin" else "")
            self.requests.write(json.dumps({"cwd": str(cwd), "args": [str(a) for a in args], "env": dict(env),
                                            **paths}) + "\n")
            self.requests.flush()
            if not select.select([self.answers], [], [], timeout)[0]:
                # the server and the hung child: a fork outlives its parent, so the whole process group
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                self.dir.cleanup()
                self.proc = None
                raise subprocess.TimeoutExpired(["graphcheck", *args], timeout)
            code = int(self.answers.readline())
            out, err = (open(paths[k], errors="replace").read() for k in ("stdout", "stderr"))
        return subprocess.CompletedProcess(["graphcheck", *args], code, out, err)

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.requests.close()
            self.proc.wait(timeout=30)
            self.dir.cleanup()


_FORKS = _Forks()


@pytest.fixture(scope="session", autouse=True)
def _fork_server():
    yield
    _FORKS.close()
