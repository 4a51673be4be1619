"""The default decode against the official release's numerics (tests/dsv4_model/official_oracle.py, rederived from
DeepSeek's inference/ code) and its fp64 twin, over the first 16 positions, on checkpoints the real writer makes:
the release format (FP8 e4m3 + e8m0 block-128 scales, MXFP4 experts, bf16 head/norms/gate) with index_topk below
and above the number of compressed blocks (4 CSA blocks close in 16 tokens), and a plain bf16 one.

Measured (one thread): the default decode equals the oracle bit for bit on every case here; the twin (fp64
accumulation before the same roundings) is 5e-8..1e-7 off where no rounding flips and 1e-3..2e-1 off from the first
flip on, as early as position 1: the noise floor two faithful implementations have.
"""
import dataclasses

import pytest
import torch

import dsv4_model
from dsv4_model import config
from dsv4_model.checkpoint import random_state, write_checkpoint
from dsv4_model.decode import GraphSafeDecoder
from official_oracle import OfficialOracle

T = 16
CASES = [("release", 1, 2), ("release", 2, 8), ("release", 3, 2), ("release", 4, 8), ("bf16", 1, 8), ("bf16", 2, 2)]


@pytest.fixture
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)      # the same GEMM summation order on every machine
    yield
    torch.set_num_threads(n)


def _case(root, fmt, seed, topk):
    args = dataclasses.replace(config.tiny(), index_n_heads=8, index_topk=topk)
    write_checkpoint(root, args, random_state(args, seed), fmt=fmt, naming="native", config="hf")
    toks = torch.randint(16, args.vocab_size, (T,), generator=torch.Generator().manual_seed(seed))
    return args, toks


def _rel(a, b):
    return (a - b).abs().amax(-1) / b.abs().amax(-1)


def _first_over(r, tol=1e-3):
    bad = (r > tol).nonzero()
    return int(bad[0]) if len(bad) else T


@pytest.mark.parametrize("fmt,seed,topk", CASES)
def test_default_decode_is_the_official_numerics(tmp_path, one_thread, fmt, seed, topk):
    args, toks = _case(tmp_path, fmt, seed, topk)
    assert (topk < T // 4) == (topk == 2)                     # below / above the number of CSA blocks
    want = OfficialOracle(tmp_path).logits(toks)
    twin = OfficialOracle(tmp_path, torch.float64).logits(toks)
    model = dsv4_model.load(tmp_path, max_seq_len=T + 8)      # default settings
    assert model.dtype == torch.bfloat16
    if fmt == "release":
        assert model.layers[1].ffn.experts.w1.fmt == "mxfp4" and model.layers[1].attn.wq_a.fmt == "fp8"
    got = model.score(toks)
    if fmt == "bf16":
        assert torch.equal(got, want), _rel(got, want).tolist()
        return
    r = _rel(got, want)
    assert r.max() <= 1e-5, r.tolist()
    assert _first_over(r) >= _first_over(_rel(twin, want)), (r.tolist(), _rel(twin, want).tolist())


@pytest.mark.parametrize("fmt,seed,topk", [("release", 1, 2), ("release", 2, 8)])
def test_graphsafe_decode_equals_the_reference_in_bf16(tmp_path, one_thread, fmt, seed, topk):
    """The graph-safe decode (fixed shapes, the whole ring and compressed list masked) on the official numerics:
    the same keys in the same 64-key blocks, so the same bits as the reference decode."""
    _, toks = _case(tmp_path, fmt, seed, topk)
    model = dsv4_model.load(tmp_path, max_seq_len=T + 8)
    ref = model.score(toks)
    dec = GraphSafeDecoder(model, batch=1)
    dec.reset()
    got = []
    for t in toks.tolist():
        dec.tokens[0] = t
        got.append(dec.step(1)[0].clone())
    assert torch.equal(torch.stack(got), ref), _rel(torch.stack(got), ref).tolist()


def test_attention_core_blocks_of_64_with_pads(one_thread):
    """The attention core over several 64-key blocks with -1 pads between the window and the compressed keys (the
    official index list at decode) against the oracle's sparse_attn: bit for bit in bf16."""
    from dsv4_kernels.attention.reference import attention_ref
    g = torch.Generator().manual_seed(0)
    H, D, N = 4, 128, 200
    q = (torch.randn(H, D, generator=g) * 2).bfloat16()
    K = torch.randn(N, D, generator=g).bfloat16()
    valid = torch.ones(N, dtype=torch.bool)
    valid[40:128] = False                                   # a window of 128 slots holding 40 tokens
    sink = torch.randn(H, generator=g)
    o = OfficialOracle.__new__(OfficialOracle)
    o.acc = torch.float32
    want = o.sparse_attn(q.float(), [K[i].float() if valid[i] else None for i in range(N)], sink)
    got = attention_ref(q.view(1, 1, H, D), K.view(1, 1, N, D), valid.view(1, 1, N), sink, D ** -0.5)
    assert torch.equal(got.bfloat16().float()[0, 0], want), (got[0, 0] - want).abs().max()


def test_indexer_score_chain_is_bf16(one_thread):
    """The indexer's scores as the official bf16 chain computes them (the dots, the weighted ReLU and the head sum
    each rounded to bf16), on FP4-simulated q and keys and bf16 head weights, bit for bit; an fp32 chain differs."""
    from dsv4_kernels.act_quant.reference import fp4_fake_quant_ref
    from dsv4_kernels.indexer.reference import index_scores_ref
    g = torch.Generator().manual_seed(0)
    Hi, Di, N = 8, 64, 50
    q = fp4_fake_quant_ref(torch.randn(Hi, Di, generator=g).bfloat16(), 32)
    k = fp4_fake_quant_ref(torch.randn(N, Di, generator=g).bfloat16(), 32)
    w = (torch.randn(Hi, generator=g) * 0.1).bfloat16()
    o = OfficialOracle.__new__(OfficialOracle)
    o.acc = torch.float32
    want = o.index_score(q.float(), k.float(), w.float())
    got = index_scores_ref(q.view(1, 1, Hi, Di), k.view(1, N, Di), w.view(1, 1, Hi))[0, 0]
    assert torch.equal(got, want), (got - want).abs().max()
    assert not torch.equal(want, (torch.relu(q.float() @ k.float().T) * w.float()[:, None]).sum(0))
