"""The runtime layers on planted targets: what each finds, where, and that clean code stays clean."""
import random
import warnings

import pytest
import torch

import graphcheck
import planted
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
    with PortableAudit(rec):
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


def test_warning_filters_restored():
    before = list(warnings.filters)
    audit(planted.clean())
    assert warnings.filters == before


@pytest.mark.cuda
def test_cuda_capture_catalogue():
    """On a GPU: the planted hazards under real capture."""
    assert capture_test(_cuda(planted.clean), device="cuda") == []
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
    dec = t.step.__closure__[0].cell_contents if t.step.__closure__ else t.step.__self__
    for name in ("w", "cache", "pos", "out"):
        setattr(dec, name, getattr(dec, name).cuda())
    make = t.make_inputs
    t.make_inputs = lambda k: make(k).cuda()
    t.device = "cuda"
    return t
