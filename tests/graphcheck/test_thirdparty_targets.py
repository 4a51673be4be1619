"""Verdicts on code nobody here wrote: tiny HF transformers models built from configs (no downloads) and a
gpt-fast-style decoder. The expected verdict of each, with its justification from the third-party source, is in
`thirdparty_targets.EXPECTED`; the same suite runs on the GPU with `benchmarks/thirdparty_verdicts.py --device cuda`."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

import thirdparty_targets as tt  # noqa: E402
from graphcheck.runtime.audit import audit  # noqa: E402
from graphcheck.runtime.capture import capture_test  # noqa: E402
from graphcheck.target import build_target  # noqa: E402


def build(name: str, device: str):
    """The target as `graphcheck` builds it from the command line: the factory runs with its tensors placed."""
    return build_target(tt.FACTORIES[name], device, {"device": device})


def verdict(name: str, device: str = "cpu"):
    fs = audit(build(name, device)) + capture_test(build(name, device), device=device)
    return ("unsafe" if fs else "safe"), fs


@pytest.mark.parametrize("name", sorted(tt.EXPECTED))
def test_cpu_verdict(name):
    exp = tt.EXPECTED[name]
    got, fs = verdict(name)
    assert got == exp.verdict, [(f.rule, f.path, f.line, f.message) for f in fs]
    assert set(exp.rules) <= {f.rule for f in fs}
    assert "GC006" not in {f.rule for f in fs}          # a broken target is not a verdict


def test_findings_point_into_the_third_party_source():
    """The line named is the hazard's own line in the installed package, found by execution."""
    _, fs = verdict("hf_suppress_tokens_per_step")
    by_rule = {f.rule: f for f in fs}
    assert by_rule["GC402"].path.endswith("generation/logits_process.py") and ".to(scores.device)" in by_rule["GC402"].source
    assert by_rule["GC001"].line == by_rule["GC402"].line        # the capture fails at the copy, not at torch.tensor
    _, fs = verdict("hf_llama_dynamic")
    gc005 = [f for f in fs if f.rule == "GC005"]
    assert gc005 and all(f.path.endswith("cache_utils.py") and "torch.cat" in f.source for f in gc005)
    _, fs = verdict("hf_mixtral_moe_eager")
    gc001 = next(f for f in fs if f.rule == "GC001")
    assert "nonzero" in gc001.source and gc001.evidence["hunt_list"][0].split()[1] == "GC301"


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted(tt.EXPECTED))
def test_cuda_verdict(name):
    got, fs = verdict(name, "cuda")
    assert got == tt.EXPECTED[name].verdict, [(f.rule, f.path, f.line, f.message) for f in fs]


@pytest.mark.slow
def test_cpu_capture_gives_the_same_json_in_every_process(tmp_path):
    """Three `graphcheck capture` runs of every target, in separate processes with different hash seeds (set and
    dict order of strings, GC timing and allocator addresses all differ between them): the same JSON, byte for byte
    once parsed. The sampling targets draw from torch's default generator, which every process seeds from the OS."""
    here = Path(__file__).resolve().parent
    (tmp_path / "graphcheck.toml").write_text("[tool.graphcheck]\ntargets = [" + ", ".join(
        f'"thirdparty_targets:{n}"' for n in sorted(tt.EXPECTED)) + "]\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), str(here.parents[1]), os.environ.get("PYTHONPATH", "")])}
    runs = [subprocess.Popen([sys.executable, "-m", "graphcheck", "capture", "--device", "cpu", "--config",
                              str(tmp_path / "graphcheck.toml"), "--output-format", "json", "--exit-zero"],
                             cwd=tmp_path, env={**env, "PYTHONHASHSEED": str(seed)}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for seed in (0, 1, 2)]
    outs = [r.communicate(timeout=900) for r in runs]
    docs = [json.loads(out) for out, _ in outs]
    assert all(d["findings"] for d in docs), [err[-2000:] for _, err in outs]
    rows = [[(f["rule"], f["path"].rsplit("/", 1)[-1], f["line"], f["fingerprint"]) for f in d["findings"]] for d in docs]
    assert rows[0] == rows[1] == rows[2]
    assert docs[0] == docs[1] == docs[2]
    mamba = {(f["rule"], f["line"]) for f in docs[0]["findings"] if f["evidence"].get("target", "").startswith("mamba")}
    assert {r for r, _ in mamba} >= {"GC005"} and "GC004" not in {r for r, _ in mamba}     # a stable trace
