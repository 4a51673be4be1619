"""Static scan speed against the honest floor: a bare `ast.parse` loop over the same files in a fresh interpreter
that imported nothing else (`python -S`: no site, no torch, no graphcheck).

    python benchmarks/scan_speed.py [--jobs 2] [--serving DIR] [--rounds 2] [--before CHECKOUT] [--visit]
                                    [--output-format concise|full]
                                    [--out benchmarks/results/scan_speed-DATE.txt]

Measures, each in its own child process started from a directory with no pyproject (so no configuration applies):
- torch's installed package (found without importing torch): the floor, then the CLI's cold scan
  `graphcheck scan TORCH_DIR --no-cache --jobs N`;
- with --serving (a serving package tree, e.g. flashinfer's ~3,600 files that benchmarks/static_serving.sh
  extracts): its floor, then `graphcheck scan DIR --all-functions --no-cache --jobs N`.
Each CLI time is the child's whole wall time (interpreter start, discovery, the workers, the cross-file pass and
writing the report to /dev/null); the floor is the parse loop's own time inside its child (its interpreter start
is not counted, which only favours the floor). Rounds alternate floor and scan; the best of each is reported, with
every round's numbers and the load average (other processes share the cores: compare ratios of the same round).
--before CHECKOUT (another checkout of this repository, e.g. `git worktree add /tmp/before main`) also times that
checkout's CLI in every round, right after this one's, so a change is judged against its base under the same load.
--visit also times, in the same kind of bare child, one Python-level visit of every node of each parsed tree (each
node's fields read, its child nodes pushed on a stack, nothing else): the least any analysis written in Python over
the `ast` objects does beyond the parse. With N jobs the CLI's wall time is at least (parse + per-file work) / N
plus the serial part; the report prints what per-file work a ratio of 1.0 leaves, against that one visit.
The parent imports neither torch nor graphcheck.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the floor's child: the interpreter with no site module, then ast alone, over the list of files in argv[1]
FLOOR = r"""
import ast, sys, time
files = open(sys.argv[1]).read().split("\0")
t0 = time.perf_counter()
for f in files:
    try:
        with open(f, "rb") as fh:
            ast.parse(fh.read(), f)
    except (SyntaxError, ValueError):
        pass
print(time.perf_counter() - t0)
"""
# --visit's child: the same parse loop, then one bare visit of every node of each tree; prints both sums
VISIT = r"""
import ast, sys, time
files = open(sys.argv[1]).read().split("\0")
AST = ast.AST
parse = visit = 0.0
nodes = 0
for f in files:
    t0 = time.perf_counter()
    try:
        with open(f, "rb") as fh:
            tree = ast.parse(fh.read(), f)
    except (SyntaxError, ValueError):
        continue
    t1 = time.perf_counter()
    stack = [tree]
    while stack:
        node = stack.pop()
        nodes += 1
        for name in node._fields:
            v = getattr(node, name, None)
            if type(v) is list:
                stack.extend(c for c in v if isinstance(c, AST))
            elif isinstance(v, AST):
                stack.append(v)
    t2 = time.perf_counter()
    parse += t1 - t0
    visit += t2 - t1
print(parse, visit, nodes)
"""
# the same discovery as the scan (.gitignore, default excludes), in a child so that this process stays bare
LIST = r"""
import sys
from pathlib import Path
from graphcheck.static.scanner import discover
files, _ = discover([sys.argv[1]], root=Path(sys.argv[1]))
open(sys.argv[2], "w").write("\0".join(str(f) for f in files))
print(len(files))
"""


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _env(root: Path = ROOT) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("GRAPHCHECK_CACHE_DIR", None)
    return env


def _files(top: Path, tmp: str) -> tuple[str, int]:
    lst = os.path.join(tmp, f"files-{top.name}.txt")
    out = subprocess.run([sys.executable, "-c", LIST, str(top), lst], env=_env(), cwd=tmp, check=True,
                         capture_output=True, text=True)
    return lst, int(out.stdout)


def _floor(lst: str, tmp: str) -> tuple[float, float]:
    c0 = _children_cpu()
    out = subprocess.run([sys.executable, "-S", "-c", FLOOR, lst], cwd=tmp, check=True, capture_output=True,
                         text=True, env={"PATH": os.environ.get("PATH", "")})
    return float(out.stdout), _children_cpu() - c0


def _visit(lst: str, tmp: str) -> tuple[float, float, int]:
    out = subprocess.run([sys.executable, "-S", "-c", VISIT, lst], cwd=tmp, check=True, capture_output=True,
                         text=True, env={"PATH": os.environ.get("PATH", "")})
    parse, visit, nodes = out.stdout.split()
    return float(parse), float(visit), int(nodes)


def _cli(top: Path, jobs: int, extra: list[str], tmp: str, root: Path = ROOT,
         fmt: str = "concise") -> tuple[float, float, int]:
    # an empty [tool.graphcheck] table of its own: a tree under a project (torch in this checkout's venv) would
    # otherwise take that project's configuration (entry points, excludes), found upward from the path
    config = os.path.join(tmp, "pyproject.toml")
    Path(config).write_text("[tool.graphcheck]\n")
    cmd = [sys.executable, "-m", "graphcheck", "scan", str(top), "--config", config, "--no-cache", "--jobs", str(jobs),
           "--output-format", fmt, "--exit-zero", *extra]
    c0, w0 = _children_cpu(), time.perf_counter()
    out = subprocess.run(cmd, cwd=tmp, env=_env(root), capture_output=True, text=True)
    wall, cpu = time.perf_counter() - w0, _children_cpu() - c0
    # exit 2 with --exit-zero: a file that cannot be parsed (torch ships one in Python 3.12 syntax), reported
    if out.returncode not in (0, 2) or out.returncode == 2 and "GC903" not in out.stderr:
        raise SystemExit(f"scan_speed: {' '.join(cmd)} exited {out.returncode}: {out.stderr.strip()[-400:]}")
    return wall, cpu, sum(1 for ln in out.stdout.splitlines() if ": GC" in ln)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--serving", default=None, help="a serving package tree to scan with --all-functions")
    ap.add_argument("--out", default=None, help="also write this report to a file")
    ap.add_argument("--before", default=None, help="another checkout whose CLI is timed in the same rounds")
    ap.add_argument("--visit", action="store_true", help="also time one bare visit of every node after each parse")
    ap.add_argument("--output-format", default="concise", choices=("concise", "full"),
                    help="the report the CLI prints (full: what `graphcheck scan` prints by default, rows laid out)")
    a = ap.parse_args()
    before = Path(a.before).resolve() if a.before else None
    if before is not None and not (before / "graphcheck" / "__main__.py").is_file():
        print(f"scan_speed: --before {a.before}: expected a checkout with graphcheck/__main__.py, found none",
              file=sys.stderr)
        return 2
    spec = importlib.util.find_spec("torch")          # where torch is installed, without importing it
    if spec is None or not spec.submodule_search_locations:
        print("scan_speed: torch is not installed in this interpreter (its package tree is the corpus)", file=sys.stderr)
        return 2
    trees = [("torch", Path(list(spec.submodule_search_locations)[0]), [])]
    if a.serving:
        top = Path(a.serving)
        if not top.is_dir():
            print(f"scan_speed: --serving {a.serving}: expected a directory of Python sources, found none",
                  file=sys.stderr)
            return 2
        trees.append((f"serving tree {top.name}", top, ["--all-functions"]))
    lines = [
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; python benchmarks/scan_speed.py "
        f"--jobs {a.jobs} --rounds {a.rounds}" + (f" --serving {a.serving}" if a.serving else "")
        + (f" --before {a.before}" if a.before else "") + (" --visit" if a.visit else "")
        + (f" --output-format {a.output_format}" if a.output_format != "concise" else ""),
        f"torch {importlib.metadata.version('torch')}, Python {platform.python_version()}, {os.cpu_count()} cores, "
        f"load average at the start {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for name, top, extra in trees:
            lst, n = _files(top, tmp)
            lines.append(f"\n{name}: {top} ({n} files)")
            # CPU: the floor child's, and the CLI's with its workers; their ratio does not move with the load
            lines.append(f"  {'round':<6}{'floor wall':>11}{'floor CPU':>10}{'CLI wall':>10}{'CLI CPU':>9}"
                         f"{'wall/floor':>12}{'CPU/floor':>11}{'findings':>10}{'load':>7}")
            best_f, best_s = float("inf"), float("inf")
            for r in range(a.rounds):
                f_wall, f_cpu = _floor(lst, tmp)
                s_wall, s_cpu, found = _cli(top, a.jobs, extra, tmp, fmt=a.output_format)
                best_f, best_s = min(best_f, f_wall), min(best_s, s_wall)
                lines.append(f"  {r + 1:<6}{f_wall:>10.2f}s{f_cpu:>9.2f}s{s_wall:>9.2f}s{s_cpu:>8.2f}s"
                             f"{s_wall / f_wall:>11.2f}x{s_cpu / f_cpu:>10.2f}x{found:>10}{os.getloadavg()[0]:>7.2f}")
                if before is not None:
                    b_wall, b_cpu, b_found = _cli(top, a.jobs, extra, tmp, before, a.output_format)
                    lines.append(f"  {'before':<6}{'':>21}{b_wall:>9.2f}s{b_cpu:>8.2f}s{b_wall / f_wall:>11.2f}x"
                                 f"{b_cpu / f_cpu:>10.2f}x{b_found:>10}{os.getloadavg()[0]:>7.2f}")
            fmt = "" if a.output_format == "concise" else f" --output-format {a.output_format}"
            lines.append(f"  best: floor {best_f:.2f}s, `graphcheck scan {' '.join([*extra, '--no-cache'])}{fmt} "
                         f"--jobs {a.jobs}` {best_s:.2f}s = {best_s / best_f:.2f}x the floor")
            if a.visit:
                parse, visit, nodes = _visit(lst, tmp)
                # 1.0x the floor with N jobs: N x floor of CPU for everything, the parse included (serial part and
                # interpreter start not even counted)
                room = a.jobs * best_f - parse
                lines.append(f"  one bare visit of every node ({nodes} nodes): {visit:.2f}s = {visit / parse:.2f}x the parse "
                             f"({parse:.2f}s in the same child); 1.0x the floor with {a.jobs} jobs leaves at most "
                             f"{room:.2f}s = {room / parse:.2f}x the parse for all per-file work beyond it")
    lines.append(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
