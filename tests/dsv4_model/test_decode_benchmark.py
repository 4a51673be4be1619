"""benchmarks/decode.py's depth mode (issue 37): the stored-bytes floor it divides by, and its CPU path end to end
(small shapes, eagerly: a crash test; no time is asserted anywhere)."""
import os
import subprocess
import sys

import pytest
from conftest import ROOT, load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("decode", "decode_bench")


def test_stored_floor_counts_what_the_release_stores(bench):
    """Flash dimensions: the head at 2 bytes a weight (bf16, as stored: half an fp32-held copy), one more routed
    expert hit = one MXFP4 expert (codes + e8m0 per 32), the FP8 projections at 1 byte + one e8m0 per 128x128
    block, the state as given, the hash table's rows per token fed."""
    args = bench.depth_args("flash", 2)
    d, V, I = args.dim, args.vocab_size, args.moe_inter_dim
    rest, (l0, l1) = bench.stored_floor(args, 1, [6, 6], [0, 0])
    embed_row, norm, hc_head = 2 * d, 2 * d, 4 * (args.hc_mult * args.hc_mult * d + args.hc_mult + 1)
    assert rest == 2 * V * d + embed_row + norm + hc_head
    expert = 3 * (I * d // 2 + I * d // 32)
    rest8, (m0, m1) = bench.stored_floor(args, 1, [7, 6], [100, 5])
    assert (rest8, m0 - l0, m1 - l1) == (rest, expert + 100, 5)
    # batch 2: one more embedding row, one more hash-table row (layer 0 is hashed), nothing else
    rest2, (n0, n1) = bench.stored_floor(args, 2, [6, 6], [0, 0])
    assert (rest2 - rest, n0 - l0, n1 - l1) == (2 * d, 8 * args.n_activated_experts, 0)
    # FP8 wq_b [H*D, q_lora] against the same projection stored bf16: 1 byte a weight + its block scales
    H_D, q = args.n_heads * args.head_dim, args.q_lora_rank
    assert bench._linear_stored("layers.0.attn.wq_b", (H_D, q)) == H_D * q + (H_D // 128) * (q // 128)
    assert bench._linear_stored("layers.0.ffn.gate", (256, d)) == 2 * 256 * d
    # a Flash layer reads about 0.2-0.35 GB at 6 experts hit (the estimate: ~0.29 GB held); the CSA layer
    # (indexer, two-series compressor) more than the HCA one
    assert 0.15e9 < l1 < l0 < 0.35e9, (l0, l1)


@pytest.mark.slow
def test_held_bytes_count_joined_weights_once(bench):
    """A CUDA table joins the compressors' weights into one tensor of which the modules' weights are views: the
    held bytes are the memory's, the same before and after the join (each view counted once)."""
    import dataclasses

    from dsv4_model.compressor import Compressor, join_projections
    from dsv4_model.config import tiny
    from dsv4_model.decode import GraphSafeDecoder
    from dsv4_model.synthetic import random_model
    model = random_model(dataclasses.replace(tiny(), max_seq_len=40), device="cpu")
    dec = GraphSafeDecoder(model, batch=1)
    before = bench.bytes_per_step(model, dec, 1)
    for layer in model.layers:
        if len(layer.attn.compressors()) > 1:
            layer.attn.joint = join_projections(layer.attn.compressors())
    for m in model.modules():
        if isinstance(m, Compressor):
            m.join()
    assert any(layer.attn.joint is not None for layer in model.layers)
    assert bench.bytes_per_step(model, dec, 1) == before


def test_depth_mode_runs_on_cpu():
    """The depth mode end to end on the tiny preset (depths 1 and 2, one and two rows, layer 1 profiled): every
    part runs and prints its table; the bf16 head's logits are the fp32-weight product exactly on CPU."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "decode.py"), "--device", "cpu", "--configs",
                        "tiny", "--depths", "1,2", "--batches", "1,2", "--layer-profile", "1", "--steps", "1"],
                       capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "tiny: depths 1 and 2" in out and "a 43-layer step" in out, out[-3000:]
    rows = [ln.split() for ln in out.splitlines() if ln.split()[:1] in (["1"], ["2"]) and len(ln.split()) == 15]
    assert [row[0] for row in rows] == ["1", "2"], out[-3000:]
    assert "LM head held bfloat16" in out and "max rel diff 0.00e+00 " in out
    assert "== layer 1 (HCA), B=1:" in out and "the small chain:" in out


@pytest.mark.slow
def test_depth_mode_rejects_bad_depths():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "decode.py"), "--device", "cpu", "--depths", "2"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 2 and "--depths takes two different depths" in r.stderr, r.stderr


@pytest.mark.slow    # ~6 s: a crash test of the benchmark script; CI's slow pass runs it
def test_speculative_mode_runs_on_cpu():
    """The speculative mode end to end (eagerly), both verify modes: the drafts from each row's own greedy stream
    are accepted at exactly the rate they are built for (1, 2, 3 tokens a step at k = 2), which they are only if
    the speculative step emits the plain greedy stream."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "decode.py"), "--device", "cpu", "--configs",
                        "tiny", "--speculative", "2", "--batches", "2", "--steps", "2"],
                       capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    tokens = {(ln.split()[2], " ".join(ln.split()[3:-4])): float(ln.split()[-3]) for ln in r.stdout.splitlines()
              if ln.startswith("tiny ")}
    for verify in ("positions", "batched"):
        mtp = tokens[(verify, "MTP block")]
        assert {d: t for (v, d), t in tokens.items() if v == verify} == {
            "plain": 1.0, "acceptance 0": 1.0, "acceptance 0.5": 2.0, "acceptance 1": 3.0, "MTP block": mtp}, r.stdout
        assert 1.0 <= mtp <= 3.0, r.stdout
