"""Scope that follows real models, the device lattice across calls, and robustness of the scan."""
import os
import time
import textwrap
from pathlib import Path

import pytest

from conftest import write_pkg
from graphcheck.static.scanner import analyse_files, discover, scan

FIXTURES = Path(__file__).with_name("fixtures")


_pkg = write_pkg


def test_deepseek_blocks_appended_in_a_loop_are_in_scope(tmp_path):
    d = tmp_path / "ds"
    d.mkdir()
    (d / "model.py").write_text((FIXTURES / "deepseek_model.py").read_text())
    res = scan([str(d)], entry_points=["model:Transformer.forward"], root=d, cache=False, jobs=1)
    got = {(f.rule, f.function, f.line) for f in res.findings}
    assert got == {("GC304", "MoE.forward", 39), ("GC102", "MoE.forward", 39), ("GC302", "MoE.forward", 44)}
    moe = next(f for f in res.findings if f.rule == "GC302")
    assert [c["function"] for c in moe.evidence["call_chain"]] == ["Transformer.forward", "Block.forward"]
    assert {"model.py:MoE.forward", "model.py:Gate.forward", "model.py:Expert.forward"} <= set(res.scope)
    assert res.unresolved == [] and res.warnings == []


SERVING = {
    "ops.py": '''
        import torch

        class CustomOp(torch.nn.Module):
            def forward(self, *a):
                return self._forward_method(*a)

        class RMSNorm(CustomOp):
            def forward_native(self, x):
                return x

            def forward_cuda(self, x):
                if x.isnan().any():
                    raise ValueError("nan")
                return x
    ''',
    "models.py": '''
        import torch
        from .ops import RMSNorm

        def make_layers(n, layer_fn):
            return torch.nn.ModuleList([layer_fn(i) for i in range(n)])

        class Layer(torch.nn.Module):
            def __init__(self, i):
                super().__init__()
                self.norm = RMSNorm()

            def forward(self, x):
                return self.norm(x)

        class Inner(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = make_layers(2, lambda i: Layer(i))

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x)
                return x

        class Base(torch.nn.Module):
            def step(self, x):
                return self.finish(x)

            def finish(self, x):
                return x

        class ForCausalLM(Base):
            model_cls = Inner

            def __init__(self):
                super().__init__()
                self.model = self.model_cls()

            def forward(self, x: torch.Tensor):
                h = self.model(x)
                h = super().step(h)
                return apply(self._sample, h)

            def finish(self, x):
                return x

            def _sample(self, h):
                return h.argmax(-1).item()

        def apply(fn, h):
            return fn(h)
    ''',
}


def test_factories_helpers_class_variables_customop_and_callbacks(tmp_path):
    root = _pkg(tmp_path, SERVING)
    res = scan([str(root / "pkg")], entry_points=["pkg.models:ForCausalLM.forward"], root=root, cache=False, jobs=1)
    got = {(f.rule, f.function) for f in res.findings}
    assert ("GC604", "RMSNorm.forward_cuda") in got          # forward -> forward_cuda dispatch
    assert ("GC101", "ForCausalLM._sample") in got           # passed by reference to apply()
    scope = set(res.scope)
    assert {"pkg/models.py:Inner.forward", "pkg/models.py:Layer.forward", "pkg/models.py:Base.step",
            "pkg/ops.py:RMSNorm.forward_native"} <= scope


def test_unresolved_calls_are_reported_and_gaps_warned(tmp_path):
    root = _pkg(tmp_path, {"m.py": '''
        import torch

        class Block(torch.nn.Module):
            def forward(self, x):
                return x.sum().item()

        class Model(torch.nn.Module):
            def __init__(self, build):
                super().__init__()
                self.blocks = build()
                self.extra = Block()

            def forward(self, x: torch.Tensor):
                for b in self.blocks:
                    x = b(x)
                return x
    '''})
    res = scan([str(root / "pkg")], entry_points=["pkg.m:Model.forward"], root=root, cache=False, jobs=1)
    assert [u["call"] for u in res.unresolved] == ["self.blocks()"]
    assert "could not be resolved" in res.scope_line()
    assert any("self.extra (Block.forward)" in w for w in res.warnings)
    assert "unresolved call(s) in scope" in res.scope_report()


def test_device_lattice_across_calls(tmp_path):
    root = _pkg(tmp_path, {"eng.py": '''
        import logging
        import numpy as np
        import torch
        from torch import nonzero
        from torch.cuda import synchronize
        import torch.cuda as tc

        log = logging.getLogger(__name__)

        def valid_rows(block):
            valid = block.abs().sum(-1) > 0
            if valid.any():
                return block
            return block

        def count(host_ids):
            return host_ids.sum().item()

        class Engine:
            def __init__(self, n, device):
                self.ids_cpu = torch.zeros(n, dtype=torch.long, device="cpu")
                self.pinned = torch.zeros(n, pin_memory=True)
                self.ids_np = np.zeros(n)
                self.buf = torch.zeros(n, device=device)

            def _attend(self, q: torch.Tensor):
                return q * 2

            def step(self, x: torch.Tensor):
                sync = torch.cuda.synchronize
                sync()
                synchronize()
                tc.synchronize()
                torch.accelerator.synchronize()
                n = self.ids_cpu.sum().item()
                m = self.ids_np.tolist()
                k = count(self.ids_cpu)
                self.buf.copy_(self.pinned, non_blocking=True)
                self.buf[n:] = 0
                rows = valid_rows(x)
                out = self._attend(rows)
                log.info("out %s", out)
                return nonzero(out), np.exp(self.ids_np), m, k
    '''})
    res = scan([str(root / "pkg")], entry_points=["pkg.eng:Engine.step"], root=root, cache=False, jobs=1)
    got = sorted((f.rule, f.line) for f in res.findings)
    # not flagged: .item() on the CPU shadow (also through count()'s parameter), .tolist() and np.exp on NumPy,
    # the pinned non_blocking copy, the slice fill; the tensor-ness of valid_rows' parameter comes from the caller
    assert got == [("GC106", 43), ("GC201", 13), ("GC301", 44), ("GC601", 32), ("GC601", 33), ("GC601", 34),
                   ("GC601", 35)], got


def test_package_dir_mapping_resolves_installed_names(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.setuptools]\npackage-dir = {"" = ".", "my_kernels" = "kernels"}\n')
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "__init__.py").write_text("")
    (tmp_path / "kernels" / "op.py").write_text("import torch\ndef run(x: torch.Tensor):\n    return x.item()\n")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "step.py").write_text("import torch\nfrom my_kernels.op import run\n"
                                             "def step(x: torch.Tensor):\n    return run(x)\n")
    res = scan([str(tmp_path / "app"), str(tmp_path / "kernels")], entry_points=["app.step:step"], root=tmp_path,
               cache=False, jobs=1)
    assert [(f.rule, f.path) for f in res.findings] == [("GC101", "kernels/op.py")]


def test_namespace_subpackage_of_a_regular_package_keeps_its_dotted_name(tmp_path):
    # PEP 420: app/ is a package, app/core/ has no __init__.py; Python imports app.core.step through app.__path__
    (tmp_path / "app" / "core").mkdir(parents=True)
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "core" / "ops.py").write_text("import torch\ndef peek(x: torch.Tensor):\n    return x.item()\n")
    (tmp_path / "app" / "core" / "step.py").write_text("import torch\nfrom app.core.ops import peek\n"
                                                      "def step(x: torch.Tensor):\n    return peek(x)\n")
    (tmp_path / "loose").mkdir()            # a directory outside any package still names nothing
    (tmp_path / "loose" / "tool.py").write_text("def main():\n    pass\n")
    res = scan([str(tmp_path)], entry_points=["app.core.step:step"], root=tmp_path, cache=False, jobs=1)
    assert [(f.rule, f.path) for f in res.findings] == [("GC101", "app/core/ops.py")]
    assert res.unresolved == []
    assert scan([str(tmp_path)], entry_points=["tool:main"], root=tmp_path, cache=False, jobs=1).scope == ["loose/tool.py:main"]


def test_module_names_never_climb_above_the_project_root(tmp_path):
    # a project checked out inside a directory that is itself a package (a vendored copy, a monorepo with an
    # __init__.py above): `pkg.a` is what the project imports, not x.src.pkg.a, and its import of pkg.b resolves
    src = tmp_path / "x" / "src"
    (src / "pkg").mkdir(parents=True)
    (tmp_path / "x" / "__init__.py").write_text("")
    (src / "pkg" / "__init__.py").write_text("")
    (src / "pkg" / "a.py").write_text("from pkg.b import g\n\ndef f(t):\n    return g(t)\n")
    (src / "pkg" / "b.py").write_text("import torch\ndef g(t: torch.Tensor):\n    return t.item()\n")
    res = scan([str(src)], entry_points=["pkg.a:f"], root=src, cache=False, jobs=1)
    assert [(f.rule, f.path) for f in res.findings] == [("GC101", "pkg/b.py")] and res.unresolved == []


def test_layers_unpacked_from_a_helper_tuple_and_instances_passed_by_reference(tmp_path):
    root = _pkg(tmp_path, {"m.py": '''
        import torch

        def stage_layers(n, build):
            mods = torch.nn.ModuleList([build(i) for i in range(n)])
            return mods, 0, n

        def world_of(group):
            return group.size

        def run_norm(h, norm):
            return norm(h)

        def connect():
            torch.distributed.barrier()             # set-up: never called by the step

        class Group:
            def __init__(self):
                self.size = 2
                connect()

        class Norm(torch.nn.Module):
            def forward(self, h):
                if h.isnan().any():
                    raise ValueError("nan")
                return h

        class Block(torch.nn.Module):
            def forward(self, h):
                return h.sum().item()

        class Model(torch.nn.Module):
            def __init__(self, n):
                super().__init__()
                self.layers, self.first, self.last = stage_layers(n, lambda i: Block())
                self.group = Group()
                self.norm = Norm()

            def forward(self, h: torch.Tensor):
                for i in range(self.first, self.last):
                    h = self.layers[i](h)
                if isinstance(self.group, Group) and world_of(self.group) > 1 and callable(connect):
                    h = run_norm(h, self.norm)
                return h
    '''})
    res = scan([str(root / "pkg")], entry_points=["pkg.m:Model.forward"], root=root, cache=False, jobs=1)
    got = {(f.rule, f.function) for f in res.findings}
    assert got == {("GC101", "Block.forward"), ("GC604", "Norm.forward")}   # Block through the unpacked tuple
    assert [u["call"] for u in res.unresolved] == ["norm()"] and res.warnings == []   # the parameter, as ever
    # handing an instance over (or inspecting a function) constructs and calls nothing
    assert not {"pkg/m.py:Group.__init__", "pkg/m.py:connect"} & set(res.scope)


# -- robustness -------------------------------------------------------------------------------------------------

def test_huge_and_deep_expressions_are_one_finding_for_that_file(tmp_path):
    (tmp_path / "deep.py").write_text("x = " + "-" * 200_000 + "1\n")
    (tmp_path / "ok1000.py").write_text("import torch\ndef f(t: torch.Tensor):\n    x = " + "-" * 1000 + "1\n"
                                        "    return t.item()\n")
    (tmp_path / "nested.py").write_text("x = " + "(" * 5000 + "1" + ")" * 5000 + "\n")
    res = scan([str(tmp_path)], root=tmp_path, cache=False, jobs=1)
    got = sorted((f.path, f.rule) for f in res.findings)
    assert got == [("deep.py", "GC903"), ("nested.py", "GC903"), ("ok1000.py", "GC101")], got


def test_non_regular_files_are_skipped(tmp_path):
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "real.py").write_text("x = 1\n")
    files, errors = discover([str(tmp_path)], root=tmp_path)
    assert [f.name for f in files] == ["real.py"] and errors == []
    _, errors = discover([str(tmp_path / "pipe.py")], root=tmp_path)
    assert [e.rule for e in errors] == ["GC904"] and "regular" in errors[0].message


def test_gitignore_is_respected(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("generated/\n*_pb2.py\n!keep_pb2.py\n/top_only.py\n")
    for rel in ("a.py", "generated/g.py", "x_pb2.py", "keep_pb2.py", "top_only.py", "sub/top_only.py"):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x = 1\n")
    files, _ = discover([str(tmp_path)], root=tmp_path)
    assert sorted(f.relative_to(tmp_path).as_posix() for f in files) == ["a.py", "keep_pb2.py", "sub/top_only.py"]


def test_cache_entries_of_the_wrong_shape_are_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHCHECK_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "m.py"
    src.write_text("import torch\ndef f(t: torch.Tensor):\n    return t.item()\n")
    first, _ = analyse_files([src], cache=True, jobs=1)
    entries = list((tmp_path / "cache").rglob("*.bin"))
    assert len(entries) == 1
    import marshal
    for bad in (marshal.dumps({"functions": []}), marshal.dumps([1, 2]), marshal.dumps({"v": "0"}), b"not marshal",
                marshal.dumps({**first[0], "findings": [{"rule": 3}]})):
        entries[0].write_bytes(bad)
        again, cached = analyse_files([src], cache=True, jobs=1)
        assert cached == 0 and again[0]["findings"] == first[0]["findings"]


def test_keyboard_interrupt_leaves_no_partial_cache(tmp_path, monkeypatch):
    import graphcheck.static.scanner as sc
    monkeypatch.setenv("GRAPHCHECK_CACHE_DIR", str(tmp_path / "cache"))
    files = []
    for i in range(30):
        p = tmp_path / f"m{i}.py"
        p.write_text(f"import torch\ndef f{i}(t: torch.Tensor):\n    return t.item()\n")
        files.append(p)
    real = sc._analyse_one
    calls = {"n": 0}

    def interrupted(args):
        calls["n"] += 1
        if calls["n"] == 5:
            # a half-written temp file of this run, as a worker killed mid-write would leave it
            d = Path(args[1]) / "ab"
            d.mkdir(parents=True, exist_ok=True)
            (d / f".{args[2]}.x.tmp").write_text("{")
            raise KeyboardInterrupt
        return real(args)

    monkeypatch.setattr(sc, "_analyse_one", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sc.analyse_files(files, cache=True, jobs=1)
    assert not list((tmp_path / "cache").rglob("*.tmp"))
    for entry in (tmp_path / "cache").rglob("*.bin"):
        assert sc._valid_summary(__import__("marshal").loads(entry.read_bytes()))


def test_source_from_stdin_with_a_display_name(tmp_path):
    res = scan([], root=tmp_path, cache=False, jobs=1, source="import torch\ndef f(t: torch.Tensor):\n    return t.item()\n",
               source_name="pkg/hot.py")
    assert [(f.rule, f.path, f.line) for f in res.findings] == [("GC101", "pkg/hot.py", 3)]
    with pytest.raises(ValueError, match="display filename"):
        scan([], root=tmp_path, source="x = 1\n")


def test_entry_point_inputs_are_device_tensors_and_ints_stay_host(tmp_path):
    root = _pkg(tmp_path, {"step.py": '''
        import torch

        def step(tokens, n: int):
            if tokens.any():
                pass
            if n > 3:
                pass
            return tokens
    '''})
    res = scan([str(root / "pkg")], entry_points=["pkg.step:step"], root=root, cache=False, jobs=1)
    assert [(f.rule, f.line) for f in res.findings] == [("GC201", 5)]


def test_sarif_carries_the_call_chain(tmp_path):
    from graphcheck.report.sarif import to_sarif
    from graphcheck.result import classify
    d = tmp_path / "ds"
    d.mkdir()
    (d / "model.py").write_text((FIXTURES / "deepseek_model.py").read_text())
    res = scan([str(d)], entry_points=["model:Transformer.forward"], root=d, cache=False, jobs=1)
    doc = to_sarif(classify("scan", res.findings, None), "0")
    r = next(x for x in doc["runs"][0]["results"] if x["ruleId"] == "GC302")
    assert [loc["physicalLocation"]["region"]["startLine"] for loc in r["relatedLocations"]] == [72, 56]
    assert len(r["codeFlows"][0]["threadFlows"][0]["locations"]) == 3


def test_ctrl_c_in_the_worker_pool_exits_130_and_leaves_no_partial_cache(tmp_path):
    import marshal
    import signal
    import subprocess
    import sys
    import time
    body = "".join(f"def f{i}(t: torch.Tensor):\n    y = t * {i}\n    return y.sum().item()\n\n" for i in range(300))
    src = tmp_path / "src"
    src.mkdir()
    for i in range(400):
        (src / f"m{i}.py").write_text(f"import torch\n# {i}\n" + body)
    cache = tmp_path / "cache"
    env = {**os.environ, "GRAPHCHECK_CACHE_DIR": str(cache)}
    p = subprocess.Popen([sys.executable, "-m", "graphcheck", "scan", str(src), "--jobs", "2"], cwd=tmp_path, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and not list(cache.rglob("*.bin")) and p.poll() is None:
        time.sleep(0.05)
    assert p.poll() is None, "the scan finished before it could be interrupted"
    os.killpg(p.pid, signal.SIGINT)       # what a terminal's Ctrl-C does: the whole process group
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, (p.returncode, err.decode()[-2000:])
    assert b"Traceback" not in err, err.decode()[-2000:]
    assert not list(cache.rglob("*.tmp"))
    entries = list(cache.rglob("*.bin"))
    assert entries and all(marshal.loads(e.read_bytes())["v"] for e in entries)


def test_attributes_typed_by_annotations_resolve_to_the_class_and_its_subclasses(tmp_path):
    """Serving code passes its parts in (`def __init__(self, runner: ModelRunner)`): an attribute assigned an
    annotated parameter, or annotated itself, resolves to that class and every subclass in the tree (the runtime
    type may be any of them); a type from outside the tree (nn.Module) stays an unresolved call."""
    root = _pkg(tmp_path, {"m.py": '''
        from typing import Optional
        import torch

        class Sampler:
            def pick(self, x):
                return x.argmax().item()

        class Base:
            def run(self, x):
                raise NotImplementedError

        class Fast(Base):
            def run(self, x):
                torch.cuda.synchronize()
                return x

        class Engine:
            cache: "Optional[Sampler]"

            def __init__(self, base: Base, sampler: Sampler, model: torch.nn.Module, n: int):
                self.base, self.sampler = base, sampler
                self.model = model
                self.n = n
                self.other: Sampler | None = None

            def step(self, x: torch.Tensor):
                x = self.base.run(x)
                self.sampler.pick(x)
                self.cache.pick(x)
                self.other.pick(x)
                return self.model(x)
    '''})
    res = scan([str(root / "pkg")], entry_points=["pkg.m:Engine.step"], root=root, cache=False, jobs=1)
    assert {"pkg/m.py:Base.run", "pkg/m.py:Fast.run", "pkg/m.py:Sampler.pick"} <= set(res.scope)
    got = {(f.rule, f.function) for f in res.findings}
    assert ("GC101", "Sampler.pick") in got and any(f == "Fast.run" for _, f in got), got
    assert res.unresolved == []          # self.model(): a parameter of an outside type counts as external


def test_fields_of_a_class_typed_parameter_take_the_class_declaration(tmp_path):
    """vLLM's step takes `input_batch: InputBatch`, a dataclass whose fields are NumPy arrays, CPU and device
    tensors: `.item()` on a NumPy field is no sync (it was reported before the scope read the class), on a device
    field it is; a `_cpu` field is a host tensor by its name, as for self attributes; a field the class does not
    declare, or a class outside the tree, stays reported."""
    root = _pkg(tmp_path, {"batch.py": '''
        from dataclasses import dataclass
        import numpy as np
        import torch

        @dataclass
        class Batch:
            lens_np: np.ndarray
            lens: torch.Tensor
            lens_cpu: torch.Tensor
            n: int
    ''', "step.py": '''
        import torch
        from external import Config
        from .batch import Batch

        def step(batch: Batch, cfg: Config, x: torch.Tensor):
            a = batch.lens_np.max().item()
            b = batch.lens.max().item()
            c = int(batch.lens_cpu.max())
            d = batch.undeclared.item()
            e = cfg.scale.item()
            if batch.lens.any():
                x = x + 1
            return x
    '''})
    res = scan([str(root / "pkg")], entry_points=["pkg.step:step"], root=root, cache=False, jobs=1)
    got = sorted((f.rule, f.line) for f in res.findings)
    assert got == [("GC101", 8), ("GC101", 10), ("GC101", 11), ("GC201", 12)], got


def test_an_attribute_a_base_class_assigns_is_read_with_the_base_class_kind(tmp_path):
    """`self.count` assigned only in a base class (in another file, or this one) and read in a subclass's step:
    a device tensor there makes `range(self.count[0])` and `x[:self.count[0]]` readbacks (they were missed: the
    read was an attribute that might be a property, unknown once no getter was found); a base class that holds a
    host list, a property returning an int, or a base outside the tree stay quiet."""
    root = _pkg(tmp_path, {"base.py": '''
        import torch

        class Base:
            def __init__(self, n):
                self.count = torch.zeros(1, dtype=torch.long, device="cuda")
                self.out = torch.zeros(1, n, device="cuda")
                self.sizes = [1, 2]

            @property
            def width(self):
                return 4
    ''', "step.py": '''
        import torch
        from external import Outside
        from .base import Base

        class Step(Base):
            def forward(self, x):
                for j in range(self.count[0]):
                    x = x + 1
                y = self.out[0, :self.count[0]]
                for j in range(self.sizes[0]):
                    x = x + 1
                z = self.out[0, :self.width]
                return x, y, z

        class Local(Step):
            def forward(self, x):
                return self.out.view(self.count[0], -1)

        class Far(Outside):
            def forward(self, x):
                for j in range(self.count[0]):
                    x = x + 1
                return x[:self.out[0]]
    '''})
    res = scan([str(root / "pkg")], entry_points=["pkg.step:Step.forward", "pkg.step:Local.forward",
                                                 "pkg.step:Far.forward"], root=root, cache=False, jobs=1)
    got = sorted((f.rule, f.line) for f in res.findings)
    assert got == [("GC105", 8), ("GC308", 10), ("GC308", 18)], got


def test_an_entry_point_whose_file_is_scanned_under_another_name_says_so(tmp_path):
    from graphcheck.static.scope import ScopeError
    (tmp_path / "app").mkdir()                     # no __init__.py: app/step.py is the top-level module 'step'
    (tmp_path / "app" / "step.py").write_text("def step(x):\n    return x\n")
    with pytest.raises(ScopeError, match=r"module 'app.step' is not among the scanned files \(its file is scanned "
                                         r"as module 'step'"):
        scan([str(tmp_path)], entry_points=["app.step:step"], root=tmp_path, cache=False, jobs=1)
    with pytest.raises(ScopeError, match=r"module 'app.other' is not among the scanned files$"):
        scan([str(tmp_path)], entry_points=["app.other:step"], root=tmp_path, cache=False, jobs=1)


def test_an_entry_point_may_name_a_method_the_class_inherits(tmp_path):
    root = _pkg(tmp_path, {"base.py": '''
        import torch

        class Backend:
            def prepare(self, lens: torch.Tensor):
                return int(lens.max())
    ''', "impl.py": '''
        from .base import Backend

        class FastBackend(Backend):
            pass
    '''})
    res = scan([str(root / "pkg")], entry_points=["pkg.impl:FastBackend.prepare"], root=root, cache=False, jobs=1)
    assert [(f.rule, f.path, f.function) for f in res.findings] == [("GC104", "pkg/base.py", "Backend.prepare")]


def test_closures_see_the_enclosing_kinds_call_their_siblings_and_functions_passed_by_keyword(tmp_path):
    root = _pkg(tmp_path, {"m.py": '''
        import torch

        def run_all(items, step_fn, tag=""):
            return [step_fn(x) for x in items]

        class Chunked(torch.nn.Module):
            def forward(self, h: torch.Tensor, sizes: list):
                flags = h.new_zeros(4)

                def take(t, n):
                    torch.cuda.synchronize()          # reached through the sibling closure below
                    return t[:n], t[n:]

                def next_chunk():
                    nonlocal counts, h
                    cur = counts.clamp(max=4)
                    counts -= cur
                    plan = cur.tolist()               # a CPU tensor of the enclosing function: no sync
                    part, h = take(h, plan[0])
                    return part, flags.tolist()       # a device tensor of the enclosing function: a sync

                counts = torch.tensor(sizes)          # host data without a device: a CPU tensor
                parts = [next_chunk()]
                while counts.sum() > 0:
                    parts.append(next_chunk())
                return parts

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.chunked = Chunked()

            def _layer(self, x):
                return x.max().item()                 # reached only as step_fn=self._layer

            def forward(self, xs, h: torch.Tensor):
                self.chunked(h, [3, 5])
                return run_all(xs, step_fn=self._layer)
    '''})
    res = scan([str(root / "pkg")], entry_points=["pkg.m:Model.forward"], root=root, cache=False, jobs=1)
    got = sorted((f.rule, f.function, f.line) for f in res.findings)
    assert got == [("GC101", "Model._layer", 35), ("GC102", "Chunked.forward.next_chunk", 21),
                   ("GC601", "Chunked.forward.take", 12)]
    assert [u["call"] for u in res.unresolved] == ["step_fn()"]      # the parameter itself, as ever


def test_self_calls_reach_subclass_overrides_and_submodules_of_submodules(tmp_path):
    root = _pkg(tmp_path, {"experts.py": '''
        import torch

        class ExpertsBase(torch.nn.Module):
            def forward(self, x):
                return self.combine(self.compute(x))

            def compute(self, x):
                raise NotImplementedError

            def combine(self, x):
                return x

            def wait(self, x):
                return x

        class DenseExperts(ExpertsBase):
            def compute(self, x):
                return x[x > 0]                       # the override is what runs

            def wait(self, x):
                torch.cuda.current_stream().synchronize()
                return x

        def build_experts(quant):
            if quant:
                raise NotImplementedError
            return DenseExperts()
    ''', "model.py": '''
        import torch
        from .experts import build_experts

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.experts = build_experts(None)
                self.scale = 2.0

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.block = Block()

            def forward(self, x: torch.Tensor):
                y = self.block.experts(x)
                self.block.experts.wait(y)            # a method of a submodule's submodule
                self.block.scale.hex()                # a hop that holds no class of the tree: outside, quietly
                return y
    '''})
    res = scan([str(root / "pkg")], entry_points=["pkg.model:Model.forward"], root=root, cache=False, jobs=1)
    got = sorted((f.rule, f.function) for f in res.findings)
    assert got == [("GC305", "DenseExperts.compute"), ("GC602", "DenseExperts.wait")]
    # the experts are a DenseExperts: the base's combine runs, its compute stub (overridden) does not
    assert "pkg/experts.py:ExpertsBase.combine" in res.scope and "pkg/experts.py:ExpertsBase.compute" not in res.scope
    assert res.unresolved == []


def test_tuple_returns_keep_their_elements_across_calls(tmp_path):
    root = _pkg(tmp_path, {"plans.py": '''
        import enum
        import torch

        class Route(enum.Enum):
            DENSE = 1
            SPARSE = 2

        def choose(x):
            return Route.DENSE if x.shape[-1] < 64 else Route.SPARSE

        def route(x: torch.Tensor, scale):
            if x.numel() == 0:
                return x                              # a tensor on this path: the tuple's elements stay their own
            how = choose(x)
            return how, x * scale, x.norm()

        def forward_route(x: torch.Tensor):
            return route(x, 2.0)                      # forwards the callee's tuple: its elements, by position
    ''', "model.py": '''
        import torch
        from .plans import Route, forward_route, route

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = torch.nn.GRU(4, 4)

            def _prepare(self, x: torch.Tensor):
                if x.dim() == 1:
                    return x
                state = (choose_len(x), x + 1)
                return state                          # a local bound to a tuple literal

            def _split(self, x: torch.Tensor):
                return x.view(2, -1)                  # no tuple returned: unpacking it gives tensors, as before

            def _core(self, packed):
                how, h, norm = packed                 # the caller's tuple, through a parameter
                if how == Route.SPARSE:               # an enum member: no finding
                    h = h * 2
                if norm > 1:                          # GC201: a device tensor from the same tuple
                    h = h / norm
                return h

            def forward(self, x: torch.Tensor):
                how, h, norm = route(x, 0.5)          # cross-module
                if how == Route.DENSE:
                    h = h + 1
                peak = norm.item()                    # GC101: element 2 is on the device
                n, y = self._prepare(x)               # self.method
                if n > 2:                             # a host int
                    y = y + 1
                if self._prepare(x)[1].any():         # GC201: element 1 by a constant index
                    y = y - 1
                w, _, _ = forward_route(x)
                if w is Route.SPARSE or w == Route.DENSE:
                    y = y * 2
                q, k = self._split(x)
                if q.any():                           # GC201: still a tensor
                    y = y + k
                out, hx = self.rnn(x)                 # a submodule outside the tree: still tensors
                if hx.any():                          # GC201
                    y = y + out
                return self._core(route(x, 1.0)), peak

        def choose_len(x):
            return len(x)
    '''})
    res = scan([str(root / "pkg")], entry_points=["pkg.model:Block.forward"], root=root, cache=False, jobs=1)
    got = sorted((f.rule, f.function, f.line) for f in res.findings)
    # not flagged: the enum members compared (lines 21, 29, 38), the host int (33); before, each name unpacked from
    # a call took the join of everything the callee returns (a tensor)
    assert got == [("GC101", "Block.forward", 31), ("GC201", "Block._core", 23), ("GC201", "Block.forward", 35),
                   ("GC201", "Block.forward", 41), ("GC201", "Block.forward", 44)], got


def test_a_method_only_the_subclasses_define_is_reached_from_the_base(tmp_path):
    # Backend.forward calls self.compute(), which Backend does not declare (an nn.Module base: no stub): the
    # subclass's compute is what runs, not something outside the tree, so its .item() is found
    root = _pkg(tmp_path, {"m.py": '''
        import torch

        class Backend(torch.nn.Module):
            def forward(self, x: torch.Tensor):
                return self.compute(x)

        class Slow(Backend):
            def compute(self, x: torch.Tensor):
                return x.sum().item()

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.attn = Slow()

            def forward(self, x: torch.Tensor):
                return self.attn(x)
        '''})
    res = scan([str(root)], entry_points=["pkg.m:Model.forward"], root=root, cache=False, jobs=1)
    assert [(f.rule, f.line) for f in res.findings] == [("GC101", 10)] and "pkg/m.py:Slow.compute" in res.scope


def test_a_closure_does_not_inherit_a_name_it_binds_itself(tmp_path):
    # the enclosing `sizes` is a CPU tensor; the nested def's own `sizes` (bound by `with ... as`, `except ... as`
    # or an import) is another value: its readback is reported, not passed over as the host tensor's
    root = _pkg(tmp_path, {"m.py": '''
        import torch

        def outer(x: torch.Tensor, stream):
            sizes = torch.tensor([1, 2])
            def inner():
                with stream.capture(x) as sizes:
                    return sizes.tolist()
            def other():
                try:
                    return 0
                except Exception as sizes:
                    return sizes
            def kept():
                return sizes.tolist()
            return inner(), other(), kept()
        '''})
    res = scan([str(root)], entry_points=["pkg.m:outer"], root=root, cache=False, jobs=1)
    assert [(f.rule, f.line) for f in res.findings] == [("GC102", 8)], [(f.rule, f.line, f.message) for f in res.findings]


def _found(tmp_path, src: str, entry: str) -> list[tuple[str, str]]:
    root = _pkg(tmp_path, {"m.py": src})
    res = scan([str(root)], entry_points=[entry], root=root, cache=False, jobs=1)
    return [(f.rule, f.function) for f in res.findings]


def test_super_follows_the_method_resolution_order_of_a_subclass(tmp_path):
    # D(B, C) runs D, B, C, A (C3): B's super().forward() is C.forward for a D, A.forward for a plain B
    assert _found(tmp_path, '''
        import torch

        class A(torch.nn.Module):
            def forward(self, x):
                return x

        class B(A):
            def forward(self, x):
                return super().forward(x)

        class C(A):
            def forward(self, x):
                return x.sum().item()

        class D(B, C):
            pass
        ''', "pkg.m:D.forward") == [("GC101", "C.forward")]


@pytest.mark.parametrize("src, entry, where", [
    # an entry point on an abstract base whose stub raises: what runs is a subclass's
    ('''
        import torch

        class AttnBackend(torch.nn.Module):
            def forward(self, x):
                return self.forward_decode(x)

            def forward_decode(self, x):
                raise NotImplementedError

        class FlashBackend(AttnBackend):
            def forward_decode(self, x):
                return x.sum().item()
        ''', "pkg.m:AttnBackend.forward", "FlashBackend.forward_decode"),
    # a class variable a subclass overrides picks the model the subclass runs
    ('''
        import torch

        class Model(torch.nn.Module):
            def forward(self, x):
                return self.compute(x)

            def compute(self, x):
                return x

        class QuantModel(Model):
            def compute(self, x):
                return x.sum().item()

        class Runner:
            model_cls = Model

            def __init__(self):
                self.model = self.model_cls()

            def step(self, x):
                return self.model(x)

        class QuantRunner(Runner):
            model_cls = QuantModel
        ''', "pkg.m:QuantRunner.step", "QuantModel.compute"),
    # a subclass replaces a submodule its base constructs; the runner holds the base type
    ('''
        import torch

        class Proj(torch.nn.Module):
            def forward(self, x):
                return self.act(x)

            def act(self, x):
                return x

        class CheckedProj(Proj):
            def act(self, x):
                return x.sum().item()

        class Layer(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = Proj()

            def forward(self, x):
                return self.proj(x)

        class CheckedLayer(Layer):
            def __init__(self):
                super().__init__()
                self.proj = CheckedProj()

        class Runner:
            def __init__(self, layer: Layer):
                self.layer = layer

            def step(self, x):
                return self.layer(x)
        ''', "pkg.m:Runner.step", "CheckedProj.act"),
    # a diamond: D's self.m() from A runs C.m
    ('''
        import torch

        class A(torch.nn.Module):
            def forward(self, x):
                return self.m(x)

            def m(self, x):
                return x

        class B(A):
            pass

        class C(A):
            def m(self, x):
                return x.sum().item()

        class D(B, C):
            pass
        ''', "pkg.m:D.forward", "C.m"),
], ids=["abstract-base-entry", "class-variable-override", "submodule-replaced", "diamond"])
def test_what_a_subclass_runs_stays_in_scope(tmp_path, src, entry, where):
    # a narrowing of self.m() to one class (tried, reverted: 440cc85) made each of these a silent "all clear"
    assert ("GC101", where) in _found(tmp_path, src, entry)


def test_a_keyword_only_parameter_never_takes_a_positional_argument(tmp_path):
    # `def build(*args, use_fast=False, **kw)`: the tensor passed first lands in args, never in use_fast; a caller
    # that passes the flag by keyword (a host bool) or leaves it to **kw decides it, and `if use_fast:` is host
    # control flow. The same with a bare `*`. A real device flag passed by keyword is still reported.
    found = _found(tmp_path, '''
        import torch

        def pick(fast_flag, x):
            if fast_flag:
                return x
            return x + 1

        def build(*args, use_fast=False, **kwargs):
            return pick(use_fast, args[0])

        def build2(x, *, use_fast=False):
            return pick(use_fast, x)

        def step(x: torch.Tensor, opts: dict):
            a = build(x, x, **opts)
            b = build(x, use_fast=True)
            c = build2(x, use_fast=False)
            return a, b, c

        def step_device_flag(x: torch.Tensor):
            return build2(x, use_fast=x.sum() > 0)
        ''', "pkg.m:step")
    assert found == [], found
    (tmp_path / "d").mkdir()
    assert ("GC201", "pick") in _found(tmp_path / "d", '''
        import torch

        def pick(fast_flag, x):
            if fast_flag:
                return x
            return x + 1

        def build2(x, *, use_fast=False):
            return pick(use_fast, x)

        def step(x: torch.Tensor):
            return build2(x, use_fast=x.sum() > 0)
        ''', "pkg.m:step")


PROPS = {
    "cache.py": '''
        import torch

        class Cache:
            def __init__(self, n):
                self.lens = torch.zeros(n, dtype=torch.long, device="cuda")

            @property
            def length(self):
                return int(self.lens.max())          # a hidden readback in a getter
    ''',
    "runner.py": '''
        import functools
        import torch
        from .cache import Cache

        class Base:
            def __init__(self, n):
                self.totals = torch.zeros(n, device="cuda")

            @property
            def total(self):
                return self.totals.sum().item()

            @functools.cached_property
            def lazy_total(self):
                return self.totals.max().item()

        class Runner(Base):
            def __init__(self, n):
                super().__init__(n)
                self.counts = torch.zeros(n, device="cuda")
                self.cache = Cache(n)
                self.limit = 4

            @property
            def has_work(self):
                return self.counts > 0

            @property
            def never_read(self):
                return self.counts.sum().item()

            @property
            def build_dir(self):
                return self.root / "build"

            @property
            def scale(self):
                return self._scale

            @scale.setter
            def scale(self, v):
                self._scale = v
                self.counts.fill_(v.item())

            def step(self, x: torch.Tensor):
                if self.has_work:                    # the getter's device compare, branched on
                    x = x + 1
                n = self.total                       # inherited getter with .item()
                m = self.lazy_total
                k = self.cache.length                # a submodule's property
                self.build_dir.mkdir()               # a method of what a property returns: outside, not unresolved
                self.scale = x.sum()                 # the setter runs
                if self.limit > 2:                   # a plain attribute: a host value, nothing to follow
                    x = x * 2
                npo2 = lambda v: 1 << (v - 1).bit_length()
                return x, npo2(n), npo2(m), k
    ''',
}


def _props(tmp_path):
    root = _pkg(tmp_path, PROPS)
    return scan([str(root / "pkg")], entry_points=["pkg.runner:Runner.step"], root=root, cache=False, jobs=1)


def test_a_property_read_in_the_step_runs_its_getter(tmp_path):
    res = _props(tmp_path)
    got = {(f.rule, f.function) for f in res.findings}
    assert ("GC201", "Runner.step") in got               # `if self.has_work:` takes the getter's return kind
    assert ("GC101", "Base.total") in got                # the getter's .item(), through an inherited property
    assert ("GC101", "Base.lazy_total") in got           # functools.cached_property: its first read may be the step
    assert {"pkg/runner.py:Runner.has_work", "pkg/runner.py:Base.total", "pkg/runner.py:Base.lazy_total"} \
        <= set(res.scope)


def test_a_property_never_read_stays_out_of_scope(tmp_path):
    # only the getters the step reads: has_work is in scope, never_read (same class, same .item()) is not
    res = _props(tmp_path)
    assert "pkg/runner.py:Runner.has_work" in set(res.scope)
    assert "pkg/runner.py:Runner.never_read" not in set(res.scope)
    assert not any(f.function == "Runner.never_read" for f in res.findings)


def test_a_property_of_a_submodule_runs_its_getter(tmp_path):
    res = _props(tmp_path)
    assert "pkg/cache.py:Cache.length" in set(res.scope)
    assert ("GC104", "Cache.length") in {(f.rule, f.function) for f in res.findings}


def test_a_property_setter_runs_on_assignment(tmp_path):
    res = _props(tmp_path)
    assert "pkg/runner.py:Runner.scale@setter" in set(res.scope)
    assert ("GC101", "Runner.scale@setter") in {(f.rule, f.function) for f in res.findings}


def test_local_lambdas_and_methods_of_a_property_value_are_not_unresolved(tmp_path):
    res = _props(tmp_path)
    assert res.unresolved == [], res.unresolved


def test_a_plain_attribute_is_no_property(tmp_path):
    # a tensor attribute read is no call: nothing enters the scope for it, and a method of the same name as the
    # attribute read elsewhere is not taken for its getter; the property beside it is followed
    root = _pkg(tmp_path, {"m.py": '''
        import torch

        class Runner:
            def __init__(self, n):
                self.flag = torch.zeros(1, device="cuda")
                self.limit = 4

            def limit_value(self):
                return self.flag.item()

            @property
            def ready(self):
                return bool(self.flag)

            def step(self, x: torch.Tensor):
                f = self.flag
                cb = self.limit_value            # a bound method, not called here
                if self.limit > 2:               # a host int
                    x = x * 2
                return x + f, self.ready, cb
    '''})
    res = scan([str(root / "pkg")], entry_points=["pkg.m:Runner.step"], root=root, cache=False, jobs=1)
    assert set(res.scope) == {"pkg/m.py:Runner.step", "pkg/m.py:Runner.ready"}, res.scope
    assert [(f.rule, f.function) for f in res.findings] == [("GC104", "Runner.ready")]
    assert res.unresolved == []


def test_an_attribute_that_is_no_property_keeps_its_unknown_kind(tmp_path):
    # `self.sizes` / `self.cfg` are set by a base outside the tree: the read may be a property until the scope says
    # otherwise, and then it is what it was before, an unknown value - not a tensor (GC401 on host data stays), a
    # `.get()` on it a Python value (no readback), `.device` of it the device
    found = _found(tmp_path, '''
        import torch
        from somewhere import ExternalBase

        class Runner(ExternalBase):
            def step(self, x: torch.Tensor):
                ids = torch.tensor(self.sizes, device="cuda")
                n = self.cfg.get("n")
                buf = torch.zeros(4, device=self.table.device)
                if buf.sum() > 0:
                    x = x + 1
                return x + ids, n.bit_length()
        ''', "pkg.m:Runner.step")
    assert sorted(found) == [("GC201", "Runner.step"), ("GC401", "Runner.step")], found


def test_an_attribute_that_may_be_a_property_does_not_hide_a_device_operand(tmp_path):
    # `self.training` / `self.name` / `self.n` may be properties (symbolic until the scope says): checking the
    # operands with a plain any() stopped at them, and the finding waited on that attribute alone - dropped once it
    # resolved to nothing, though `p` beside it is on the device
    found = _found(tmp_path, '''
        import torch
        from somewhere import ExternalBase

        class Layer(ExternalBase):
            def step(self, x: torch.Tensor):
                p = torch.rand([], device="cuda")
                skip = self.training and p < 0.5
                print(self.name, p)
                log = f"{self.name} {p}"
                y = torch.zeros(self.n, p)
                return x, skip, log, y
        ''', "pkg.m:Layer.step")
    assert sorted(found) == [("GC106", "Layer.step"), ("GC106", "Layer.step"), ("GC203", "Layer.step"),
                             ("GC308", "Layer.step")], found


def test_cuda_of_an_attribute_is_a_copy_unless_its_getter_is_on_the_device(tmp_path):
    # `not dev()` of a symbolic value is False: an unknown attribute's `.cuda()` (a copy, before properties) went
    # quiet; `torch.tensor(self.std)` is host data whatever the attribute is, unless a getter says it is a tensor
    root = _pkg(tmp_path, {"m.py": '''
        import torch
        from somewhere import ExternalBase

        class Runner(ExternalBase):
            def __init__(self):
                self._w = torch.zeros(4, device="cuda")

            @property
            def weight(self):
                return self._w

            def step(self, x: torch.Tensor):
                t = self.table.cuda()                     # unknown: a copy, as before
                w = self.weight.cuda()                    # the getter's device tensor: no copy
                s = torch.tensor(self.std).to(x.device)   # host data made a tensor, then copied
                return x + t + w + s
    '''})
    res = scan([str(root / "pkg")], entry_points=["pkg.m:Runner.step"], root=root, cache=False, jobs=1)
    assert sorted((f.rule, f.line) for f in res.findings) == [("GC402", 14), ("GC402", 16)], res.findings


def test_an_element_of_what_a_getter_returns_is_unknown(tmp_path):
    # a getter returning a list is a Python value: its elements (iterated, indexed) are not, they are unknown
    # as the attribute read was before - `.item()` on them stays a readback
    found = _found(tmp_path, '''
        import torch

        class Runner:
            def __init__(self):
                self._a = torch.zeros(2, device="cuda")

            @property
            def parts(self):
                return [self._a, self._a]

            def step(self, x: torch.Tensor, i: int):
                for t in self.parts:
                    x = x + t.item()
                return x + self.parts[0].item() + self.parts[i].item()
        ''', "pkg.m:Runner.step")
    assert found == [("GC101", "Runner.step")] * 3, found


def test_a_property_read_on_a_local_takes_the_class_it_holds_there(tmp_path):
    # `o` holds a Dev when `o.n` is read, a Host only later: the read is Dev's getter (a device tensor)
    found = _found(tmp_path, '''
        import torch

        class Dev:
            def __init__(self):
                self._a = torch.zeros(2, device="cuda")

            @property
            def n(self):
                return self._a

        class Host:
            @property
            def n(self):
                return 3

        def step(x: torch.Tensor):
            o = Dev()
            v = o.n
            o = Host()
            return x + v.item()
        ''', "pkg.m:step")
    assert found == [("GC101", "step")], found


def test_a_finding_in_a_setter_keeps_its_fingerprint():
    # before setters had their own entry (`C.x@setter`) they were `C.x`: a baseline written then still matches
    from graphcheck.findings import Finding, assign_fingerprints
    old = Finding(rule="GC101", kind="static", path="m.py", line=3, col=4, function="C.x", message="m", source="v.item()")
    new = Finding(rule="GC101", kind="static", path="m.py", line=3, col=4, function="C.x@setter", message="m", source="v.item()")
    assign_fingerprints([old])
    assign_fingerprints([new])
    assert old.fingerprint == new.fingerprint and new.function == "C.x@setter"


def test_a_def_whose_signature_cannot_take_the_call_is_not_its_target(tmp_path):
    """`self.method.apply(self, x, bias=b)` with `method: Method` reaches every subclass's `apply`; one with
    another signature (`apply(self, layer, batch)`, no `bias`, fewer positionals) would raise TypeError there, so it
    is not what runs. Calls that splat (`*a`, `**kw`), a decorator that may change the signature, a classmethod
    called on its class and an unbound `Cls.m(obj, x)` keep their targets."""
    root = _pkg(tmp_path, {"m.py": '''
        import functools
        import torch

        def wrapped(fn):
            @functools.wraps(fn)
            def inner(*args, **kwargs):
                return fn(*args, **kwargs)
            return inner

        class Method:
            def apply(self, layer, x):
                raise NotImplementedError

        class DenseMethod(Method):
            def apply(self, layer, x, bias=None):
                return x @ layer.weight

        class RoutedMethod(Method):
            def apply(self, layer, batch):
                return batch.counts.tolist()

        class WrappedMethod(Method):
            @wrapped                 # inner(*args, **kwargs) is what runs: neither call is ruled out by this def
            def apply(self, layer, batch, extra, more):
                torch.cuda.synchronize()
                return batch

        class Tool:
            @classmethod
            def build(cls, x):
                return x.item()

            def peek(self, x):
                return int(x)

        class Linear(torch.nn.Module):
            def __init__(self, method: Method):
                super().__init__()
                self.method = method
                self.weight = torch.nn.Parameter(torch.empty(4, 4))

            def forward(self, x):
                a = self.method.apply(self, x, bias=None)
                b = self.method.apply(self, x, None)
                return a + b

            def forward_splat(self, x, *rest, **opts):
                a = self.method.apply(self, *rest)
                b = self.method.apply(self, x, **opts)
                return a, b

            def forward_tools(self, x, tool: Tool):
                Tool.build(x)
                Tool.peek(tool, x)
                return x
    '''})

    def run(entry):
        res = scan([str(root / "pkg")], entry_points=[entry], root=root, cache=False, jobs=1)
        return set(res.scope), {(f.rule, f.function) for f in res.findings}

    scope, found = run("pkg.m:Linear.forward")
    assert "pkg/m.py:DenseMethod.apply" in scope
    assert "pkg/m.py:RoutedMethod.apply" not in scope and ("GC102", "RoutedMethod.apply") not in found
    assert ("GC601", "WrappedMethod.apply") in found     # decorated: its signature is not known, it stays
    scope, found = run("pkg.m:Linear.forward_splat")
    assert {"pkg/m.py:DenseMethod.apply", "pkg/m.py:RoutedMethod.apply"} <= scope
    scope, found = run("pkg.m:Linear.forward_tools")
    assert {("GC101", "Tool.build"), ("GC104", "Tool.peek")} <= found


def test_an_instance_of_a_class_a_factory_returns_is_followed(tmp_path):
    """`self.experts = get_impl_class(cfg)(...)`, `cls = pick(cfg); self.x = cls(...)` and a factory that does
    `cls = pick(cfg); return cls(cfg)`: the attribute holds an instance of whichever class the factory returns, so
    calling it runs that class's forward (before: the call stayed unresolved and the class out of scope)."""
    root = _pkg(tmp_path, {"m.py": '''
        import torch

        class Dense(torch.nn.Module):
            def forward(self, x):
                return x

        class Routed(torch.nn.Module):
            def forward(self, x):
                return x.nonzero()

        class Gathered(torch.nn.Module):
            def forward(self, x):
                return x.tolist()

        class Synced(torch.nn.Module):
            def __init__(self, cfg):
                super().__init__()

            def forward(self, x):
                torch.cuda.synchronize()
                return x

        def pick_impl(cfg):
            if cfg.routed:
                return Routed
            return Dense

        def pick_other(cfg):
            return Gathered if cfg.gather else Dense

        def pick_third(cfg):
            return Synced

        def build(cfg):
            cls = pick_third(cfg)
            return cls(cfg)

        class Block(torch.nn.Module):
            def __init__(self, cfg):
                super().__init__()
                self.ffn = pick_impl(cfg)()
                impl = pick_other(cfg)
                self.ffn2 = impl()
                self.ffn3 = build(cfg)

            def forward(self, x):
                return self.ffn(x) + self.ffn2(x) + self.ffn3(x)
    '''})
    res = scan([str(root / "pkg")], entry_points=["pkg.m:Block.forward"], root=root, cache=False, jobs=1)
    assert {"pkg/m.py:Routed.forward", "pkg/m.py:Gathered.forward", "pkg/m.py:Synced.forward",
            "pkg/m.py:Dense.forward"} <= set(res.scope)
    assert {("GC301", "Routed.forward"), ("GC102", "Gathered.forward"), ("GC601", "Synced.forward")} \
        <= {(f.rule, f.function) for f in res.findings}
    assert res.unresolved == [], res.unresolved


def test_a_method_of_what_a_call_returns_is_followed(tmp_path):
    """`get_backend().decode(q)`, `self.pick(q).run(q)`, `Cls(cfg).step(q)`: the method of the instance the function
    returns or the class constructs runs under capture (before: such a call was not recorded at all, neither followed
    nor listed as unresolved). A chain on a value (`q.float().sum()`) adds nothing."""
    root = _pkg(tmp_path, {"m.py": '''
        import torch

        class Backend:
            def decode(self, q):
                return q.tolist()

        class Runner:
            def run(self, q):
                torch.cuda.synchronize()
                return q

        class Stepper:
            def __init__(self, cfg):
                self.cfg = cfg

            def step(self, q):
                return q.nonzero()

        _BACKEND = Backend()

        def get_backend():
            return Backend()

        class Model:
            def pick(self, q):
                return Runner()

            def forward(self, q, cfg):
                a = get_backend().decode(q)
                b = self.pick(q).run(q)
                c = Stepper(cfg).step(q)
                w = Runner()
                d = w(q).run(q)          # a local instance called: its result is not followed (nor a crash)
                return q.float().sum(), a, b, c, d
    '''})
    res = scan([str(root / "pkg")], entry_points=["pkg.m:Model.forward"], root=root, cache=False, jobs=1)
    assert {"pkg/m.py:Backend.decode", "pkg/m.py:Runner.run", "pkg/m.py:Stepper.step"} <= set(res.scope)
    assert {("GC102", "Backend.decode"), ("GC601", "Runner.run"), ("GC301", "Stepper.step")} \
        <= {(f.rule, f.function) for f in res.findings}
    assert res.unresolved == [], res.unresolved


def test_an_entry_point_parameter_defaulting_to_a_python_constant_is_host(tmp_path):
    """An entry point's un-annotated inputs count as the step's tensors; `save_cache=True`, `eps=1e-6`, `mode="a"`
    are flags and settings: `if save_cache:` is host control flow. One defaulting to None is still a possible tensor,
    and a caller that passes a tensor for the flag still decides it."""
    root = _pkg(tmp_path, {"m.py": '''
        import torch

        class Backend:
            def decode(self, q, k, save_cache=True, scale=-1.0, mode="fast", mask=None):
                if save_cache:
                    k = k + 1
                if scale > 0:
                    q = q * scale
                if mode == "fast":
                    q = q + 1
                if mask:
                    q = q * 2
                if k:
                    q = q - 1
                return q

            def step(self, q, k):
                return self.decode(q, k, save_cache=k.sum() > 0)
    '''})
    res = scan([str(root / "pkg")], entry_points=["pkg.m:Backend.decode"], root=root, cache=False, jobs=1)
    assert sorted((f.rule, f.line) for f in res.findings) == [("GC201", 12), ("GC201", 14)]
    res = scan([str(root / "pkg")], entry_points=["pkg.m:Backend.step"], root=root, cache=False, jobs=1)
    assert ("GC201", 6) in {(f.rule, f.line) for f in res.findings}


def test_an_initialiser_called_through_its_class_passes_self(tmp_path):
    """`Base.__init__(self, n)` names the initialiser on the class: the object is its first argument, as in
    `Cls.m(obj, x)`, not implicit as in `Base(n)` or `super().__init__(n)`. Read as a constructor call it passed one
    argument too many, so Base.__init__ was ruled out as its target, and the arguments were matched one off."""
    root = _pkg(tmp_path, {"m.py": '''
        import torch

        def settle(n):
            return n.item()

        class Base(torch.nn.Module):
            def __init__(self, n, limit):
                torch.nn.Module.__init__(self)
                settle(n)
                if limit:
                    self.cap = 1

        class Child(Base):
            def __init__(self, x):
                Base.__init__(self, x, False)

        def build(x):
            return Child(x)
    '''})
    res = scan([str(root / "pkg")], entry_points=["pkg.m:build"], root=root, cache=False, jobs=1)
    assert {"pkg/m.py:Base.__init__", "pkg/m.py:settle"} <= set(res.scope)
    found = {(f.rule, f.function) for f in res.findings}
    assert ("GC101", "settle") in found
    assert ("GC201", "Base.__init__") not in found      # `limit` is the False passed, not the tensor before it


def test_what_a_factory_outside_the_tree_returns_is_unknown(tmp_path):
    """`f(...)(...)` where f is no def of the tree (`lru_cache()(count)`, `torch.compile(...)(fn)`,
    `partial(Pool, ...)` then called): nothing says what it returns. Calling the result is not a call of a module
    outside the tree (which would return a tensor), and an attribute holding it stays unresolved, not outside the
    tree (its methods may well be the tree's: `partial(Pool, ...)` builds a Pool)."""
    root = _pkg(tmp_path, {"m.py": '''
        import functools
        import torch

        def count(cfg):
            return len(cfg)

        def rotate(x):
            return x.roll(1)

        class Pool:
            def __init__(self, n):
                self.n = n

            def copy(self, x):
                return x

        class Step:
            def __init__(self, cfg):
                self.rot = torch.compile(dynamic=True)(rotate)
                new_pool = functools.partial(Pool, n=4)
                self.pool = new_pool()

            def forward(self, x, cfg):
                counter = functools.lru_cache(maxsize=None)(count)
                k = counter(cfg)
                if k > 3:
                    x = x + 1
                for part in counter(cfg):
                    x = x + part
                self.pool.copy(x)
                return self.rot(x)
    '''})
    res = scan([str(root / "pkg")], entry_points=["pkg.m:Step.forward"], root=root, cache=False, jobs=1)
    assert not res.findings, res.findings
    assert {u["call"] for u in res.unresolved} >= {"self.pool.copy()", "self.rot()"}, res.unresolved


SHIFTS = '''
    import torch

    def plan(self, flag):                 # a function, not a method: `self` is its first argument like any other
        if flag:
            return 1
        return 0

    class Gate:
        def pick(this, flag, x):          # a method whose first parameter is not called self
            if flag:
                return x
            return x + 1

        def opt(this, flag, x=None):
            if flag:
                return x
            return 0

    class Ops:
        @staticmethod
        def pick(cls, flag):              # a staticmethod: nothing is passed implicitly, whatever the name
            if flag:
                return 1
            return 0

        @classmethod
        def build(cls, flag, x):
            if flag:
                return x
            return x + 1

        @classmethod
        def make(cls, flag=False, x=None):   # one argument binds with or without cls: only the decorator tells
            if flag:
                return 1
            return 0

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = Gate()

        def pick(this, flag, x):
            if flag:
                return x
            return x + 1

        @staticmethod
        def spick(self, flag):
            if flag:
                return 1
            return 0

        def host_flags(self, x, n: int):
            g = Gate()
            return (self.pick(n > 3, x), g.pick(n > 3, x), self.gate.pick(n > 3, x), Ops.pick(x, n > 3),
                    Ops().pick(x, n > 3), self.spick(x, n > 3), Ops.build(n > 3, x), plan(self, n > 3),
                    Ops.make(n > 3))

        def device_self(self, x, n: int):
            return self.pick(x.sum() > 0, n)

        def device_obj(self, x, n: int):
            g = Gate()
            return g.pick(x.sum() > 0, n)

        def device_static(self, x, n: int):
            return self.spick(n, x.sum() > 0)

        def device_static_obj(self, x, n: int):
            return Ops().pick(n, x.sum() > 0)

        def device_class(self, x, n: int):
            return Ops.build(x.sum() > 0, n)

        def device_class_default(self, x, n: int):
            return Ops.make(x.sum() > 0)

        def device_plan(self, x, n: int):
            return plan(self, x.sum() > 0)

        def device_unbound(self, x, n: int):
            return Gate.opt(Gate(), x.sum() > 0)     # binds both ways: through the class, nothing is implicit
'''


@pytest.mark.parametrize("entry,expected", [
    ("host_flags", []),
    ("device_self", [("GC201", "Block.pick")]),
    ("device_obj", [("GC201", "Gate.pick")]),
    ("device_static", [("GC201", "Block.spick")]),
    ("device_static_obj", [("GC201", "Ops.pick")]),
    ("device_class", [("GC201", "Ops.build")]),
    ("device_class_default", [("GC201", "Ops.make")]),
    ("device_plan", [("GC201", "plan")]),
    ("device_unbound", [("GC201", "Gate.opt")]),
])
def test_an_argument_reaches_the_parameter_python_binds_it_to(tmp_path, entry, expected):
    """What a call fills implicitly is how the def binds, not what its first parameter is called: `self.m(flag, x)`
    and `obj.m(flag, x)` fill `this` of `def m(this, flag, x)`, `Cls.build(flag, x)` the `cls` of a classmethod; a
    staticmethod `pick(cls, flag)` and a function `plan(self, flag)` take every argument. Before, the name decided
    and `flag` took the tensor next to it: a host flag was reported (GC201) and a device flag was not. Where both
    bindings fit (`Gate.opt(obj, flag)`), a call through the class passes the object itself, as before."""
    assert _found(tmp_path, SHIFTS, f"pkg.m:Block.{entry}") == expected


def test_a_backend_impl_picked_through_a_factory_method_is_followed(tmp_path):
    """`backend = get_attn_backend(cfg); impl_cls = backend.get_impl_cls(); self.impl = impl_cls(...)` (a serving
    engine's attention layer), the same chained in one expression, and an instance a backend object makes: the
    attribute holds what the method of what the factory gave returns, so `self.impl.forward(...)` runs those
    classes' forward, and only those (before: `self.impl.forward()` stayed unresolved and the hazard behind it
    unseen)."""
    root = _pkg(tmp_path, {"m.py": '''
        import torch

        class AttnImpl:
            def forward(self, layer, q):
                raise NotImplementedError

        class FlashImpl(AttnImpl):
            def forward(self, layer, q):
                return q.sum().item()

        class TritonImpl(AttnImpl):
            def forward(self, layer, q):
                return q.nonzero()

        class UnusedImpl(AttnImpl):
            def forward(self, layer, q):
                return q.tolist()

        class FlashBackend:
            @staticmethod
            def get_impl_cls():
                return FlashImpl

        class TritonBackend:
            @staticmethod
            def get_impl_cls():
                return TritonImpl

            def make_impl(self):
                return TritonImpl()

        def get_attn_backend(name):
            if name == "flash":
                return FlashBackend
            return TritonBackend

        class Attention(torch.nn.Module):
            def __init__(self, name):
                super().__init__()
                backend = get_attn_backend(name)
                impl_cls = backend.get_impl_cls()
                self.impl = impl_cls()

            def forward(self, q: torch.Tensor):
                return self.impl.forward(self, q)

        class Chained(torch.nn.Module):
            def __init__(self, name):
                super().__init__()
                self.impl = get_attn_backend(name).get_impl_cls()()

            def forward(self, q: torch.Tensor):
                return self.impl.forward(self, q)

        class Made(torch.nn.Module):
            def __init__(self):
                super().__init__()
                backend = TritonBackend()
                self.impl = backend.make_impl()

            def forward(self, q: torch.Tensor):
                return self.impl.forward(self, q)
    '''})
    both = {("GC101", "FlashImpl.forward"), ("GC301", "TritonImpl.forward")}
    for entry, want in (("Attention.forward", both), ("Chained.forward", both),
                        ("Made.forward", {("GC301", "TritonImpl.forward")})):
        res = scan([str(root / "pkg")], entry_points=[f"pkg.m:{entry}"], root=root, cache=False, jobs=1)
        assert {(f.rule, f.function) for f in res.findings} == want, (entry, res.findings)
        assert res.unresolved == [] and "pkg/m.py:UnusedImpl.forward" not in res.scope, (entry, res.unresolved)


NARROW = '''
    import torch

    class Base(torch.nn.Module):
        def forward(self, x):
            return self.embed(x)

        def embed(self, x):
            raise NotImplementedError
''' + "".join(f'''
    class M{i}(Base):
        def embed(self, x):
            return x.sum().item()
''' for i in range(9)) + '''
    class Llama(Base):
        def embed(self, x):
            return x * 2

    class CheckedLlama(Llama):
        def embed(self, x):
            torch.cuda.synchronize()
            return x

    class Runner:
        def __init__(self):
            self.model = Llama()

        def step(self, x: torch.Tensor):
            return self.model(x)
'''


@pytest.mark.parametrize("entry, found, fanouts", [
    ("Llama.forward", {("GC601", "CheckedLlama.embed")}, 0),   # Llama or a subclass of it: not M0..M8
    ("Runner.step", {("GC601", "CheckedLlama.embed")}, 0),     # the submodule's class, through its inherited forward
    ("M3.forward", {("GC101", "M3.embed")}, 0),
    ("Base.forward", set(), 1),                                # any subclass: the eleven overrides, one fan-out
])
def test_a_self_call_in_an_inherited_method_runs_the_receivers_override(tmp_path, entry, found, fanouts):
    """Base.forward's `self.embed(x)` reached from Llama (an entry point on Llama, or a Llama held in an attribute)
    runs Llama's embed or an override below it, not the nine siblings' (issue 35: 101 implementations behind one
    `self.model.embed_multimodal()`); from Base itself, any subclass may run, so all of them stay (a fan-out)."""
    root = _pkg(tmp_path, {"m.py": NARROW})
    res = scan([str(root / "pkg")], entry_points=[f"pkg.m:{entry}"], root=root, cache=False, jobs=1, fanout_limit=8)
    assert {(f.rule, f.function) for f in res.findings} == found, res.findings
    assert len(res.fanouts) == fanouts and len(res.warnings) == fanouts, res.warnings
    if fanouts == 0:      # the overridden stub and the siblings are out of scope
        assert not {"pkg/m.py:Base.embed", "pkg/m.py:M0.embed", "pkg/m.py:M8.embed"} & set(res.scope), res.scope


def test_chains_of_factories_resolve_once_each(tmp_path):
    """Each factory here returns what a method of the previous one's result makes, two ways: unmemoised, resolving
    the attribute walked 2**24 paths (torch's tree took 760 s in the cross-file pass instead of 8 s); each entry is
    now resolved once, and the class at the end of the chain is still what the attribute holds."""
    n = 24
    steps = "".join(f'''
        def f{i}(flag):
            a = f{i - 1}(flag)
            b = f{i - 1}(not flag)
            return a.make() if flag else b.make()
    ''' for i in range(1, n + 1))
    root = _pkg(tmp_path, {"m.py": '''
        import torch

        class Node:
            def make(self):
                return Node()

            def forward(self, x):
                return x.sum().item()

        def f0(flag):
            return Node()
    ''' + steps + f'''
        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.node = f{n}(True)

            def forward(self, x: torch.Tensor):
                return self.node(x)
    '''})
    t0 = time.perf_counter()
    res = scan([str(root / "pkg")], entry_points=["pkg.m:Model.forward"], root=root, cache=False, jobs=1)
    assert [(f.rule, f.function) for f in res.findings] == [("GC101", "Node.forward")]
    assert time.perf_counter() - t0 < 20
