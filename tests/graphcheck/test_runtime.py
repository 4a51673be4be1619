"""The runtime layers on planted targets: what each finds, where, and that clean code stays clean."""
import os
import random
import subprocess
import textwrap
import sys
import warnings

import pytest
import torch

import graphcheck
import planted
from conftest import ROOT
from graphcheck.runtime.audit import audit
from graphcheck.runtime.capture import capture_test
from graphcheck.runtime.portable import PortableAudit
from graphcheck.runtime.recorder import Recorder
from graphcheck.target import TargetError, load_target


def rows(findings):
    return sorted((f.rule, f.path.rsplit("/", 1)[-1], f.line) for f in findings)


def test_clean_target_is_clean():
    assert audit(planted.clean()) == []
    assert capture_test(planted.clean(), device="cpu") == []


def test_readback_in_helper_is_attributed_to_the_helper_line_and_counted():
    fs = audit(planted.readback_in_helper(), steps=3)
    assert rows(fs) == [("GC101", "planted.py", planted.line_of("helper-item"))]
    f = fs[0]
    assert f.count == 3 and f.evidence["steps"] == [1, 2, 3] and f.function == "log_norm"
    assert any("step" in s for s in f.evidence["stack"][1:])     # the caller is in the stack


def test_fresh_tensor_each_step():
    fs = audit(planted.fresh_tensor())
    assert ("GC401", "planted.py", planted.line_of("fresh-tensor")) in rows(fs)


def test_explicit_sync_is_wrapped_and_restored():
    orig = torch.cuda.synchronize
    fs = audit(planted.explicit_sync())
    assert rows(fs) == [("GC601", "planted.py", planted.line_of("sync"))]
    assert torch.cuda.synchronize is orig


def test_exemption_is_reported_not_hidden():
    fs = audit(planted.exempted())
    assert [(f.rule, f.line, f.severity) for f in fs] == [("GC007", planted.line_of("exempt"), "warning")]
    assert fs[0].evidence["exempted"] == {"GC104": 3} and "stop check" in fs[0].message


def test_host_rng_and_numpy():
    import numpy as np

    def step(x):
        random.random()
        np.random.rand(2)
        return x * 2
    fs = audit(graphcheck.Target(step, planted._inputs, dict, "rng"))
    assert {f.rule for f in fs} == {"GC501", "GC502"}
    assert not hasattr(random.random, "__wrapped__")    # unpatched again


def test_host_rng_state_is_one_event_per_call():
    """torch.manual_seed re-seeds the CUDA generators through torch.cuda.manual_seed_all: still one event; a torch op
    drawing from a generator is none."""
    def step(x):
        torch.manual_seed(3)
        seed = torch.initial_seed()
        g = torch.Generator().manual_seed(seed)     # a generator's own method: only the static layer sees it
        return x * 2 + torch.rand(x.shape, generator=g)
    orig = (torch.manual_seed, torch.cuda.manual_seed_all)
    fs = audit(graphcheck.Target(step, planted._inputs, dict, "rng-state"))
    assert sorted(f.evidence["op"] for f in fs if f.rule == "GC503") == ["torch.initial_seed", "torch.manual_seed"], \
        [(f.rule, f.message) for f in fs]
    assert (torch.manual_seed, torch.cuda.manual_seed_all) == orig      # unpatched again


def test_broken_target_is_a_finding_not_a_crash():
    fs = audit(planted.broken())
    assert [f.rule for f in fs] == ["GC006"] and "RuntimeError" in fs[0].message
    cs = capture_test(planted.broken(), device="cpu")
    assert [f.rule for f in cs] == ["GC006"]


def test_baked_python_scalar_fails_frozen_replay_at_its_line():
    fs = capture_test(planted.baked_scalar(), device="cpu")
    assert ("GC003", "planted.py", planted.line_of("baked")) in rows(fs)
    f = next(f for f in fs if f.rule == "GC003")
    assert f.evidence["tensor"] in ("out", "state.out") and float(f.evidence["diff"]) > 0


def test_rebound_state_is_found():
    fs = capture_test(planted.rebound_cache(), device="cpu")
    assert any(f.rule == "GC005" and "cache" in f.message for f in fs)


def test_data_dependent_branch_is_unstable_or_mismatches():
    fs = capture_test(planted.data_dependent_branch(), device="cpu")
    assert {f.rule for f in fs} & {"GC003", "GC004"}
    assert any(f.line in (planted.line_of("branch"), planted.line_of("branch") + 1, planted.line_of("branch") + 3) for f in fs)
    sync = audit(planted.data_dependent_branch())
    assert ("GC104", "planted.py", planted.line_of("branch")) in rows(sync)


def test_growing_slice_is_unstable_at_its_line():
    fs = capture_test(planted.growing_slice(), device="cpu")
    assert ("GC004", "planted.py", planted.line_of("growing")) in rows(fs)


def test_work_outside_torch_is_an_empty_graph():
    fs = capture_test(planted.numpy_side_work(), device="cpu")
    assert "GC002" in {f.rule for f in fs}


def test_no_sync_raises_with_the_line():
    x = torch.randn(3)
    with pytest.raises(graphcheck.SyncError) as e:
        with graphcheck.no_sync():
            y = x * 2
            float(y.sum())
    assert "GC104" in str(e.value) and "test_runtime.py" in str(e.value)
    with graphcheck.no_sync():
        torch.where(x > 0, x, 0).topk(2)
        with graphcheck.allow_sync("host-side logging"):
            x.tolist()
    with pytest.raises(ValueError, match="reason"):
        with graphcheck.allow_sync(""):
            pass


def test_portable_layer_catalogue():
    """Each hazard class, once, at its own line; look-alikes silent."""
    x = torch.randn(6)
    rec = Recorder()
    with PortableAudit(rec, device="cpu"):
        x.shape, x.size(0), x.numel(), x.dim(), x.dtype, len(x)
        torch.where(x > 0, x, 0); x.topk(2); x.argmax(); x.sort()
        f"{x.shape}"
        x[0].item()
        x.tolist()
        x[x > 0]
        torch.nonzero(x)
        torch.where(x > 0)
        x.unique()
        torch.bincount((x > 0).long())
        torch.masked_select(x, x > 0)
        torch.repeat_interleave(x, torch.ones(6, dtype=torch.long, device=x.device))
        torch.repeat_interleave(x, torch.ones(6, dtype=torch.long, device=x.device), output_size=6)
        torch.tensor([1.0, 2.0])
        x[0] = 1.0
        repr(x)
        torch.equal(x, x)
    got = [f.rule for f in sorted(rec.findings(), key=lambda f: f.line)]
    assert got == ["GC101", "GC102", "GC305", "GC301", "GC302", "GC303", "GC304", "GC306", "GC307", "GC401", "GC404",
                   "GC106", "GC108"]


def test_load_target_errors_name_the_spec():
    with pytest.raises(TargetError, match="module:factory"):
        load_target("nocolon")
    with pytest.raises(TargetError, match="no attribute"):
        load_target("planted:nope")
    with pytest.raises(TargetError, match="expected graphcheck.Target"):
        load_target("planted:line_of.__name__")
    assert load_target("planted:clean").name == "clean"


def test_load_target_passes_the_device_to_a_factory_that_takes_one(monkeypatch):
    """--device reaches the factory as an argument (no environment variable between the CLI and the target)."""
    import types
    from graphcheck import Target
    seen = []
    mod = types.ModuleType("devfactories")

    def with_device(device: str = "cpu"):
        seen.append(device)
        return Target(step=lambda x: x, make_inputs=lambda k: torch.zeros(1), state=dict, name="d")
    mod.with_device = with_device
    mod.without = lambda: Target(step=lambda x: x, make_inputs=lambda k: torch.zeros(1), state=dict, name="n")
    monkeypatch.setitem(sys.modules, "devfactories", mod)
    load_target("devfactories:with_device", device="meta")
    load_target("devfactories:with_device")
    assert seen == ["meta", "cpu"]
    assert load_target("devfactories:without", device="meta").name == "n"


def test_sync_warning_hook_counts_attributes_and_restores():
    """The CUDA layer's warning hook, driven on CPU by the warning text torch emits: each sync counted at the user
    line (the default filter would show it once), other warnings passed through, filters and hook restored."""
    from graphcheck.runtime.cuda_sync import SyncWarningHook
    before, show = list(warnings.filters), warnings.showwarning
    rec = Recorder()
    passed = []
    warnings.showwarning = lambda *a, **k: passed.append(str(a[0]))
    try:
        with SyncWarningHook(rec):
            for _ in range(3):
                warnings.warn("called a synchronizing CUDA operation", UserWarning)  # <- hooked
            warnings.warn("something else", UserWarning)
        assert warnings.filters == before
    finally:
        warnings.showwarning = show
    assert warnings.showwarning is show
    fs = rec.findings()
    assert [(f.rule, f.line, f.count) for f in fs] == [("GC008", _line_of_marker("hooked"), 3)]
    assert passed == ["something else"]


def _line_of_marker(name):
    with open(__file__) as fh:
        return next(i for i, t in enumerate(fh, 1) if t.rstrip().endswith(f"# <- {name}"))


def test_index_writes_copy_only_where_torch_copies():
    """GC404 where a Python scalar/list lands by int (0-d destination), list or tensor index; never for fills."""
    x = torch.zeros(4, 6)
    v = torch.zeros(6)
    rec = Recorder()
    with PortableAudit(rec, device="cpu"):
        x[..., -2:] = 0                      # fill_
        x[1] = 1.0                           # a row: fill_
        x[:, 0] = 2.0                        # fill_
        x[x > 5] = 0.0                       # masked_fill_
        v[3] = 1.0                           # <- zero-d
        x[1, 2] = 3.0                        # <- zero-d-2
        x[[0, 1]] = 1.0                      # <- list-index
        x[torch.tensor([0, 2])] = 1.0
    got = sorted((f.rule, f.line) for f in rec.findings() if f.rule == "GC404")
    assert got == sorted([("GC404", _line_of_marker("zero-d")), ("GC404", _line_of_marker("zero-d-2")),
                          ("GC404", _line_of_marker("list-index")), ("GC404", _line_of_marker("list-index") + 1)])


def test_host_built_tensor_meeting_device_state_is_an_h2d_copy_on_cpu():
    fs = audit(planted.host_mask())
    assert ("GC402", "planted.py", planted.line_of("host-mask")) in rows(fs)
    cs = capture_test(planted.host_mask(), device="cpu")
    assert ("GC001", "planted.py", planted.line_of("host-mask")) in rows(cs)
    x, pos = torch.randn(4), torch.zeros((), dtype=torch.long)
    rec = Recorder()
    with PortableAudit(rec, device="cpu"):
        x * torch.tensor(2.0)                                  # a 0-d CPU scalar is allowed next to device tensors
        (torch.arange(4, device=x.device) <= pos).sum()        # built with a device: fine
        torch.arange(4) <= pos                                 # <- mixed
        torch.zeros(4).add_(1).mul(2)                          # host-only arithmetic stays on the host
    assert [(f.rule, f.line) for f in rec.findings() if f.rule == "GC402"] == [("GC402", _line_of_marker("mixed"))]


@pytest.mark.skipif(not hasattr(torch.nn.functional, "grouped_mm"), reason="torch without F.grouped_mm")
def test_readbacks_inside_aten_kernels_are_seen_on_cpu():
    """A kernel that reads device data on the host itself (in C++, below the Autograd key: no `.item()` reaches the
    function layer or the net, and a CPU kernel reads its own memory) is reported from its arguments: histc sizing
    its bins from the data, grouped_mm off its bf16 fast path (the fallback's `offs.cpu()`). One event each, and
    the op still runs with autograd's arguments."""
    x, w = torch.randn(8, 16), torch.randn(2, 16, 16, requires_grad=True)
    offs = torch.tensor([3, 8], dtype=torch.int32)
    grouped = getattr(torch.nn.functional, "grouped_mm", None)        # torch >= 2.9 (the CPU kernel too)
    rec = Recorder()
    with PortableAudit(rec, device="cpu"):
        torch.histc(x, bins=4)                                         # <- histc-range
        torch.histc(x, bins=4, min=-3, max=3)                          # a given range: nothing read
        if grouped is not None:
            grouped(x, w, offs=offs)                                   # <- grouped-fp32
            grouped(x.bfloat16(), w.bfloat16(), offs=offs)             # the bf16 kernel reads on device
            grouped(x.view(2, 4, 16), w)                               # 3-d x 3-d: one bmm, no offsets
    got = sorted((f.rule, f.line, f.count) for f in rec.findings())
    want = [("GC103", _line_of_marker("histc-range"), 1)]
    if grouped is not None:
        want.append(("GC103", _line_of_marker("grouped-fp32"), 1))
    assert got == sorted(want), got


def test_hazards_inside_custom_ops_and_autograd_functions():
    fs = audit(planted.custom_ops())
    assert ("GC102", "planted.py", planted.line_of("custom-op-tolist")) in rows(fs)
    assert ("GC104", "planted.py", planted.line_of("autograd-fn-float")) in rows(fs)


def test_sampling_is_judged_from_equal_generator_states():
    assert capture_test(planted.sampling(), device="cpu") == []
    assert capture_test(planted.sampling(named=True), device="cpu") == []
    fs = capture_test(planted.sampling(per_step=True), device="cpu")
    assert ("GC003", "planted.py", planted.line_of("sample")) in rows(fs)


def test_capture_failure_names_the_first_hazard_in_execution_order(tmp_path, monkeypatch):
    """Not the first by path: aa_helpers.py sorts first and runs first (a capture-legal host scalar) and last
    (a nonzero); the capture fails at zz_step.py:8, which runs in between."""
    (tmp_path / "aa_helpers.py").write_text("import torch\n\n\ndef scale_table():\n    return torch.tensor(2.0)\n\n\n"
                                            "def hits(y):\n    return torch.nonzero(y)\n")
    (tmp_path / "zz_step.py").write_text(
        "import torch\n\nfrom aa_helpers import hits, scale_table\n\n\ndef step(x, out):\n    y = x * scale_table()\n"
        "    out.copy_(y * int(y.sum() > 0))\n    out.add_(hits(y).sum())\n    return out\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import zz_step
    out = torch.zeros(2, planted.D)
    t = graphcheck.Target(lambda x: zz_step.step(x, out), planted._inputs, lambda: {"out": out}, "order")
    fs = capture_test(t, device="cpu")
    g = next(f for f in fs if f.rule == "GC001")
    assert (g.path.rsplit("/", 1)[-1], g.line) == ("zz_step.py", 8)
    assert [h.split()[1] for h in g.evidence["hunt_list"]] == ["GC104", "GC301"]      # the whole list, in order
    assert {f.rule for f in audit(t)} >= {"GC401", "GC104", "GC301"}


def test_first_differing_op_is_found_after_ops_fx_splits():
    """`topk`/`split` add getitem nodes to the FX graph; the culprit line must still be the baked one."""
    d = planted.Decoder()

    def step(x):
        v, i = torch.topk(x, 3)
        a, b = x.split(4, dim=-1)
        d.scale = d.scale * 1.5
        d.out.copy_(torch.cat([a * d.scale, b], -1) + v.sum())  # <- baked-after-split
        return d.out
    fs = capture_test(planted._target(d, step, "split"), device="cpu")
    assert ("GC003", "test_runtime.py", _line_of_marker("baked-after-split")) in rows(fs)


def test_rebound_state_names_the_rebinding_line():
    fs = capture_test(planted.rebound_cache(), device="cpu")
    f = next(f for f in fs if f.rule == "GC005")
    assert f.line == planted.line_of("rebind")


@pytest.mark.cuda
def test_cuda_capture_catalogue():
    """On a GPU: the planted hazards under real capture, and the same verdicts as the CPU run."""
    assert capture_test(_cuda(planted.clean), device="cuda") == []
    assert audit(_cuda(planted.clean)) == []
    fs = capture_test(_cuda(planted.host_mask), device="cuda")
    assert ("GC001", "planted.py", planted.line_of("host-mask")) in rows(fs)
    assert capture_test(_cuda(planted.sampling), device="cuda") == []
    fs = capture_test(_cuda(planted.readback_in_helper), device="cuda")
    assert [f.rule for f in fs] == ["GC001"] and fs[0].line == planted.line_of("helper-item")
    fs = capture_test(_cuda(planted.baked_scalar), device="cuda")
    assert [f.rule for f in fs] == ["GC003"]
    sync = audit(_cuda(planted.readback_in_helper))
    assert ("GC101", "planted.py", planted.line_of("helper-item")) in rows(sync)
    torch.cuda.synchronize()       # the context is still usable after the failed capture


def _cuda(factory):
    """The same planted target with its tensors on the GPU."""
    t = factory()
    cells = [c.cell_contents for c in (t.step.__closure__ or ())]
    dec = next((c for c in cells if isinstance(c, planted.Decoder)), None) or t.step.__self__
    for name in ("w", "cache", "pos", "out"):
        setattr(dec, name, getattr(dec, name).cuda())
    make = t.make_inputs
    t.make_inputs = lambda k: make(k).cuda()
    t.device = "cuda"
    return t


def test_runtime_codes_come_from_the_rule_catalogue():
    """Every callable the runtime reports is listed in the catalogue, and the code it reports is the catalogue's."""
    from graphcheck.rules import runtime_signatures
    from graphcheck.runtime import portable
    sig = runtime_signatures()
    assert portable.EMITS <= set(sig), sorted(portable.EMITS - set(sig))
    assert portable.CODES == sig                   # one assignment of codes: the catalogue's
    from graphcheck.runtime import kernel_jit
    assert kernel_jit.EMITS <= set(sig), sorted(kernel_jit.EMITS - set(sig))
    assert {n for n in sig if n.startswith("cutlass.")} == kernel_jit.EMITS     # no catalogue name nothing emits


def test_placement_on_cpu_is_asked_of_the_source():
    """On a CPU run the run's device is "cpu" too: `device=DEV` (DEV = "cuda" if available else "cpu") is the device,
    a literal host device (a string, a module constant, a local bound to one) is the host."""
    assert audit(planted.device_variable()) == []
    assert capture_test(planted.device_variable(), device="cpu") == []
    fs = audit(planted.host_literal_devices())
    assert [r for r in rows(fs) if r[0] == "GC402"] == sorted(
        ("GC402", "planted.py", planted.line_of(m)) for m in ("literal-cpu", "global-cpu", "local-cpu"))
    fs = audit(planted.readback_by_to())
    assert rows(fs) == sorted([("GC103", "planted.py", planted.line_of("to-cpu")),
                               ("GC402", "planted.py", planted.line_of("back-to-dev"))])


def test_tensors_built_before_the_step_are_placed_where_they_live():
    """A part the factory builds with a host default moves its tensor to the device in every step: a pageable copy
    on a GPU, so reported on CPU too once the target is built as the CLI builds it; given the run's device (the
    factory's parameter, handed in by graphcheck) it is clean. Built without placement, nothing is known."""
    from graphcheck.target import build_target
    t = build_target(planted.prebuilt_on_host, "cpu")
    assert t.host_built == 1
    want = ("GC402", "planted.py", planted.line_of("prebuilt-move"))
    assert want in rows(audit(t))
    assert ("GC001", "planted.py", planted.line_of("prebuilt-move")) in rows(capture_test(t, device="cpu"))
    clean = build_target(planted.prebuilt_on_host, "cpu", {"device": "cpu"})
    assert clean.host_built == 0 and audit(clean) == [] and capture_test(clean, device="cpu") == []
    assert want not in rows(audit(planted.prebuilt_on_host()))
    # a factory that never names a device (a CPU program: planted.Decoder makes every tensor without one) has no
    # device to tell the host from
    cpu_only = build_target(planted.clean, "cpu")
    assert cpu_only.host_built == 0 and audit(cpu_only) == [] and capture_test(cpu_only, device="cpu") == []


# ---- the step boundary (runtime/boundary.py): the target's own code cannot end, interrupt or hang the gate


def _exiting(call):
    x = torch.ones(3)

    def step(inputs):
        call()
        return inputs * 2
    return graphcheck.Target(step, lambda k: x + k, dict, "exits")


@pytest.mark.parametrize("call,fragment", [
    (lambda: sys.exit(0), "raised SystemExit(0)"),
    (lambda: sys.exit(4), "raised SystemExit(4)"),
    (lambda: (_ for _ in ()).throw(KeyboardInterrupt), "raised KeyboardInterrupt itself"),
])
def test_a_step_that_exits_is_an_unchecked_row_in_both_layers(call, fragment):
    for fs in (audit(_exiting(call)), capture_test(_exiting(call), device="cpu")):
        assert [f.rule for f in fs] == ["GC006"] and fragment in fs[0].message, [f.message for f in fs]
        assert fs[0].path.endswith("test_runtime.py")          # the user's line, not graphcheck's guard


def test_a_step_past_its_timeout_is_an_unchecked_row():
    import time as _time
    t0 = _time.monotonic()
    fs = audit(_exiting(lambda: _time.sleep(30)), step_timeout=0.5)
    assert [f.rule for f in fs] == ["GC006"] and "step timeout of 0.5 s" in fs[0].message
    assert _time.monotonic() - t0 < 10
    fs = audit(_exiting(lambda: _time.sleep(0.01)), step_timeout=5)      # the alarm is cancelled after each call
    assert "GC006" not in {f.rule for f in fs}
    _time.sleep(0.1)


def test_a_real_sigint_during_the_step_is_still_an_interrupt():
    import os as _os
    import signal as _signal
    with pytest.raises(KeyboardInterrupt):
        audit(_exiting(lambda: _os.kill(_os.getpid(), _signal.SIGINT)))
    assert _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler       # restored


def test_a_step_stuck_in_native_code_is_ended_with_one_line(tmp_path):
    """SIGALRM blocked in the step's thread: no exception can reach it; the watchdog ends the process, exit 2."""
    script = tmp_path / "stuck.py"
    script.write_text(textwrap.dedent("""
        import signal, sys, time
        import torch, graphcheck
        from graphcheck.runtime import boundary
        from graphcheck.runtime.audit import audit
        boundary.HARD_GRACE = 0.5
        def step(x):
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            time.sleep(60)
        audit(graphcheck.Target(step, lambda k: torch.ones(2), dict, "stuck"), step_timeout=0.5)
        print("not reached")
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("graphcheck: error: the target's step ran past the step "
                                                             "timeout of 0.5 s"), r.stderr


def _kernel_cases():
    """(name, build(device) -> the call, whether its CUDA kernel reads back). One list for the CPU audit and the GPU,
    so the two verdicts are compared on the same calls. The thresholds are ATen's (KERNEL_READBACKS)."""
    def isin(n, **kw):
        return lambda d: (lambda e=torch.arange(32, device=d), t=torch.arange(n, device=d): torch.isin(e, t, **kw))

    def put(index, accumulate=False):
        def build(d):
            y = torch.zeros(4, 6, device=d)
            idx = index(y)
            return lambda: y.index_put_(idx, torch.tensor(1.0), accumulate=accumulate)   # a CPU scalar value
        return build

    def on(fn):
        def build(d):
            x = torch.randn(6, 5, generator=torch.Generator().manual_seed(0)).to(d)
            return lambda: fn(x)
        return build
    probs = lambda x: torch.softmax(x, -1)  # noqa: E731
    return [
        ("isin, test set above ATen's size heuristic", isin(40), True),
        ("isin, test set at the threshold int(10 * 32 ** 0.145) = 16", isin(16), True),
        ("isin, test set just below it", isin(15), False),
        # run 38 (H100, torch 2.11): the sorting path syncs with assume_unique too
        ("isin, large test set, assume_unique", isin(40, assume_unique=True), True),
        ("unique", on(lambda x: (x > 0).unique()), True),
        ("unique_consecutive", on(lambda x: torch.unique_consecutive((x > 0).long())), True),
        ("repeat_interleave without output_size", on(lambda x: torch.repeat_interleave(x[0], (x[1] > 0).long())), True),
        ("repeat_interleave with output_size", on(lambda x: torch.repeat_interleave(
            x[0], torch.ones(5, dtype=torch.long, device=x.device), output_size=5)), False),
        ("nonzero", on(lambda x: torch.nonzero(x > 0)), True),
        ("masked_select", on(lambda x: torch.masked_select(x, x > 0)), True),
        ("boolean index", on(lambda x: x[x > 0]), True),
        # HF's _speculative_sampling indexes device probabilities with `torch.arange(n)` made without a device
        ("index by an index tensor on the host", on(lambda x: x[torch.tensor([0, 2])]), True),
        ("index_put_ of a CPU scalar by index", put(lambda y: (torch.tensor([0, 2], device=y.device),)), True),
        ("index_put_ of a CPU scalar by one device mask", put(lambda y: (y < 1,)), False),
        ("index_put_ of a CPU scalar by mask, accumulate", put(lambda y: (y < 1,), accumulate=True), True),
        ("multinomial, one sample without replacement", on(lambda x: torch.multinomial(probs(x), 1)), False),
        ("multinomial, four samples with replacement", on(lambda x: torch.multinomial(probs(x), 4, True)), False),
        ("bincount", on(lambda x: torch.bincount((x > 0).long().flatten())), True),
        ("bincount with minlength", on(lambda x: torch.bincount((x > 0).long().flatten(), minlength=4)), True),
        ("histc with min == max", on(lambda x: torch.histc(x, bins=4)), True),
        ("histc with a range", on(lambda x: torch.histc(x, bins=4, min=-3, max=3)), False),
    ]


KERNEL_CASES = _kernel_cases()


@pytest.mark.parametrize("name,build,reads_back", KERNEL_CASES, ids=[c[0] for c in KERNEL_CASES])
def test_kernel_readbacks_on_cpu_as_on_the_gpu(name, build, reads_back):
    """The portable audit on CPU reports a call exactly when its CUDA kernel reads back (test_kernel_readbacks_on_cuda
    proves which do): one event, the call's own line."""
    call = build("cpu")
    rec = Recorder()
    with PortableAudit(rec, device="cpu"):
        call()
    # the CPU scalar an index_put_ case builds is itself GC401 (a host tensor per step, not a capture break)
    got = [(f.rule, f.count) for f in rec.findings() if f.rule != "GC401"]
    assert (len(got) == 1 and got[0][1] == 1) if reads_back else got == [], got


@pytest.mark.cuda
@pytest.mark.parametrize("name,build,reads_back", KERNEL_CASES, ids=[c[0] for c in KERNEL_CASES])
def test_kernel_readbacks_on_cuda(name, build, reads_back):
    """The truth for the table: torch's sync debug mode raises at a host sync inside the kernel."""
    call = build("cuda")
    call()                                   # warm (first-call allocations and lazy init)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        if reads_back:
            with pytest.raises(RuntimeError, match="called a synchronizing CUDA operation"):
                call()
        else:
            call()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def test_kernel_readback_table_names_every_modelled_op():
    """Each row of the table is either netted or decided from arguments; the net covers every op the table
    models."""
    from graphcheck.runtime import portable
    netted = {s.partition(".")[0] for s in portable._NET_OPS}
    for row in portable.KERNEL_READBACKS:
        assert row.modelled in ("net", "args", "none") and row.why and row.when
        if row.modelled != "none":
            ops = [o.strip().split(" ")[0].split(".")[0] for o in row.op.replace("/", ",").split(",")]
            assert any(o in netted for o in ops), (row.op, ops)
