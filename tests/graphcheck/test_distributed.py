"""The rank-aware runtime layers on CPU (gloo, 2 ranks): every rank runs the target, verdicts are merged with
the ranks that saw them, and the collective checks (GC204 / GC606 / GC804) fire where they should."""
import pytest

import tp_planted
from graphcheck.findings import Finding, assign_fingerprints
from graphcheck.runtime.distributed import (CollectiveCall, RankResult, compare_traces, launch, merge_ranks,
                                            merge_results, rank_runtime)

SPEC = "tp_planted:"


def rows(findings):
    return sorted((f.rule, f.path.rsplit("/", 1)[-1], f.line, tuple(f.evidence["ranks"])) for f in findings)


def _f(rule="GC101", line=3, count=1, **kw):
    return Finding(rule, "sync", "m.py", line, 0, "step", "`.item()` reads a device value back to the host", "x.item()",
                   count=count, evidence=kw)


def test_merge_keeps_ranks_sums_counts_and_keeps_fingerprints():
    merged = merge_ranks([[_f(count=2)], [_f(count=3), _f("GC601", line=9)]])
    assert rows(merged) == [("GC101", "m.py", 3, (0, 1)), ("GC601", "m.py", 9, (1,))]
    both, one = merged
    assert both.count == 5 and "[on" not in both.message
    assert one.message.endswith("[on rank 1 of 2]") and one.evidence["world"] == 2
    # the fingerprint ignores the message: a baseline written on one rank still matches the merged row
    assert assign_fingerprints([_f()])[0].fingerprint == assign_fingerprints([both])[0].fingerprint


def _call(op, line, shapes="[2x8:float32]"):
    return CollectiveCall(op, shapes, ("m.py", line, "step"))


def test_trace_comparison_reports_the_first_divergence_on_each_rank():
    same = [_call("c10d.allreduce_", 5)]
    t0 = {0: same, 1: same + [_call("c10d.allreduce_", 7)], 2: same + [_call("c10d.allreduce_", 7)]}
    t1 = {0: same, 1: same, 2: same}
    found = compare_traces([t0, t1])
    assert [(f.rule, f.line, f.evidence["_rank"]) for f in found] == [("GC204", 7, 0), ("GC204", 5, 1)]
    assert "collective #2 of step 1 differs" in found[0].message
    assert compare_traces([t1, t1]) == []
    shapes = compare_traces([{0: [_call("c10d.allreduce_", 5, "[2x8:float32]")]}, {0: [_call("c10d.allreduce_", 5, "[4x8:float32]")]}])
    assert len(shapes) == 2 and "4x8" in shapes[0].message


JOBS = [("sync", "clean"), ("capture", "clean"), ("sync", "readback_on_rank1"), ("sync", "barrier"),
        ("sync", "async_unwaited")]


def _jobs(jobs, root):
    # several targets in one process group: spawning ranks costs more than running these steps
    return [rank_runtime(kind, SPEC + name, 2, 1, "cpu", root) for kind, name in jobs]


@pytest.fixture(scope="module")
def verdicts(request):
    root = str(request.config.rootpath)
    per_rank = launch(_jobs, 2, JOBS, root, timeout=120)
    return {job: merge_results([per_rank[0][i], per_rank[1][i]], job[0]) for i, job in enumerate(JOBS)}


@pytest.mark.slow
def test_clean_sharded_step_is_clean_on_every_rank(verdicts):
    assert verdicts[("sync", "clean")] == []
    assert verdicts[("capture", "clean")] == []      # the frozen replay includes (and waits for) the all-reduce


@pytest.mark.slow
def test_a_readback_on_one_rank_is_reported_with_that_rank(verdicts):
    assert rows(verdicts[("sync", "readback_on_rank1")]) == [("GC101", "tp_planted.py", tp_planted.line_of("rank1-item"), (1,))]


@pytest.mark.slow
def test_barrier_in_the_step_cannot_be_captured(verdicts):
    assert rows(verdicts[("sync", "barrier")]) == [("GC606", "tp_planted.py", tp_planted.line_of("barrier"), (0, 1))]


@pytest.mark.slow
def test_async_collective_never_waited(verdicts):
    assert rows(verdicts[("sync", "async_unwaited")]) == [("GC804", "tp_planted.py", tp_planted.line_of("async"), (0, 1))]


@pytest.mark.slow
def test_rank_divergent_collective_is_named_on_both_ranks(request):
    # rank 0 issues one extra all-reduce per step: its peers pair it with their next step's, then rank 0 waits
    # for a collective nobody issues. The comparison names the extra call on rank 0 and where rank 1 was.
    res = launch(_jobs, 2, [("sync", "rank0_extra_collective")], str(request.config.rootpath), timeout=20)
    found = merge_results([res[0][0], res[1][0]], "sync")
    gc204 = [(f.line, tuple(f.evidence["ranks"])) for f in found if f.rule == "GC204"]
    assert sorted(gc204) == sorted([(tp_planted.line_of("rank0-extra"), (0,)), (tp_planted.line_of("all-reduce"), (1,))])


@pytest.mark.slow
def test_a_failed_rank_is_an_error_naming_it():
    from graphcheck.runtime.distributed import DistributedError
    with pytest.raises(DistributedError, match="(?s)rank 1: .*ZeroDivisionError"):
        launch(_fail_on_rank1, 2, timeout=30)


def _fail_on_rank1():
    import torch.distributed as dist
    return 1 / (1 - dist.get_rank())


def test_merge_results_attaches_divergence_to_the_rank():
    a = RankResult(0, [], {0: [_call("c10d.allreduce_", 5), _call("c10d.allreduce_", 6)]})
    b = RankResult(1, [], {0: [_call("c10d.allreduce_", 5)]})
    found = merge_results([a, b], "sync")
    assert [(f.line, f.evidence["ranks"]) for f in found] == [(5, [1]), (6, [0])]


@pytest.mark.slow
def test_torchrun_form_merges_on_rank0(tmp_path):
    # `torchrun -m graphcheck.runtime.distributed`: every rank audits, rank 0 merges and writes the JSON
    import json
    import os
    import subprocess
    import sys
    out = tmp_path / "merged.json"
    here = os.path.dirname(os.path.abspath(__file__))
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        "-m", "graphcheck.runtime.distributed", "audit", SPEC + "readback_on_rank1", "--device", "cpu",
                        "--output-format", "json", "-o", str(out)], cwd=here, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert p.returncode != 0, "a finding is exit 1 on rank 0"
    rows = [(f["rule"], f["line"], f["evidence"]["ranks"]) for f in json.loads(out.read_text())["findings"]]
    assert rows == [("GC101", tp_planted.line_of("rank1-item"), [1])], p.stderr[-2000:]
