"""graphcheck on real CuTeDSL code: the static scan over `@cute.jit` sources, and the audit and capture layers on
targets that compile, launch and pack arguments through CuTeDSL (`cute_planted.py`).

CuTeDSL compiles without a GPU, so the compile hazards are checked on CPU too; launches need one (cuda-marked).
Without nvidia-cutlass-dsl (CPU CI) the runtime tests skip; the static ones need no cutlass and always run.
"""
import sys
from pathlib import Path

import pytest

from graphcheck.static.scanner import scan

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PLANTED = HERE / "cute_planted.py"


def rows(findings):
    return sorted((f.rule, f.path.rsplit("/", 1)[-1], f.line) for f in findings)


def _scan(paths, entry_points):
    return scan([str(p) for p in paths], entry_points=entry_points, root=ROOT, cache=False, jobs=1).findings


def _marker(marker: str) -> int:
    from planted import marked_line
    return marked_line(str(PLANTED), marker)


# -- static: no cutlass import, real @cute.jit code ------------------------------------------------------------------

def test_static_gc802_on_real_cutedsl_steps():
    """GC802 at each compile the captured steps reach, and nowhere in the load-time compile of the clean runner."""
    eps = [f"cute_planted:Runner.{m}" for m in ("clean", "compile_in_step", "per_step_key")]
    found = _scan([PLANTED], eps)
    gc802 = sorted(f.line for f in found if f.rule == "GC802")
    assert gc802 == sorted([_marker("compile-in-step"), _marker("per-step-key")]), rows(found)


def test_static_stream_rules_on_real_cutedsl_launches():
    """`stream=CUstream(0)` is visible in the source; a compiled function whose @cute.jit takes no stream is not (the
    runtime layer sees it: test_cuda_stream_hazards). The kernel bodies' device code raises nothing."""
    found = _scan([PLANTED], ["cute_planted:Runner.stream0", "cute_planted:Runner.no_stream"])
    assert rows(found) == [("GC803", "cute_planted.py", _marker("stream0"))]


def test_static_scan_of_the_project_cutedsl_kernels():
    """The kernels' CuTeDSL modules compile at load (`prepare`), never in the launch path the decode captures."""
    files = sorted((ROOT / "kernels").glob("*/cutedsl_kernel.py"))
    assert files, "no CuTeDSL kernel sources under kernels/"
    launch_eps = []
    load_eps = []
    for f in files:
        mod = f"dsv4_kernels.{f.parent.name}.cutedsl_kernel"      # the installed name (pyproject package-dir)
        src = f.read_text()
        assert "@cute.jit" in src and "@cute.kernel" in src, f
        launch_eps.append(f"{mod}:CompiledKernels.__call__")
        load_eps.append(f"{mod}:CompiledKernels.prepare")
    assert not [f for f in _scan(files, launch_eps) if f.rule.startswith("GC8")], "GC8xx in a CuTeDSL launch path"
    at_load = [f for f in _scan(files, load_eps) if f.rule == "GC802"]
    assert {Path(f.path).parent.name for f in at_load} == {f.parent.name for f in files}, rows(at_load)


# -- runtime: needs cutlass ------------------------------------------------------------------------------------------

@pytest.fixture
def cp():
    pytest.importorskip("cutlass.cute", reason="nvidia-cutlass-dsl is not installed (the gpu extra)")
    sys.path.insert(0, str(HERE))
    import cute_planted
    return cute_planted


def test_audit_reports_compile_in_step_at_its_line(cp):
    from graphcheck.runtime.audit import audit
    fs = audit(cp.compile_in_step(), steps=2)
    assert ("GC802", "cute_planted.py", cp.line_of("compile-in-step")) in rows(fs), rows(fs)
    f = next(f for f in fs if f.rule == "GC802")
    assert f.count == 2 and "cute.compile(axpb)" in f.message and f.function == "Runner.compile_in_step"


def test_audit_reports_a_per_step_cache_key(cp):
    from graphcheck.runtime.audit import audit
    fs = audit(cp.per_step_key(), steps=3)
    assert rows(fs) == [("GC802", "cute_planted.py", cp.line_of("per-step-key"))]
    assert fs[0].count == 3


def test_clean_cutedsl_target_is_clean(cp):
    from graphcheck.runtime.audit import audit
    from graphcheck.runtime.capture import capture_test
    assert audit(cp.clean()) == []
    assert capture_test(cp.clean()) == []


def test_capture_reports_compile_after_warmup_not_in_it(cp):
    """The capture layer's warm-up may compile; the captured step and the ones after may not."""
    from graphcheck.runtime.capture import capture_test
    fs = capture_test(cp.per_step_key())
    assert ("GC802", "cute_planted.py", cp.line_of("per-step-key")) in rows(fs), rows(fs)
    fs = capture_test(cp.compile_in_step())
    assert ("GC802", "cute_planted.py", cp.line_of("compile-in-step")) in rows(fs), rows(fs)


def test_warmup_compile_is_not_a_finding(cp):
    """A cache filled on the first call of its one shape (the lazy variant of compile-at-load) compiles in warm-up
    only: neither layer reports it."""
    from graphcheck import Target
    from graphcheck.runtime.audit import audit
    from graphcheck.runtime.capture import capture_test

    def lazy():
        r = cp.Runner()
        r.calls = 0

        def step(x):
            key = (x.shape[0], x.dtype)
            if key not in r.cache:
                r.cache[key] = cp.cute.compile(cp.axpb, cp._fake(x.shape[0]), cp._fake(x.shape[0]), 2.0,
                                               cp.make_fake_stream())
            return r._run(r.cache[key], x, 2.0)
        return Target(step=step, make_inputs=cp._inputs, state=r.state, name="lazy", device=cp._dev())
    assert audit(lazy()) == []
    assert capture_test(lazy()) == []


def test_host_read_while_packing_arguments(cp):
    from graphcheck.runtime.audit import audit
    fs = audit(cp.pack_readback())
    assert ("GC104", "cute_planted.py", cp.line_of("pack-readback")) in rows(fs), rows(fs)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_capture_names_the_packing_read_that_breaks_it(cp, device):
    """Under capture the host read while packing fails the whole capture (CUDA reports it at the end, or at the
    read): the capture layer's GC001 sits on the read's line and names GC104 there as the first hazard."""
    from graphcheck.runtime.capture import capture_test
    cuda = __import__("torch").cuda.is_available()
    if device == "cuda" and not cuda:
        pytest.skip("needs CUDA")
    if device == "cpu" and cuda:
        # the planted targets' tensors live on the GPU there: the CPU emulation is what a machine without one runs
        pytest.skip("the CPU emulation of a CUDA-resident target")
    line = cp.line_of("pack-readback")
    fs = [f for f in capture_test(cp.pack_readback(), device=device) if f.rule == "GC001"]
    assert fs and fs[0].line == line, rows(fs)
    assert fs[0].evidence["first_hazard"].split()[:2] == [f"tests/graphcheck/cute_planted.py:{line}", "GC104"], fs[0].evidence


def test_read_inside_cutlass_packing_is_attributed_to_the_launch_line(cp):
    """A device scalar handed to a compiled function is read by CuTeDSL's own argument packing; the finding names
    the user's call, not a line inside the cutlass package."""
    import torch

    from graphcheck.runtime.kernel_jit import KernelJitAudit
    from graphcheck.runtime.portable import PortableAudit
    from graphcheck.runtime.recorder import Recorder
    r = cp.Runner()
    rec = Recorder()
    # on the runner's device: a host tensor handed to a kernel on a GPU is a host pointer the kernel reads (run 50:
    # an illegal address that failed every CUDA test after it)
    x = torch.zeros(cp.N, device=cp._dev())
    stream = cp.cuda.CUstream(torch.cuda.current_stream().cuda_stream if torch.cuda.is_available() else 0)
    with PortableAudit(rec), KernelJitAudit(rec):
        line = sys._getframe().f_lineno + 2
        try:
            r.fn(x, r.y, torch.tensor(2.0, device=cp._dev()), stream)
        except Exception:      # on CPU: no conversion of a tensor to Float32 (and no device to run on)
            pass
    assert rows(rec.findings()) and {f.line for f in rec.findings() if f.rule.startswith("GC1")} == {line}, \
        rows(rec.findings())
    assert all("cutlass" not in f.path for f in rec.findings())


def test_direct_jit_call_is_a_compile_then_a_trace_per_call(cp):
    """Calling a @cute.jit function (not its compiled handle) in the step compiles on the JIT-cache miss and traces
    the Python body on every call; both are reported at the call. On CPU the launch then fails (no driver): the
    compile has happened by then."""
    import torch
    from cutlass.cute.runtime import from_dlpack

    from graphcheck.runtime.kernel_jit import KernelJitAudit
    from graphcheck.runtime.recorder import Recorder
    rec = Recorder()
    x, y = torch.zeros(cp.N, device=cp._dev()), torch.zeros(cp.N, device=cp._dev())     # device pointers on a GPU
    with KernelJitAudit(rec):
        for _ in range(2):
            line = sys._getframe().f_lineno + 2
            try:
                cp.axpb(from_dlpack(x), from_dlpack(y), 2.0, cp.cuda.CUstream(
                    torch.cuda.current_stream().cuda_stream if torch.cuda.is_available() else 0))
            except Exception:
                if torch.cuda.is_available():
                    raise
    fs = rec.findings()
    assert rows(fs) == [("GC802", "test_cutedsl_runtime.py", line)] and fs[0].count == 2
    assert "axpb(...) (JIT cache miss: compiled)" in fs[0].message


def test_hooks_are_removed_after_the_audit(cp):
    from cutlass.base_dsl import compiler, dsl

    from graphcheck.runtime.kernel_jit import KernelJitAudit
    before = (compiler.CompileCallable._compile, dsl.BaseDSL._func)
    with KernelJitAudit():
        assert compiler.CompileCallable._compile is not before[0]
    assert (compiler.CompileCallable._compile, dsl.BaseDSL._func) == before


# -- GPU: launches ---------------------------------------------------------------------------------------------------

@pytest.mark.cuda
def test_cuda_clean_cutedsl_capture_replays(cp):
    from graphcheck.runtime.capture import capture_test
    assert capture_test(cp.clean(), device="cuda") == []


@pytest.mark.cuda
def test_cuda_stream_hazards(cp):
    from graphcheck.runtime.audit import audit
    from graphcheck.runtime.capture import capture_test
    fs = capture_test(cp.stream0(), device="cuda")
    assert ("GC803", "cute_planted.py", cp.line_of("stream0")) in rows(fs), rows(fs)
    fs = audit(cp.no_stream()) + capture_test(cp.no_stream(), device="cuda")
    assert ("GC801", "cute_planted.py", cp.line_of("no-stream")) in rows(fs), rows(fs)


@pytest.mark.cuda
def test_cuda_compile_and_jit_in_capture(cp):
    from graphcheck.runtime.capture import capture_test
    for name, marker in (("compile_in_step", "compile-in-step"), ("per_step_key", "per-step-key"),
                         ("jit_direct", "jit-direct")):
        fs = capture_test(getattr(cp, name)(), device="cuda")
        assert ("GC802", "cute_planted.py", cp.line_of(marker)) in rows(fs), (name, rows(fs))
