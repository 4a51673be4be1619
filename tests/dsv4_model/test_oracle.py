"""The model's decode against an independent fp32 implementation of the spec (tests/dsv4_model/oracle.py), over
300 teacher-forced tokens, with default settings, on checkpoints the real writer makes.

The conditions are the ones under which every part matters: the window (16) wraps, 75 CSA and 2 HCA blocks
close, index_topk (8) is smaller than the number of CSA blocks (the indexer's selection matters), and the
shared expert's gate exceeds swiglu_limit (the official shared expert is unclamped).

Why one fixed seed: the FP8/FP4 simulations are discontinuous. Two correct fp32 implementations differ by
~1e-7 (a prefill's batched GEMMs vs a decode's), and a value that lands within that distance of a rounding
midpoint rounds differently; one such flip in a compressed entry persists for every later token. Seed 5 (one
thread) has no flip and no exact tie at the indexer's top-k boundary (the oracle checks the latter; ReLU zeros
make ties common, and tie order is implementation-defined even in the reference). Other seeds were tried: with
the release format about one in four is flip-free.
"""
import dataclasses

import pytest
import torch

import dsv4_model
from dsv4_model import config
from dsv4_model.checkpoint import random_state, write_checkpoint
from oracle import Oracle

SEED, T = 5, 300


@pytest.fixture
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)      # the same GEMM summation order on every machine (and faster on 2 shared cores)
    yield
    torch.set_num_threads(n)


def _args():
    # 8 indexer heads: with 2, all-zero ReLU scores tie at the top-k boundary at many positions
    return dataclasses.replace(config.tiny(), index_n_heads=8)


def _checkpoint(root, fmt):
    args = _args()
    st = random_state(args, SEED)
    for L in range(args.n_layers):                 # push the shared expert's gate far above swiglu_limit
        st[f"layers.{L}.ffn.shared_experts.w1.weight"] *= 12
    write_checkpoint(root, args, st, fmt=fmt, naming="native", config="hf")
    return args


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["fp32", "release"])
def test_decode_matches_the_independent_oracle(tmp_path, one_thread, fmt):
    args = _checkpoint(tmp_path, fmt)
    cfg = (tmp_path / "config.json").read_text()
    assert '"num_key_value_heads"' in cfg and '"rope_scaling"' in cfg and '"torch_dtype"' in cfg
    toks = torch.randint(16, args.vocab_size, (T,), generator=torch.Generator().manual_seed(SEED))
    ref = Oracle(tmp_path)
    want = ref.logits(toks)
    model = dsv4_model.load(tmp_path, max_seq_len=T + 8, dtype=torch.float32)   # the fp32 spec oracle's dtype
    if fmt == "release":
        assert model.layers[1].ffn.experts.w1.fmt == "mxfp4" and model.layers[1].attn.wq_a.fmt == "fp8"
        assert model.layers[1].ffn.shared_experts.w1.fmt == "fp8"
    got = model.score(toks)
    # the conditions the comparison is meant to cover
    assert T > args.window_size and T // 128 >= 2 and args.index_topk < T // 4
    assert ref.max_shared_gate > args.swiglu_limit
    assert ref.min_gap > 0, "an exact tie at the indexer's top-k boundary makes the selection implementation-defined"
    rel = ((got - want).abs().max() / want.abs().max()).item()
    agree = (got.argmax(-1) == want.argmax(-1)).float().mean().item()
    # plain weights: the structure, to fp32 rounding. Release formats: the FP8/FP4 simulations turn the fp32-ulp
    # differences of op order (the official window key order, the fp32 rope table, the Hadamard scaled after its
    # sums) into rounding flips at quantisation boundaries, so the spec oracle is held to the argmax and a loose
    # bound; the release numerics themselves are pinned bit for bit against the official oracle (test_official.py)
    tol = 1e-4 if fmt == "fp32" else 5e-2
    assert rel <= tol and agree >= 0.99, (rel, agree)
