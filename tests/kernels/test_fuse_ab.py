"""benchmarks/fuse_ab.py (issue 37's fused small-chain ops against the launches they replaced): on CPU its chains are
the references' compositions, so the decode with them gives the fused decode's bits; its parity check fails a
wrong kernel; the script runs end to end (a crash test: CPU times mean nothing)."""
import dataclasses
import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, load_benchmark


@pytest.fixture(scope="module")
def fuse_ab():
    return load_benchmark("fuse_ab")


def test_unfuse_puts_the_chains_back_with_the_same_bits(fuse_ab):
    """Every module slot a fused op fills gets its chain back; three steps of the graph-safe decode with the chains
    give the fused decode's logits and state bit for bit (on CPU both are the references)."""
    from dsv4_model.attention import Attention
    from dsv4_model.compressor import Compressor
    from dsv4_model.config import tiny
    from dsv4_model.decode import GraphSafeDecoder
    from dsv4_model.indexer import Indexer
    from dsv4_model.mhc import HyperConnection
    from dsv4_model.moe import Expert, Gate
    from dsv4_model.synthetic import random_model
    torch.manual_seed(0)
    model = random_model(dataclasses.replace(tiny(), max_seq_len=64), device="cpu")
    runs = []
    for unfused in (False, True):
        dec = GraphSafeDecoder(model, batch=2)
        if unfused:
            fuse_ab.unfuse(model)
            chains = {m.q_norm_rope.__name__ for m in model.modules() if isinstance(m, Attention)} | \
                     {m.norm_rope.__name__ for m in model.modules() if isinstance(m, (Attention, Compressor))} | \
                     {m.pre_norm.__name__ for m in model.modules() if isinstance(m, HyperConnection)} | \
                     {m.route.__name__ for m in model.modules() if isinstance(m, Gate)} | \
                     {m.swiglu_fp8.__name__ for m in model.modules() if isinstance(m, Expert)}
            chains |= {m.hadamard_fp4.__name__ for m in model.modules() if isinstance(m, Indexer)}
            chains |= {m.ring_core.__name__ for m in model.modules() if isinstance(m, Attention)}
            chains |= {m.score.__name__ for m in model.modules() if isinstance(m, Indexer)}
            # the route's chain is its reference, the torch calls it replaced
            assert chains == {"q_norm_rope", "norm_rope_fp8", "mhc_pre_norm", "moe_route_ref", "swiglu_fp8",
                              "hadamard_fp4", "attend_ring", "score"}, chains
        dec.reset()
        dec.tokens.copy_(torch.tensor([3, 5]))
        logits = [dec.step().clone() for _ in range(3)]
        runs.append((logits, {k: v.clone() for k, v in dec.state().items()}))
    (a, sa), (b, sb) = runs
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_unfuse_only_some_slots(fuse_ab):
    """`unfuse(model, only)` swaps just those slots' chains in, and a slot that is no fused op is named in the error."""
    from dsv4_model.attention import Attention
    from dsv4_model.config import tiny
    from dsv4_model.decode import GraphSafeDecoder
    from dsv4_model.synthetic import random_model
    model = random_model(dataclasses.replace(tiny(), max_seq_len=64), device="cpu")
    GraphSafeDecoder(model, batch=1)
    fuse_ab.unfuse(model, ["attend_ring"])
    attn = [m for m in model.modules() if isinstance(m, Attention)]
    assert {m.ring_core.__name__ for m in attn} == {"attend_ring"}
    assert {m.q_norm_rope.__name__ for m in attn} == {"head_norm_rope_ref"}
    with pytest.raises(ValueError, match="no fused op \\['attend'\\]"):
        fuse_ab.unfuse(model, ["attend"])


def test_parity_fails_a_wrong_kernel(fuse_ab, monkeypatch):
    """A fused op that rounds one step differently from its chain is reported (the bitwise ops), and so is one off by
    more than a rounding (the others)."""
    assert fuse_ab.parity([1], "cpu") == 0
    good = fuse_ab.fused_ops

    def wrong(dev):
        ops = dict(good(dev))
        nope, pre_norm = ops["fp8_nope"], ops["mhc_pre_norm"]
        ops["fp8_nope"] = lambda x, rd, block: nope(x * (1 + 2 ** -10), rd, block)
        ops["mhc_pre_norm"] = lambda *a: (lambda h, p, c: (h * 1.1, p, c))(*pre_norm(*a))
        route, swiglu, rotate = ops["route"], ops["swiglu_fp8"], ops["hadamard_fp4"]
        ops["route"] = lambda *a: (lambda w, i: (w * (1 + 2 ** -20), i))(*route(*a))
        ops["swiglu_fp8"] = lambda g, u, limit, block: swiglu(g * (1 + 2 ** -6), u, limit, block)
        ops["hadamard_fp4"] = lambda x, h, block: rotate(x.flip(-1), h, block)
        return ops
    monkeypatch.setattr(fuse_ab, "fused_ops", wrong)
    # per batch: the Flash-shape and the odd-shape fp8_nope and mhc_pre_norm cases, the three route cases (bias,
    # hash, sigmoid), the two SwiGLU + FP8 ones and the three rotations
    assert fuse_ab.parity([1], "cpu") == 12


def test_ring_check_fails_a_wrong_write(fuse_ab, monkeypatch):
    """The compressor state writes' check compares the whole state after a step: a ring write that drops the gate
    fails it at every case (CSA and HCA)."""
    assert fuse_ab.ring([2], "cpu", 1) == 0
    good = fuse_ab.fused_ops

    def wrong(dev):
        ops = dict(good(dev))
        write = ops["ring_write"]
        ops["ring_write"] = lambda kv, gate, C, Z, rows, slot: write(kv, gate.clone(), C, Z, rows, slot)
        return ops
    monkeypatch.setattr(fuse_ab, "fused_ops", wrong)
    assert fuse_ab.ring([2], "cpu", 1) == 2


@pytest.mark.slow
def test_fuse_ab_runs_on_cpu():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "fuse_ab.py"), "--device", "cpu", "--batches",
                        "1", "--reps", "1"], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0 and "parity failures: 0" in r.stdout, (r.stdout + r.stderr)[-3000:]
    assert r.stdout.count(" q_norm_rope ") == 3 and "speedup" in r.stdout, r.stdout[-3000:]


@pytest.mark.slow
def test_fuse_ab_depth_table_on_cpu():
    """The per-layer A/B end to end on the tiny preset on CPU: both decode.py runs (the second with --unfused) and
    the side-by-side row read off their tables."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "fuse_ab.py"), "--device", "cpu",
                        "--depth-only", "--depth-args", "--device cpu --configs tiny --depths 1,2 --batches 1 --steps 1"],
                       capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.count("exit 0") == 2, (r.stdout + r.stderr)[-3000:]
    lines = r.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.split()[:4] == ["B", "layer", "ms", "fused"])
    row = lines[head + 1].split()
    assert row[0] == "1" and len(row) == 7, lines[head:]
    # the unfused layer runs more ops than the fused one (CPU: profiler ops, the references' compositions)
    assert float(row[6]) >= float(row[5]) > 0, row
