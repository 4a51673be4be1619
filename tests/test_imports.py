"""The import structure of the three packages (graphcheck, dsv4_model, and kernels/ installed as dsv4_kernels):
no import cycle anywhere, counting the imports inside functions (a lazy cycle is a cycle a refactor makes eager),
and every module importable on its own, in an interpreter that has imported nothing of the project before it
(`import graphcheck.static.inference` alone raised ImportError through rules -> gc308 -> inference -> rules while
every test passed, because some other module had always been imported first)."""
import ast
import glob
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT

PACKAGES = {"graphcheck": "graphcheck", "dsv4_model": "dsv4_model", "dsv4_kernels": "kernels"}


def modules() -> dict[str, str]:
    """dotted module name -> its file, for every module of the three packages."""
    out = {}
    for name, top in PACKAGES.items():
        for here, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            rel = os.path.relpath(here, os.path.join(ROOT, top))
            pkg = name if rel == "." else f"{name}.{rel.replace(os.sep, '.')}"
            if "__init__.py" not in files:
                continue
            for f in sorted(files):
                if f.endswith(".py"):
                    out[pkg if f == "__init__.py" else f"{pkg}.{f[:-3]}"] = os.path.join(here, f)
    return out


def import_graph(mods: dict[str, str]) -> dict[str, set[str]]:
    """module -> the project modules it imports, at module level or inside a function. Importing `a.b.c` runs `a`
    and `a.b` too, so those are edges as well (except the importer's own parents, which are already running).
    `importlib.import_module(f"{__name__}.{x}")` / `f"{__package__}.{x}"` (how rules and kernels are discovered)
    may import any module below that package."""
    graph = {}
    for mod, path in mods.items():
        ispkg = path.endswith("__init__.py")
        source = open(path, encoding="utf-8").read()
        tree = ast.parse(source, path)
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if ispkg else mod.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module
                names.add(target)
                names.update(f"{target}.{a.name}" for a in node.names)
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
                  and node.args and isinstance(node.args[0], ast.JoinedStr)):
                names.update(_discovered(mod, ispkg, node.args[0], mods, source))
        own = {".".join(mod.split(".")[:i]) for i in range(1, mod.count(".") + 1)}
        edges = set()
        for name in names:
            while name and name not in mods:        # `from pkg.mod import function` imports pkg.mod
                name = name.rpartition(".")[0]
            while name:
                if name != mod and name not in own:
                    edges.add(name)
                name = name.rpartition(".")[0]
        graph[mod] = edges
    return graph


def _discovered(mod: str, ispkg: bool, spec: ast.JoinedStr, mods: dict[str, str], source: str) -> set[str]:
    """The modules `importlib.import_module(f"{__package__}.{x}.target")` may import: each formatted part after the
    leading `{__name__}`/`{__package__}` stands for one name. A discovery that keeps `ispkg` entries only (the kernel
    records') imports the subpackages, not the modules beside them."""
    import re
    head, *rest = spec.values
    if not (isinstance(head, ast.FormattedValue) and getattr(head.value, "id", "") in ("__name__", "__package__")):
        return set()
    pkg = mod if ispkg or head.value.id == "__name__" else mod.rpartition(".")[0]
    pattern = re.escape(pkg) + "".join(re.escape(v.value) if isinstance(v, ast.Constant) else r"[^.]+" for v in rest)
    found = {m for m in mods if re.fullmatch(pattern, m)}
    if ".ispkg" in source:
        found = {m for m in found if mods[m].endswith("__init__.py")}
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_no_import_cycles():
    graph = import_graph(modules())
    found = cycles(graph)
    detail = "; ".join(" ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in found)
    assert found == [], f"import cycles (module -> the modules of its cycle it imports): {detail}"


def test_the_graph_sees_function_level_and_discovery_imports():
    """The checker itself: a lazy import inside a function is an edge, and so is the rules' discovery."""
    graph = import_graph(modules())
    assert "graphcheck.runtime.distributed" in graph["graphcheck.commands"]           # `from .runtime.distributed import` in a function
    assert "graphcheck.rules.gc101_tensor_item" in graph["graphcheck.rules"]          # importlib discovery
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# Each module in a child forked from a parent that imported the third-party libraries only (torch, triton, rich:
# the cost of a fresh interpreter per module, ~160 x 2 s, is theirs). A child's sys.modules holds nothing of the
# project when it imports its one module, as a fresh interpreter's would; one child per core at a time.
# `import a.b.m` runs `a`, then `a.b`, then `a.b.m` unless that is loaded by then: so where importing the package
# `a.b` alone loaded `a.b.m`, importing `a.b.m` alone did exactly that and nothing more (the rule modules, which
# graphcheck.rules imports, for instance). The packages run first; each child reports what it loaded, and a module
# its own package loaded is proven by that run.
ALONE = textwrap.dedent("""
    import os, sys, traceback
    import torch, rich.console, rich.table, rich.progress  # noqa: F401
    try:
        import triton  # noqa: F401
    except ImportError:
        pass
    OURS = ("graphcheck", "dsv4_model", "dsv4_kernels")
    # the `gpu` extra's CuTeDSL (nvidia-cutlass-dsl: `cutlass`, and `cuda` from its cuda-python): the CuTeDSL kernel
    # modules import it at the top, and nothing imports them where `_cutedsl.available()` says it is absent
    OPTIONAL = ("cutlass", "cuda")
    assert not [m for m in sys.modules if m.split(".")[0] in OURS]
    packages, modules = sys.argv[sys.argv.index("--packages") + 1:], sys.argv[1:sys.argv.index("--packages")]
    bad, loaded, skipped = [], {}, []

    def run(batch):
        todo, running = list(batch), {}
        while todo or running:
            if todo and len(running) < (os.cpu_count() or 1):
                mod = todo.pop()
                r, w = os.pipe()
                pid = os.fork()
                if pid == 0:
                    os.close(r)
                    try:
                        __import__(mod)
                        out, code = " ".join(m for m in sys.modules if m.split(".")[0] in OURS), 0
                    except ModuleNotFoundError as e:
                        if (e.name or "").split(".")[0] in OPTIONAL:
                            out, code = "", 3
                        else:
                            out, code = traceback.format_exc(limit=-4)[-1500:], 1
                    except BaseException:
                        out, code = traceback.format_exc(limit=-4)[-1500:], 1
                    with os.fdopen(w, "w") as f:
                        f.write(out)
                    os._exit(code)
                os.close(w)
                running[pid] = (mod, os.fdopen(r))
                continue
            pid, status = os.wait()
            mod, f = running.pop(pid)
            out = f.read()
            f.close()
            if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3:
                skipped.append(mod)
            elif status:
                bad.append(mod + ": " + (out.strip().splitlines() or ["killed"])[-1])
            else:
                loaded[mod] = set(out.split())
    run(packages)
    rest = [m for m in modules if m.rpartition(".")[0] in bad or m not in loaded.get(m.rpartition(".")[0], ())]
    run(rest)
    print("RAN", len(packages) + len(rest), "OF", len(packages) + len(modules))
    print("BAD", sorted(bad))
    print("SKIPPED (no gpu extra)", sorted(skipped))
""")


@pytest.mark.slow
def test_every_module_imports_on_its_own():
    mods = modules()
    packages = sorted(m for m, path in mods.items() if path.endswith("__init__.py"))
    rest = sorted(m for m in mods if m not in packages)
    r = subprocess.run([sys.executable, "-c", ALONE, *rest, "--packages", *packages], capture_output=True, text=True,
                       timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "BAD []" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]


def test_the_graph_safe_decode_uses_only_the_layers_public_interface():
    """dsv4_model/decode.py reaches the reference modules through their public methods (qkv, attend, pool_rows,
    finish, query, scores, logits, ...), never a private member of another object or module (issue 39): a private
    name there is a contract nobody wrote down."""
    tree = ast.parse(open(os.path.join(ROOT, "dsv4_model", "decode.py")).read())
    private = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id == "self")):
            private.append(f"line {node.lineno}: .{node.attr}")
        if isinstance(node, ast.ImportFrom) and any(p.startswith("_") and not p.startswith("__")
                                                    for p in (node.module or "").split(".")):
            private.append(f"line {node.lineno}: from {node.module}")
    assert private == [], private


def test_the_block_composition_is_written_once():
    """The layer's composition (mHC pre -> norm -> attention -> mHC post, then the same around the FFN) lives in
    `Block.compose` alone: both decodes drive it with their own sublayer calls (issue 39). The block's mHC and norm
    modules are read nowhere else in dsv4_model, so a second copy of the composition (the graph-safe step's own, as
    before) fails here."""
    parts = {"hc_attn", "hc_ffn", "attn_norm", "ffn_norm"}
    elsewhere = []
    for path in sorted(glob.glob(os.path.join(ROOT, "dsv4_model", "*.py"))):
        tree = ast.parse(open(path, encoding="utf-8").read())
        allowed = set()
        for cls in ast.walk(tree):
            if isinstance(cls, ast.ClassDef) and cls.name == "Block":
                for fn in cls.body:
                    if isinstance(fn, ast.FunctionDef) and fn.name in ("__init__", "compose"):
                        allowed.update(id(n) for n in ast.walk(fn))
        elsewhere += [f"{os.path.basename(path)}:{node.lineno} .{node.attr}" for node in ast.walk(tree)
                      if isinstance(node, ast.Attribute) and node.attr in parts and id(node) not in allowed]
    assert elsewhere == [], elsewhere
