"""The static layer: scope, suppressions, robustness, formats, CLI exit codes."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import DATA, ROOT, scan_source
from graphcheck.cli import main
from graphcheck.static.scanner import scan

HOT = """
import torch
from .helpers import log_max

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Linear(4, 4)
        self.n = int(torch.ones(()).sum())      # load time: unreachable from the entry point

    def step(self, x: torch.Tensor):
        y = self.w(x)
        log_max(y)
        return self._finish(y)

    def _finish(self, y: torch.Tensor):
        return y * y.sum().item()

    def debug_dump(self, y: torch.Tensor):
        print(y)                                 # not called from step
"""
HELPERS = """
import torch

def log_max(t: torch.Tensor):
    return float(t.max())
"""


@pytest.fixture
def pkg(tmp_path):
    d = tmp_path / "pkg"
    d.mkdir()
    (d / "__init__.py").write_text("")
    (d / "model.py").write_text(textwrap.dedent(HOT))
    (d / "helpers.py").write_text(textwrap.dedent(HELPERS))
    return tmp_path


def test_scope_follows_entry_points(pkg):
    res = scan([str(pkg / "pkg")], entry_points=["pkg.model:Model.step"], root=pkg, cache=False, jobs=1)
    got = sorted((f.rule, f.path, f.function) for f in res.findings)
    assert ("GC101", "pkg/model.py", "Model._finish") in got        # self. method
    assert ("GC104", "pkg/helpers.py", "log_max") in got            # imported helper
    helper = next(f for f in res.findings if f.function == "log_max")
    # the call chain is evidence on the helper's finding, not a second finding at the call site
    assert [(c["function"], c["line"]) for c in helper.evidence["call_chain"]] == [("Model.step", 13)]
    assert not any(f.function == "Model.step" for f in res.findings)
    assert not any(fn in ("Model.__init__", "Model.debug_dump") for _, _, fn in got)
    everything = scan([str(pkg / "pkg")], root=pkg, cache=False, jobs=1)
    assert {f.function for f in everything.findings} >= {"Model.__init__", "Model.debug_dump"}


def test_capturable_decorator_marks_scope(scan_src):
    src = """
import torch
import graphcheck

@graphcheck.capturable
def hot(x: torch.Tensor):
    return x.item()

def cold(x: torch.Tensor):
    return x.item()
"""
    assert [(f.rule, f.function) for f in scan_src(src)] == [("GC101", "hot")]


def test_bad_entry_point_is_a_config_error(pkg, capsys):
    rc = main(["scan", str(pkg / "pkg"), "--entry-point", "pkg.model:Nope.step", "--no-cache"])
    assert rc == 2
    assert "Nope.step" in capsys.readouterr().err


def test_suppressions(scan_src):
    src = """
import torch
def f(x: torch.Tensor):
    a = x.item()  # graphcheck: ignore[GC101] -- read once per request, outside capture
    # graphcheck: ignore[GC101] -- line above form
    b = x.item()
    c = x.item()  # graphcheck: ignore[GC101]
    d = x + 1  # graphcheck: ignore[GC102] -- stale
    e = x.item()  # graphcheck: ignore[GC999] -- typo
    return a, b, c, d, e
"""
    got = sorted((f.rule, f.line) for f in scan_src(src))
    assert ("GC901", 7) in got and ("GC101", 7) in got   # a suppression without a reason does not suppress
    assert ("GC902", 8) in got            # matches nothing
    assert ("GC905", 9) in got and ("GC101", 9) in got


def test_noqa_as_ruff_reads_it(scan_src):
    """Case, other tools' codes in the same list (before or after ours), the reason after the list (issue 40)."""
    src = """
import torch
def f(x: torch.Tensor):
    a = x.item()  # noqa: E501, GC101 -- read once per request
    b = x.item()  # noqa: GC101, E501 -- read once per request
    c = x.item()  # NOQA: GC101 -- read once per request
    d = x.item()  # noqa:GC101 E501 -- read once per request
    e = x.item()  # type: ignore[attr-defined]  # noqa: GC101 -- read once per request
    g = x.item()  # noqa: E501
    h = x.item()  # noqa: E501, GC101
    i = x.item()  # Noqa: E501, GC999 -- typo
    return a, b, c, d, e, g, h, i
"""
    got = sorted((f.rule, f.line) for f in scan_src(src))
    assert got == [("GC101", 9), ("GC101", 10), ("GC101", 11), ("GC901", 10), ("GC905", 11)], got
    assert not any(r == "GC101" and ln in (4, 6) for r, ln in got)


def test_other_tools_noqa_does_not_tokenize_the_file(monkeypatch):
    """Only a line that could hold a suppression of ours (graphcheck, or noqa with a GC code) sends the file through
    the tokenizer (which tells a real comment from a string): torch's thousands of `# noqa: F401` made the
    suppression pass about an eighth of the analysis of its tree."""
    from graphcheck.static import suppressions
    calls = []
    real = suppressions._comments
    monkeypatch.setattr(suppressions, "_comments", lambda lines: calls.append(1) or real(lines))
    other = "import os  # noqa: F401\nimport sys  # NOQA: E402, F401\n"
    assert suppressions.parse_suppressions(other.splitlines()) == [] and calls == []
    ours = other + "x = 1  # noqa: gc101 -- lower case is ours too\n"
    assert [s["codes"] for s in suppressions.parse_suppressions(ours.splitlines())] == [["GC101"]] and calls == [1]


def test_never_crashes_on_bad_files(tmp_path):
    (tmp_path / "ok.py").write_text("import torch\ndef f(x: torch.Tensor):\n    return x.item()\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    (tmp_path / "latin.py").write_bytes(b"x = '\xff\xfe'\n")
    res = scan([str(tmp_path), str(tmp_path / "missing.py")], root=tmp_path, cache=False, jobs=2)
    got = {(f.rule, f.path) for f in res.findings}
    assert ("GC903", "broken.py") in got
    assert ("GC904", "latin.py") in got
    assert ("GC101", "ok.py") in got
    assert any(r == "GC904" and "missing.py" in p for r, p in got)


def test_collective_precheck_walks_text_it_cannot_read(tmp_path):
    """GC204 skips a function whose text names no collective; text it cannot read that way is walked instead: an
    identifier spelled in compatibility characters (the parser NFKC-normalises it) and lone carriage returns."""
    src = "import torch.distributed as dist\ndef f(x, rank: int):\n    if rank == 0:\n        dist.{}(x)\n"
    (tmp_path / "wide.py").write_text(src.format("\uff41ll_reduce"), encoding="utf-8")
    (tmp_path / "cr.py").write_bytes(src.format("all_reduce").replace("\n", "\r").encode())
    res = scan([str(tmp_path)], root=tmp_path, cache=False, jobs=1)
    assert sorted((f.rule, f.path, f.line) for f in res.findings) == [("GC204", "cr.py", 3), ("GC204", "wide.py", 3)]


def test_cache_reuses_results_and_notices_edits(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHCHECK_CACHE_DIR", str(tmp_path / "cache"))
    p = tmp_path / "m.py"
    p.write_text("import torch\ndef f(x: torch.Tensor):\n    return x.item()\n")
    first = scan([str(p)], root=tmp_path, cache=True, jobs=1)
    second = scan([str(p)], root=tmp_path, cache=True, jobs=1)
    assert second.cached == 1 and [f.rule for f in second.findings] == [f.rule for f in first.findings] == ["GC101"]
    p.write_text("import torch\ndef f(x: torch.Tensor):\n    return x.sum()\n")
    third = scan([str(p)], root=tmp_path, cache=True, jobs=1)
    assert third.cached == 0 and third.findings == []


def test_scan_leaves_its_summaries_to_reference_counting(tmp_path):
    """The summaries a scan returns are exempt from the cyclic collector (they hold no cycles): otherwise the
    report's first collections walk every node of them again (0.7 s after a scan of torch's tree). The collector
    stays on; a caller that had it off keeps it off and nothing is frozen."""
    import gc
    p = tmp_path / "m.py"
    p.write_text("import torch\ndef f(x: torch.Tensor):\n    return x.item()\n")
    was = gc.isenabled()
    try:
        gc.enable()
        gc.unfreeze()
        res = scan([str(p)], root=tmp_path, cache=False, jobs=1)
        assert gc.isenabled() and gc.get_freeze_count() > 0
        assert not any(gc.is_tracked(o) and o is res.summaries for g in (0, 1, 2) for o in gc.get_objects(g))
        gc.unfreeze()
        gc.disable()
        scan([str(p)], root=tmp_path, cache=False, jobs=1)
        assert not gc.isenabled() and gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
        (gc.enable if was else gc.disable)()


def _cli(tmp_path, *args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "graphcheck", *args], cwd=tmp_path, capture_output=True, text=True, env=env)


@pytest.fixture
def dirty(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\n")
    (tmp_path / "m.py").write_text("import torch\ndef f(x: torch.Tensor):\n    if x.any():\n        return x.item()\n")
    return tmp_path


def test_formats_and_exit_codes(dirty):
    r = _cli(dirty, "scan", "m.py", "--no-cache", "--format", "json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert {f["rule"] for f in doc["findings"]} == {"GC201", "GC101"}
    keys = {"rule", "kind", "path", "line", "col", "function", "message", "source", "fingerprint"}
    assert all(keys <= set(f) for f in doc["findings"])
    gh = _cli(dirty, "scan", "m.py", "--no-cache", "--format", "github").stdout
    assert "::error file=m.py,line=4," in gh
    text = _cli(dirty, "scan", "m.py", "--no-cache").stdout
    assert "GC101" in text and "x.item()" in text and "fix:" in text
    sel = _cli(dirty, "scan", "m.py", "--no-cache", "--format", "json", "--select", "GC2")
    assert {f["rule"] for f in json.loads(sel.stdout)["findings"]} == {"GC201"}
    ign = _cli(dirty, "scan", "m.py", "--no-cache", "--format", "json", "--ignore", "GC1,GC2")
    assert ign.returncode == 0 and json.loads(ign.stdout)["findings"] == []
    bad = _cli(dirty, "scan", "m.py", "--select", "GC999")
    assert bad.returncode == 2 and "GC999" in bad.stderr and bad.stderr.count("\n") == 1


def test_sarif_validates_against_the_2_1_0_schema(dirty):
    jsonschema = pytest.importorskip("jsonschema")
    r = _cli(dirty, "scan", "m.py", "--no-cache", "--format", "sarif")
    doc = json.loads(r.stdout)
    schema = json.loads((DATA / "sarif-schema-2.1.0-rtm.5.json").read_text())
    jsonschema.validate(doc, schema)
    res = doc["runs"][0]["results"]
    assert {x["ruleId"] for x in res} == {"GC101", "GC201"}
    assert res[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "m.py"


def test_unknown_config_key_names_the_key(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.graphcheck]\npaths=['.']\nentry_point=['a:b']\n")
    r = _cli(tmp_path, "scan")
    assert r.returncode == 2 and "'entry_point'" in r.stderr


def test_rules_and_explain(tmp_path):
    r = _cli(tmp_path, "rules")
    assert r.returncode == 0 and "GC101" in r.stdout and "GC801" in r.stdout
    e = _cli(tmp_path, "explain", "gc305")
    assert e.returncode == 0 and "## Why is this bad?" in e.stdout and "masked_fill" in e.stdout
    assert _cli(tmp_path, "explain", "GC000").returncode == 2


CORPUS = """
import torch
import torch.nn.functional as F


class Sampler:
    def __init__(self, vocab: int, device):
        self.temperature = torch.ones((), device=device)
        self.seen = torch.zeros(vocab, dtype=torch.bool, device=device)

    def __call__(self, logits: torch.Tensor, top_k: int):
        logits = logits / self.temperature.clamp_min(1e-5)
        logits = logits.masked_fill(self.seen, float("-inf"))
        vals, idx = logits.topk(top_k, dim=-1)
        probs = F.softmax(vals, dim=-1)
        choice = torch.multinomial(probs, 1)
        tok = idx.gather(-1, choice)
        if logits.shape[-1] > 32000:          # host int: fine
            tok = tok.clamp_max(logits.shape[-1] - 1)
        print(f"sampled {tok.shape}")          # shape: fine
        return tok, tok.item()                 # GC101


class Router(torch.nn.Module):
    def __init__(self, dim: int, n_experts: int, k: int):
        super().__init__()
        self.gate = torch.nn.Linear(dim, n_experts)
        self.k = k

    def forward(self, x: torch.Tensor):
        scores = self.gate(x).softmax(-1)
        w, idx = scores.topk(self.k, dim=-1)
        counts = torch.bincount(idx.flatten(), minlength=8)      # GC304
        busy = idx[counts[idx] > 4]                               # GC305
        return torch.where(w > 0.1, w, 0.0), idx, busy


class KVWriter:
    def __init__(self, cap: int, dim: int):
        self.k = torch.zeros(cap, dim)
        self.pos = torch.zeros((), dtype=torch.long)

    def write(self, kv: torch.Tensor):
        self.k.index_copy_(0, self.pos.view(1), kv)
        self.pos += 1
        n = int(self.pos)                                         # GC104
        return self.k[: n]
"""


def test_serving_corpus(scan_src):
    got = sorted((f.rule, f.function) for f in scan_src(CORPUS))
    assert got == sorted([("GC101", "Sampler.__call__"), ("GC304", "Router.forward"), ("GC305", "Router.forward"),
                          ("GC104", "KVWriter.write")])


@pytest.mark.slow
def test_scan_installed_torch_does_not_crash():
    import torch
    top = Path(torch.__file__).parent
    res = scan([str(top)], root=top, cache=False)
    assert res.files > 1500
    assert not any(f.rule == "GC903" for f in res.findings if not f.path.startswith("testing/") and "_vendor" not in f.path)
    by_rule = {}
    for f in res.findings:
        by_rule[f.rule] = by_rule.get(f.rule, 0) + 1
    # torch's own code reads back all over (it is not capture code): hundreds of .item(), a few thousand in all
    assert 100 < by_rule.get("GC101", 0) < 5000, by_rule
    assert len(res.findings) < 50 * res.files


def test_without_entry_points_an_untyped_parameter_is_unknown_not_host(scan_src):
    """With no entry points every function may be where a step starts: a parameter no resolved caller feeds is
    judged as an entry point's input is (likely on the device), as `--entry-point` judged the same file (issue 40).
    A resolved caller's argument still decides, and a Python default stays a setting."""
    src = """
import torch
import torch.nn.functional as F

def sample(logits, tok, greedy=True):
    if tok == 2:
        return 0
    if greedy:
        pass
    a = int(logits.argmax())
    b = float(F.softmax(logits, -1).max())
    return a, b

def bump(n):
    return 1 if n == 2 else 0

def user():
    return bump(3)
"""
    got = sorted((f.rule, f.line) for f in scan_src(src))
    assert got == [("GC104", 10), ("GC104", 11), ("GC201", 6)], got


def test_equality_with_a_dtype_a_class_or_a_string_is_a_host_bool(scan_src):
    """`tensor == torch.bfloat16`, `== cutlass.Float8E4M3FN`, `== "decode"`, `!= None` are Python's False or True
    (Tensor.__eq__ returns NotImplemented for them), never a tensor read back: with no entry points an untyped
    parameter compared with one is no device branch. Against a number, another input or a module's ALL_CAPS
    constant (which may be a number) it still is."""
    src = """
import torch
import numpy as np
import cutlass
import consts

def pick(dtype, x, mode, t):
    if dtype == torch.bfloat16:
        return 1
    if dtype != np.float32:
        return 2
    w = 2 if dtype == cutlass.Float8E4M3FN else 4
    if mode == "decode" or t != None:
        return w
    if x == 0:
        return 3
    if x == t:
        return 4
    if x == consts.LIMIT:
        return 5
"""
    got = sorted((f.rule, f.line) for f in scan_src(src))
    assert got == [("GC201", 15), ("GC201", 17), ("GC201", 19)], got


def test_a_caller_through_an_import_or_a_nested_def_decides_a_parameter(tmp_path):
    """The callers of a parameter are found through every name a call can resolve by: a module attribute of an
    import (`helpers.bump(3)`), a name imported from a module (`twice(3)`) and a def nested in the caller
    (`inner(3)`). Each passes a Python int, so none of their branches is a tensor's (the callers index leaves out
    only the calls whose head the file does not bind: `d.get(k)`, `len(x)`)."""
    d = tmp_path / "pkg"
    d.mkdir()
    (d / "__init__.py").write_text("")
    (d / "helpers.py").write_text(textwrap.dedent("""
        def bump(n):
            if n == 2:
                return 1
            return 0

        def twice(m):
            if m == 2:
                return 2
            return 0
    """))
    (d / "user.py").write_text(textwrap.dedent("""
        from . import helpers
        from .helpers import twice

        def user(d):
            def inner(k):
                if k == 2:
                    return 3
                return 0
            return helpers.bump(3) + twice(3) + inner(3) + len(d) + d.get(1)

        def unfed(j):
            if j == 2:
                return 4
            return 0
    """))
    res = scan([str(d)], root=tmp_path, cache=False, jobs=1)
    got = sorted((f.rule, f.path, f.function) for f in res.findings)
    # the one parameter no caller feeds stays what an entry point's input is: likely a tensor on the device
    assert got == [("GC201", "pkg/user.py", "unfed")], got


def test_kernel_bodies_are_not_read_as_the_steps_python(tmp_path):
    """The body of a `@triton.jit`, `@cute.jit` or `@cute.kernel` def (and of the defs nested in it) holds the DSL's
    values, not torch tensors: no host-sync rule reads it, whatever the import spells the decorator (`@ct.kernel`,
    `@kernel`, `functools.partial(cute.jit, ...)`, `@triton.autotune` over `@triton.jit`); cuTile's `@ct.kernel` and
    `@ct.function` (`cuda.tile`), Warp's `@wp.kernel` and `@wp.func` alike. Its calls still count as
    the callers of what they call (passing nothing known), so a helper only kernels call is not taken for an entry
    point fed the step's tensors: through a local instance, a local import, `self.x` typed by the kernel's own
    `self.x = C()`, and a property's setter run by `self.x.prop = a`. A call of a def nested in the kernel is no call of the module's def of that name. The same code
    in a plain def, under `@torch.jit.script` (TorchScript runs per call), under a bare `jit` the file binds itself
    (`jit = torch.compile`), under a decorator that only ends in 'jit' or under the package's own `warp` module
    (`from . import warp`) is the step's Python and is read."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "other.py").write_text(textwrap.dedent("""
        def imported(x):
            if x > 0:
                return 1
    """))
    (pkg / "mod.py").write_text(textwrap.dedent("""
        import functools
        import torch
        import triton
        import cutlass.cute as cute
        import cutlass.cute as ct
        from cutlass.cute import kernel
        import cuda.tile as tile
        import warp as wp
        from . import warp as localwarp
        from mylib import nojit

        jit = torch.compile

        class Role:
            def setup(self, dtype):
                if dtype > 0:
                    self.dtype = dtype

        class Store:
            def put(self, v):
                if v > 0:
                    return v

        def scale_of(cfg):
            if cfg > 0:
                return 2
            return 1

        class Cfg:
            @property
            def scale(self):
                return self._s

            @scale.setter
            def scale(self, v):
                if v > 0:
                    self._s = v

        def helper(b):
            if b > 0:
                return 1

        @triton.autotune(configs=[], key=["n"])
        @triton.jit
        def add_kernel(x, n, BLOCK):
            for off in range(0, n, BLOCK):
                if off > 0:
                    pass

        class Op:
            @cute.jit
            def __call__(self, a, cfg):
                from pkg.other import imported
                self.store = Store()
                self.cfg = Cfg()
                self.cfg.scale = a
                r = Role()
                r.setup(a)
                self.store.put(a)
                imported(a)
                s = scale_of(cfg)
                if a > 0:
                    def helper(b):
                        return b.item()
                    helper(a)
                return s

            @ct.kernel
            def k1(self, t):
                assert t > 0

        @kernel
        def k2(t):
            assert t > 0

        @functools.partial(cute.jit, preprocess=False)
        def k3(t):
            assert t > 0

        @tile.kernel
        def k4(a, b):
            m = tile.bid(0)
            if m > 0:
                n = b.item()

        @tile.function
        def k7(a: torch.Tensor):
            return a.item()

        @wp.kernel
        def k5(a):
            assert a > 0

        @wp.func
        def k6(a):
            assert a > 0

        @nojit
        def host(x: torch.Tensor):
            if x > 0:
                return x.item()

        @localwarp.kernel
        def local(x: torch.Tensor):
            return x.item()

        @torch.jit.script
        def scripted(x: torch.Tensor):
            assert x > 0

        @jit
        def compiled(x: torch.Tensor):
            assert x > 0

        def plain(x: torch.Tensor, n):
            for off in range(0, n, 4):
                if x > 0:
                    pass
    """))
    res = scan([str(pkg)], root=tmp_path, cache=False, jobs=1)
    got = sorted((f.rule, f.function) for f in res.findings)
    assert got == [("GC101", "host"), ("GC101", "local"), ("GC105", "plain"), ("GC107", "compiled"),
                   ("GC107", "scripted"), ("GC201", "helper"), ("GC201", "host"), ("GC201", "plain")], got


def test_engine_child_walk_is_the_standard_one_less_contexts_and_operators():
    """`children` (the engine's generic walks) yields what `ast.iter_child_nodes` does, in the same order, less
    the expression contexts and operators no walk looks at: over every node of the engine's and the rules' own sources and of
    syntax they lack (match, async, walrus, f-strings, star-args, decorators, slices)."""
    import ast
    from graphcheck.static.inference import children
    skip = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)
    extra = textwrap.dedent('''
        async def f(a, /, b=1, *c, d: int = 2, **e) -> "T":
            async with x as (y, *z):
                async for i in g(*a, **e):
                    match i:
                        case {"k": [1, *rest], **kw} if (n := len(rest)) > 0: print(f"{n!r:>{w}}", rest[1:2:3])
                        case P(x=0) | None: pass
                        case _: del a[0], b.c
            try:
                raise E from None
            except* (A, B) as err:
                global q
            return lambda *, k=0: [v async for v in w if v] or {1: 2, **m} or {s for s in t} or not -x @ y
        ''')
    trees = [ast.parse(extra)] + [ast.parse(p.read_text()) for d in ("static", "rules") for p in sorted((ROOT / "graphcheck" / d).glob("*.py"))]
    nodes = 0
    for tree in trees:
        for n in ast.walk(tree):
            nodes += 1
            assert children(n) == [c for c in ast.iter_child_nodes(n) if not isinstance(c, skip)], ast.dump(n)[:200]
    assert nodes > 20_000


def test_flow_walks_agree_with_a_whole_walk_of_each_statement():
    """The flow's per-statement walks (`_Walks`: a compound statement's bound names taken from its inner statements'
    own, each walked once; the reads as a list replayed on every flow run) give what one walk of the whole
    statement does: the same bound names, and the same Name loads and walrus rebindings in the same order, over
    every statement of the engine's and the rules' own sources and of syntax they lack."""
    import ast
    from graphcheck.static.inference import _SCOPES, _Walks, children

    def bound(st):                  # every name bound anywhere in the statement, outside nested scopes
        out, stack = set(), [st]
        while stack:
            n = stack.pop()
            if type(n) is ast.Name and type(n.ctx) is not ast.Load:
                out.add(n.id)
            elif type(n) is ast.ExceptHandler and n.name:
                out.add(n.name)
            if type(n) in _SCOPES and n is not st:
                if hasattr(n, "name"):
                    out.add(n.name)
                continue
            stack += children(n)
        return out

    def reads(node, out):           # a stack walk: Name loads, a walrus's value then its target, comprehension iters
        stack = [node]
        while stack:
            n = stack.pop()
            t = type(n)
            if t is ast.Name:
                if type(n.ctx) is ast.Load:
                    out.append(n)
            elif t is ast.NamedExpr:
                reads(n.value, out)
                out.append(n.target.id)
            elif t in _SCOPES:
                if t not in (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
                    stack.append(n.generators[0].iter)
            else:
                stack += children(n)
        return out

    extra = textwrap.dedent('''
        def f(a, b):
            for i in a:
                while (n := len(i)) > b:
                    try:
                        with g(i) as (h, *k):
                            if n:
                                x = [y for y in k if (z := y)]
                            else:
                                del a[0]
                    except E as err:
                        class C: pass
                        def inner(): global q
                    else:
                        import os.path as p
            return lambda *, k=0: x or z
        ''')
    trees = [ast.parse(extra)] + [ast.parse(p.read_text()) for d in ("static", "rules")
                                  for p in sorted((ROOT / "graphcheck" / d).glob("*.py"))]
    stmts = 0
    for tree in trees:
        walks = _Walks()
        for n in ast.walk(tree):
            if isinstance(n, ast.stmt):
                stmts += 1
                assert walks.bound(n) == bound(n), ast.dump(n)[:200]
                assert walks.reads(n) == reads(n, []), ast.dump(n)[:200]
    assert stmts > 4_000


def test_class_attribute_types_from_assignments_to_self():
    """What a class's attributes hold, from its methods' assignments to self (the scope follows calls through
    them): a constructed instance, one stored by key, a tuple's elements, a local that holds one, an annotated
    parameter, an append; assignments to locals add nothing."""
    from graphcheck.static.engine import analyse_text
    src = textwrap.dedent("""
        class M:
            def __init__(self, dec: Decoder, n):
                self.norm = Norm(n)
                self.experts[str(n)] = Expert(n)
                self.a, self.b = Alpha(), dec
                self.layers, self.count = make_layers(n, lambda i: Block(i))
                head = Head(n)
                self.head = head
                self.blocks.append(Block(n))
                self.total += Extra(n)
                local = Unused(n)
                other[n] = Unused(n)
    """)
    attrs = analyse_text(src)["classes"]["M"]["attrs"]
    assert attrs == {"norm": ["Norm"], "experts": ["Expert"], "a": ["Alpha"], "b": ["ann:Decoder"],
                     "layers": ["call:make_layers", "Block"], "count": ["call:make_layers", "Block"],
                     "head": ["Head"], "blocks": ["Block"], "total": ["Extra"]}, attrs


def test_text_prefilters_agree_with_what_they_stand_for():
    """The engine's cheap text tests answer as the slow ones they skip: `_says_global` as the `global`-statement
    expression, and a file `_may_suppress` rejects has no suppression (over the package's and the tests' sources,
    which hold suppressions, and edge cases)."""
    from graphcheck.static.engine import _GLOBAL_STMT, _says_global
    from graphcheck.static.suppressions import _may_suppress, parse_suppressions
    texts = [p.read_text() for d in ("graphcheck", "tests") for p in sorted((ROOT / d).rglob("*.py"))]
    texts += ["global x", "  global x\n", "x = 1; global y", "\tglobal\tz", "global", "globalx = 1", "# global x",
              "a\n global b", "a\r global b", "x = 'global y'", "y = 2  # GRAPHCHECK: ignore[GC101] why", "# NoQA: gc101",
              "x.item()  # noqa: GC101 reason", "x = 1  # noqa: F401"]
    assert sum(_says_global(t) for t in texts) > 3 and sum(not _may_suppress(t) for t in texts) > 10
    for t in texts:
        assert _says_global(t) == bool(_GLOBAL_STMT.search(t)), t[:80]
        if not _may_suppress(t):
            assert parse_suppressions(t.splitlines()) == [], t[:80]
    assert parse_suppressions(["x.item()  # noqa: GC101 reason"]) and _may_suppress("x.item()  # noqa: GC101 reason")
