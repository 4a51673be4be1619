"""dsv4_model: configuration, checkpoints and their validation, every layer's formula, the correctness fixes,
prefill/decode agreement, precision policy, chat encoding, sampling and the CLI."""
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import dsv4_model
from conftest import ROOT
from dsv4_model import CheckpointError, config, quant
from dsv4_model.checkpoint import random_state, write_checkpoint
from dsv4_model.compressor import Compressor
from dsv4_model.generate import sample
from dsv4_model.linear import set_qweight
from dsv4_model.moe import swiglu
from dsv4_model.precision import DEFAULT_POLICY, parse_overrides
from dsv4_model.quant import QWeight
from dsv4_model.rope import apply_rope
from dsv4_kernels.compressor_reduce import compressor_reduce
from dsv4_kernels.fused_swiglu.reference import fused_swiglu_ref


@pytest.fixture(scope="module")
def model():
    # fp32 (the debugging dtype): these tests compare paths and formats within fp32 rounding
    return dsv4_model.load("tiny", max_seq_len=512, dtype=torch.float32)


def test_tiny_preset_covers_every_layer_kind(model):
    a = model.args
    assert a.n_layers >= 4 and {0, 4, 128} <= set(a.compress_ratios[: a.n_layers])
    assert a.n_hash_layers >= 1 and a.window_size <= 128
    root = dsv4_model.tiny()
    assert (root / "config.json").exists() and (root / "tokenizer.json").exists()
    assert any(n.endswith(".weight_scale") for n in _names(root))         # NVFP4 on disk, written by the real writer


def _names(root: Path) -> list[str]:
    from safetensors import safe_open
    out = []
    for f in root.glob("*.safetensors"):
        with safe_open(str(f), "pt") as fh:
            out += list(fh.keys())
    return out


def test_presets_and_config_keys():
    for preset in (config.tiny(), config.small(), config.flash(), config.pro()):
        preset.validate()
    cfg = json.loads((dsv4_model.tiny() / "config.json").read_text())
    a = config.args_from_config(cfg)
    assert a.compress_ratios == cfg["compress_ratios"]
    with pytest.raises(ValueError, match="compress_ratios"):
        config.args_from_config({k: v for k, v in cfg.items() if k != "compress_ratios"})


@pytest.mark.slow
def test_prefill_agrees_with_token_by_token_decode(model):
    """fp32, simulations off, index_topk >= #blocks (the indexer's zero ties make top-k order arbitrary)."""
    model.set_simulation(False)
    try:
        for layer in model.layers:
            if getattr(layer.attn, "indexer", None) is not None:
                layer.attn.indexer.topk = 10_000
        T = 320                                          # past the window wrap and two HCA blocks of 128
        toks = torch.randint(16, model.args.vocab_size, (1, T), generator=torch.Generator().manual_seed(3))
        pre = model.prefill(toks)[0]
        dec = model.score(toks[0])
        assert pre.shape == dec.shape == (T, model.args.vocab_size)
        err = (pre - dec).abs().max().item()
        assert err < 1e-4, err
    finally:
        model.set_simulation(True)
        for layer in model.layers:
            if getattr(layer.attn, "indexer", None) is not None:
                layer.attn.indexer.topk = model.args.index_topk


def test_compressor_bias_goes_on_logits_only():
    torch.manual_seed(0)
    kv, gate, bias = torch.randn(5, 8, 16), torch.randn(5, 8, 16), torch.randn(8, 16)
    right = (torch.softmax(gate + bias, dim=-2) * kv).sum(-2)
    wrong = (torch.softmax(gate, dim=-2) * (kv + bias)).sum(-2)
    got = compressor_reduce(kv, gate, bias)
    assert torch.allclose(got, right, atol=1e-6) and not torch.allclose(got, wrong, atol=1e-3)


@pytest.mark.parametrize("ratio", [4, 128])
def test_compressor_module_pools_with_ape_on_the_score(ratio):
    """A whole CSA/HCA block through Compressor.step vs the spec formula computed here."""
    torch.manual_seed(1)
    dim, D, rd = 32, 16, 8
    comp = Compressor(dim, D, ratio, rd, 1e-6, torch.float32, 1, 4 * ratio)
    for t in [*comp.parameters(), comp.wkv.weight, comp.wgate.weight]:
        t.data.normal_()
    cs = _cs(4 * ratio, rd // 2)
    xs = torch.randn(2 * ratio, 1, 1, dim)
    for pos in range(2 * ratio):
        comp.step(*comp.project(xs[pos]), pos, cs, lambda c: c)
    C = torch.stack([comp.wkv(x).float()[0, 0] for x in xs])
    Z = torch.stack([comp.wgate(x).float()[0, 0] for x in xs])
    b = 1                                            # the second block; CSA also sees block 0's first half
    if ratio == 4:
        rows_c = torch.cat([C[:4, :D], C[4:8, D:]])
        rows_z = torch.cat([Z[:4, :D], Z[4:8, D:]])
        ape = torch.cat([comp.ape[:, :D], comp.ape[:, D:]])
    else:
        rows_c, rows_z, ape = C[ratio:], Z[ratio:], comp.ape
    pooled = (torch.softmax(rows_z + ape, 0) * rows_c).sum(0)
    expected = comp.finish(pooled.view(1, D), cs[b * ratio], lambda c: c)
    assert torch.allclose(comp.entries[0, b], expected[0], atol=1e-5)
    wrong = (torch.softmax(rows_z, 0) * (rows_c + ape)).sum(0)
    assert not torch.allclose(comp.entries[0, b], comp.finish(wrong.view(1, D), cs[b * ratio], lambda c: c)[0], atol=1e-3)


def test_swiglu_clamps_the_raw_gate_before_silu():
    L = 10.0
    g = torch.tensor([20.0, 5.0, -30.0])
    u = torch.tensor([1.0, 50.0, 1.0])
    right = F.silu(g.clamp(max=L)) * u.clamp(-L, L)
    wrong = F.silu(g).clamp(max=L) * u.clamp(-L, L)
    assert torch.equal(swiglu(g, u, L), right) and not torch.equal(swiglu(g, u, L), wrong)
    h = torch.cat([g, u]).view(1, 6)
    assert torch.equal(fused_swiglu_ref(h, L, "split"), right.view(1, 3))
    inter = torch.stack([g, u], -1).reshape(1, 6)
    assert torch.equal(fused_swiglu_ref(inter, L, "interleaved"), right.view(1, 3))


def _moe_checkpoint(tmp_path, **overrides):
    """A tiny checkpoint whose layer-0 shared and routed gates run far above swiglu_limit."""
    args = dataclasses.replace(config.tiny(), **overrides)
    st = random_state(args, seed=2)
    st["layers.0.ffn.shared_experts.w1.weight"] *= 40
    write_checkpoint(tmp_path, args, st, fmt="fp32", naming="native")
    return dsv4_model.load(tmp_path, dtype=torch.float32), st      # fp32: the clamp semantics, not the rounding


def _swiglu_ffn(x, w1, w3, w2, limit):
    g, u = x @ w1.T, x @ w3.T
    if limit:
        g, u = g.clamp(max=limit), u.clamp(-limit, limit)
    return (F.silu(g) * u) @ w2.T


@pytest.mark.parametrize("hf_clamp", [False, True])
def test_shared_expert_is_unclamped_unless_configured(tmp_path, hf_clamp):
    """The official shared expert has no swiglu_limit; shared_expert_clamp=True gives HF's clamped one."""
    model, st = _moe_checkpoint(tmp_path, shared_expert_clamp=hf_clamp)
    w = [st[f"layers.0.ffn.shared_experts.{n}.weight"] for n in ("w1", "w3", "w2")]
    x = torch.randn(5, model.args.dim)
    assert (x @ w[0].T).max() > model.args.swiglu_limit                      # the clamp would bite
    got = model.layers[0].ffn.shared_experts(x)
    unclamped = _swiglu_ffn(x, *w, None)
    clamped = _swiglu_ffn(x, *w, model.args.swiglu_limit)
    want, other = (clamped, unclamped) if hf_clamp else (unclamped, clamped)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-4) and not torch.allclose(got, other, rtol=1e-3, atol=1e-2)


def test_routed_experts_clamp_and_swiglu_limit_zero_means_none(tmp_path):
    """Routed experts clamp at swiglu_limit through the stacked weights; swiglu_limit=0 is the reference's 'no clamp'."""
    for limit in (10.0, 0.0):
        model, st = _moe_checkpoint(tmp_path / str(limit), swiglu_limit=limit)
        ex = model.layers[0].ffn.experts
        w = [st[f"layers.0.ffn.experts.3.{n}.weight"] * s for n, s in (("w1", 40), ("w3", 40), ("w2", 1))]
        x = torch.randn(4, model.args.dim)
        ex._buffers["w1_weight"][3] *= 40
        ex._buffers["w3_weight"][3] *= 40
        got = ex(x, 3)
        want = _swiglu_ffn(x, *w, limit or None)
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-3), limit
        assert not torch.allclose(got, _swiglu_ffn(x, *w, None if limit else 10.0), rtol=1e-3, atol=1e-2)


def test_hash_routing_table_has_distinct_experts(model):
    gate = model.layers[0].ffn.gate
    assert gate.hash
    t = gate.tid2eid
    assert t.shape == (model.args.vocab_size, model.args.n_activated_experts)
    assert all(len(set(r.tolist())) == t.shape[1] for r in t)
    assert int(t.max()) < model.args.n_routed_experts and int(t.min()) >= 0


def test_router_bias_selects_but_does_not_weight():
    from dsv4_model.moe import Gate
    args = config.tiny()
    g = Gate(args, layer=args.n_hash_layers, dtype=torch.float32)
    g.weight.normal_()
    x = torch.randn(4, args.dim)
    w0, i0 = g(x, torch.zeros(4, dtype=torch.long))
    g.bias.data[:] = 0
    g.bias.data[0] = 100.0                          # forces expert 0 into every selection
    w1, i1 = g(x, torch.zeros(4, dtype=torch.long))
    assert (i1 == 0).any(-1).all()
    scores = F.softplus(x @ g.weight.T).sqrt()
    exp = scores.gather(-1, i1)
    assert torch.allclose(w1, exp / exp.sum(-1, keepdim=True) * args.route_scale)


def test_mhc_sinkhorn_is_doubly_stochastic(model):
    hc = model.layers[0].hc_attn
    X = torch.randn(1, 1, model.args.hc_mult, model.args.dim)
    _, post, comb = hc.pre(X)
    c = comb.reshape(-1, model.args.hc_mult, model.args.hc_mult)
    assert torch.allclose(c.sum(-2), torch.ones_like(c.sum(-2)), atol=1e-5)      # columns exactly normalised last
    assert torch.allclose(c.sum(-1), torch.ones_like(c.sum(-1)), atol=1e-2)
    assert ((post > 0) & (post < 2)).all()


def _cs(n: int, half: int) -> torch.Tensor:
    ang = torch.randn(n, half)
    return torch.stack([ang.cos(), ang.sin()], -1)


def test_rope_round_trip():
    x = torch.randn(2, 3, 8)
    cs = _cs(3, 4)
    assert torch.allclose(apply_rope(apply_rope(x, cs), cs, inverse=True), x, atol=1e-6)


def test_nvfp4_weight_round_trip_and_grid():
    w = torch.randn(32, 64)
    q = quant.quantize_nvfp4_weight(w)
    assert q["weight"].dtype == torch.uint8 and q["weight"].shape == (32, 32)
    assert q["weight_scale"].dtype == torch.float8_e4m3fn and q["weight_scale"].shape == (32, 4)
    d = quant.dequant_nvfp4_weight(q["weight"], q["weight_scale"], q["weight_scale_2"])
    assert d.shape == w.shape and (d - w).abs().max() < 0.5 * w.abs().max()
    q2 = quant.quantize_nvfp4_weight(d)
    assert torch.equal(quant.dequant_nvfp4_weight(q2["weight"], q2["weight_scale"], q2["weight_scale_2"]), d)


def test_kvcache_dequant_wrapper_rejects_bad_inputs():
    from dsv4_kernels.nvfp4_kvcache import dequantize_nvfp4_kvcache
    M, N = 4, 64
    fp4 = torch.randint(0, 255, (M, N // 2), dtype=torch.uint8)
    sf = torch.rand(M, N // 16).to(torch.float8_e4m3fn)
    gs = torch.ones(M)
    out = dequantize_nvfp4_kvcache(fp4, sf, gs, M, N)
    assert out.shape == (M, N)
    with pytest.raises(ValueError, match=r"sf.numel\(\)=12 < M\*\(N/16\)=16"):
        dequantize_nvfp4_kvcache(fp4, sf[:3], gs, M, N)
    with pytest.raises(ValueError, match="fp4.numel"):
        dequantize_nvfp4_kvcache(fp4[:2], sf, gs, M, N)
    with pytest.raises(ValueError, match="contiguous"):
        dequantize_nvfp4_kvcache(fp4, torch.rand(N // 16, M).to(torch.float8_e4m3fn).t(), gs, M, N)
    with pytest.raises(TypeError, match="uint8"):
        dequantize_nvfp4_kvcache(fp4.int(), sf, gs, M, N)
    with pytest.raises(ValueError, match="multiple of 16"):
        dequantize_nvfp4_kvcache(fp4, sf, gs, M, 60)


@pytest.mark.parametrize("fmt,naming,shard", [("fp32", "native", None), ("bf16", "hf", None), ("nvfp4", "hf", 200_000),
                                             ("native-fp8", "native", None)])
def test_checkpoint_formats_load(tmp_path, fmt, naming, shard):
    args = config.tiny()
    write_checkpoint(tmp_path, args, random_state(args, seed=2), fmt=fmt, naming=naming, shard_bytes=shard)
    if shard:
        assert (tmp_path / "model.safetensors.index.json").exists()
    m = dsv4_model.load(tmp_path)
    out = m.decode_step(torch.tensor([20]))
    assert out.shape == (1, args.vocab_size) and torch.isfinite(out).all()


def _tiny_copy(tmp_path) -> Path:
    args = config.tiny()
    write_checkpoint(tmp_path, args, random_state(args, seed=2), fmt="fp32", naming="native")
    return tmp_path


def _edit(root: Path, fn):
    from safetensors.torch import load_file, save_file
    f = next(root.glob("*.safetensors"))
    sd = load_file(str(f))
    fn(sd)
    save_file(sd, str(f))


def test_missing_tensor_named(tmp_path):
    root = _tiny_copy(tmp_path)
    _edit(root, lambda sd: sd.pop("layers.1.attn.wkv.weight"))
    with pytest.raises(CheckpointError, match="layers.1.attn.wkv.weight"):
        dsv4_model.load(root)


def test_wrong_shape_named(tmp_path):
    root = _tiny_copy(tmp_path)
    _edit(root, lambda sd: sd.__setitem__("head.weight", sd["head.weight"][:, :-1].clone()))
    with pytest.raises(CheckpointError, match=r"head.weight.*expected"):
        dsv4_model.load(root)


def test_unexpected_tensor_named(tmp_path):
    root = _tiny_copy(tmp_path)
    _edit(root, lambda sd: sd.__setitem__("layers.0.attn.bogus.weight", torch.zeros(2)))
    with pytest.raises(CheckpointError, match="bogus"):
        dsv4_model.load(root)


def test_truncated_file_named(tmp_path):
    root = _tiny_copy(tmp_path)
    f = next(root.glob("*.safetensors"))
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=f.name):
        dsv4_model.load(root)


def test_non_finite_scale_named(tmp_path):
    args = config.tiny()
    write_checkpoint(tmp_path, args, random_state(args, seed=2), fmt="nvfp4", naming="hf")

    def poison(sd):
        k = next(k for k in sorted(sd) if k.endswith("weight_scale_2"))
        sd[k] = torch.tensor(float("nan"))
        poison.key = k
    _edit(tmp_path, poison)
    with pytest.raises(CheckpointError, match="non-finite"):
        dsv4_model.load(tmp_path)


def test_precision_policy_names_and_overrides():
    assert DEFAULT_POLICY == "faithful"
    p = parse_overrides(None)
    assert set(p.values()) == {"stored"}
    p = parse_overrides(["floor", "routed_experts=nvfp4"])
    assert p["lm_head"] == p["router_gate"] == p["compressor"] == "bf16" and p["routed_experts"] == "nvfp4"
    assert p["indexer_q_b_proj"] == "stored"                                     # the QAT-trained QK path stays
    with pytest.raises(ValueError, match="lm_headz"):
        parse_overrides(["lm_headz=fp8"])
    with pytest.raises(ValueError, match="fp3"):
        parse_overrides(["lm_head=fp3"])
    with pytest.raises(ValueError, match="flor"):
        parse_overrides(["flor"])


def test_default_is_format_faithful(tmp_path):
    """Plain weights compute plain (no activation simulation); the tiny ModelOpt checkpoint computes as stored."""
    args = config.tiny()
    write_checkpoint(tmp_path, args, random_state(args, seed=2), fmt="fp32", naming="native")
    m = dsv4_model.load(tmp_path)
    fmts = {f for mod in m.modules() if hasattr(mod, "fmts") for f in mod.fmts.values()}
    assert fmts == {"plain"}
    lin = m.layers[1].attn.wq_a
    x = torch.randn(3, args.dim, dtype=lin.weight.dtype)                          # the activations' dtype (bf16)
    assert torch.equal(lin(x), x @ lin.weight.T)                                  # no activation simulation
    tiny = dsv4_model.load("tiny")
    assert tiny.layers[1].ffn.experts.w1.fmt == "nvfp4" and tiny.layers[1].attn.wq_b.fmt == "fp8"
    assert tiny.layers[1].attn.indexer.wq_b.fmt == "fp8" and tiny.head.fmt == "plain"
    # a deployment format on plain weights only by explicit opt-in
    sim = dsv4_model.load(tmp_path, precision=["routed_experts=nvfp4"])
    assert sim.layers[1].ffn.experts.w2.fmt == "nvfp4" and sim.layers[1].attn.wq_a.fmt == "plain"
    t = torch.tensor([30])
    assert not torch.equal(m.decode_step(t), sim.decode_step(t))


def test_floor_policy_dequantises_helpers_of_a_quantised_checkpoint(tmp_path):
    args = config.tiny()
    write_checkpoint(tmp_path, args, random_state(args, seed=2), fmt="nvfp4", naming="hf")
    m = dsv4_model.load(tmp_path, precision="floor")
    a = m.layers[1].attn
    assert m.head.fmt == m.layers[3].ffn.gate.fmt == a.compressor.wkv.fmt == a.indexer.weights_proj.fmt == "plain"
    # BF16 values (the floor), held as bf16 under the fp32 product the reference computes the projection in
    w = a.indexer.compressor.wgate.qweight.data
    assert w.dtype == torch.bfloat16 and a.indexer.compressor.wgate.dtype == torch.float32
    assert a.indexer.wq_b.fmt == "nvfp4" and m.layers[1].ffn.experts.w1.fmt == "nvfp4" and a.wq_a.fmt == "nvfp4"
    assert a.wo_a.fmt == "plain"                                                  # dequantised, as the reference


def test_bf16_weights_under_fp32_products_are_held_as_stored():
    """A bf16 checkpoint's head, router and compressor projections (the reference computes them in fp32) stay bf16:
    half the bytes held and read, and the logits are bit for bit those of fp32-held copies (bf16 is exact in fp32;
    the product widens the weight for the call only). Every other plain weight is held in its module's dtype."""
    from dsv4_model.linear import get_qweight, set_qweight
    from dsv4_model.quant import QWeight
    m = dsv4_model.load("tiny", dtype=torch.bfloat16)
    plain = [mod for mod in m.modules() if getattr(mod, "fmts", {}).get("") == "plain"]
    up = [mod for mod in plain if mod.dtype == torch.float32]
    assert m.head in up and m.layers[0].ffn.gate in up and m.layers[1].attn.compressor.wkv in up and len(up) >= 5
    assert {get_qweight(mod).data.dtype for mod in up} == {torch.bfloat16}
    assert {get_qweight(mod).data.dtype == mod.dtype for mod in plain if mod not in up} == {True}
    held = sum(get_qweight(mod).data.nbytes for mod in up)
    t = torch.tensor([7, 300, 2])
    want = [m.decode_step(t[i:i + 1]) for i in range(3)]
    for mod in up:
        set_qweight(mod, "", QWeight("plain", get_qweight(mod).data.float()))
    assert sum(get_qweight(mod).data.nbytes for mod in up) == 2 * held
    m.reset()
    assert all(torch.equal(m.decode_step(t[i:i + 1]), want[i]) for i in range(3))


def test_tokenizer_round_trip_and_specials(tmp_path):
    from dsv4_model.tokenizer import ByteTokenizer
    tok = ByteTokenizer.load(dsv4_model.tiny() / "tokenizer.json")
    text = "<｜begin▁of▁sentence｜>héllo<｜User｜>"
    ids = tok.encode(text)
    assert ids[0] == tok.encode("<｜begin▁of▁sentence｜>")[0] < 16 and tok.decode(ids) == text


def test_sampling():
    logits = torch.tensor([[0.0, 5.0, 1.0, -1.0]])
    assert sample(logits, temperature=0.0).item() == 1
    g = torch.Generator().manual_seed(0)
    picks = {sample(logits, temperature=1.0, top_k=2, generator=g).item() for _ in range(200)}
    assert picks <= {1, 2} and len(picks) == 2


@pytest.mark.slow
def test_generate_and_score_cli(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    g = subprocess.run([sys.executable, "-m", "dsv4_model", "generate", "--prompt", "hi", "--max-new-tokens", "4",
                        "--temperature", "0"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert g.returncode == 0, g.stderr
    s = subprocess.run([sys.executable, "-m", "dsv4_model", "score", "--tokens", "20,21,22", "--out", "l.pt"],
                       capture_output=True, text=True, env=env, cwd=tmp_path)
    assert s.returncode == 0, s.stderr
    assert torch.load(tmp_path / "l.pt").shape[0] == 3
    bad = subprocess.run([sys.executable, "-m", "dsv4_model", "score", "--tokens", "1,x"], capture_output=True, text=True,
                         env=env, cwd=tmp_path)
    assert bad.returncode != 0 and "--tokens" in bad.stderr
    nock = subprocess.run([sys.executable, "-m", "dsv4_model", "generate", "--prompt", "x", "--checkpoint", "nowhere"],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert nock.returncode == 2 and "nowhere" in nock.stderr


def test_rmsnorm_and_unweighted_rms_formulas():
    from dsv4_model.linear import RMSNorm, unweighted_rms
    x = torch.randn(3, 16)
    n = RMSNorm(16, 1e-6)
    n.weight.data = torch.rand(16)
    assert torch.allclose(n(x), n.weight * x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6), atol=1e-6)
    assert torch.allclose(unweighted_rms(x, 1e-6), x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6), atol=1e-6)


def test_mhc_post_and_head_formulas(model):
    hc, d = model.args.hc_mult, model.args.dim
    X = torch.randn(1, 1, hc, d)
    y = torch.randn(1, 1, d)
    post = torch.rand(1, 1, hc) * 2
    comb = torch.rand(1, 1, hc, hc)
    got = model.layers[0].hc_attn.post(y, X, post, comb)
    want = torch.stack([post[0, 0, k] * y[0, 0] + sum(comb[0, 0, j, k] * X[0, 0, j] for j in range(hc)) for k in range(hc)])
    assert torch.allclose(got[0, 0], want, atol=1e-5)
    head = model.hc_head
    f = X.flatten(-2)
    pre = torch.sigmoid((f @ head.fn.T) / torch.sqrt(f.pow(2).mean(-1, keepdim=True) + head.norm_eps) * head.scale + head.base) + head.eps
    assert torch.allclose(head(X), (pre.unsqueeze(-1) * X).sum(-2), atol=1e-5)


def test_attention_sink_takes_mass_without_value(model):
    """Attention.attend with a per-head sink vs the formula: p_j = e^s_j / (sum e^s + e^sink), o = sum p_j K_j,
    de-rotated, then the grouped output projection. A huge sink leaves (almost) nothing; a tiny one is plain softmax."""
    from dsv4_model.rope import rope_tail
    attn = model.layers[0].attn
    H, D, rd = attn.H, attn.D, attn.rd
    g = torch.Generator().manual_seed(0)
    q, K = torch.randn(1, 1, H, D, generator=g), torch.randn(1, 1, 6, D, generator=g)
    cs = model.rope_main[5:6]
    old = attn.attn_sink.data.clone()
    try:
        for sink in (torch.tensor([0.3, -1.0]), torch.full((H,), 60.0), torch.full((H,), -60.0)):
            attn.attn_sink.data = sink
            s = torch.einsum("hd,nd->hn", q[0, 0], K[0, 0]) / D ** 0.5
            p = s.exp() / (s.exp().sum(-1, keepdim=True) + sink.exp()[:, None])
            o = rope_tail(p @ K[0, 0], cs[0], rd, inverse=True).reshape(attn.G, -1)
            wa = dsv4_model.dequant(attn.wo_a.qweight).view(attn.G, attn.R, -1)
            want = attn.wo_b(torch.einsum("gi,gri->gr", o, wa).flatten().view(1, 1, -1))
            got = attn.attend(q, K, None, cs)
            assert torch.allclose(got, want, atol=1e-5), sink
            if sink[0] > 50:                                   # the sink takes all the mass and adds no value
                assert got.abs().max() < 1e-6
            if sink[0] < -50:
                plain = torch.softmax(s, -1)
                o2 = rope_tail(plain @ K[0, 0], cs[0], rd, inverse=True).reshape(attn.G, -1)
                assert torch.allclose(got, attn.wo_b(torch.einsum("gi,gri->gr", o2, wa).flatten().view(1, 1, -1)), atol=1e-5)
    finally:
        attn.attn_sink.data = old


def test_score_cli_refuses_bad_outputs_and_inputs(tmp_path, capsys, monkeypatch):
    from dsv4_model.__main__ import main
    ck = _tiny_copy(tmp_path / "ck")
    before = {p.name: p.read_bytes() for p in ck.iterdir()}
    cases = [
        (["--checkpoint", str(ck), "--tokens", "20,21", "--out", str(ck / "model.safetensors")], "checkpoint"),
        (["--checkpoint", str(ck), "--tokens", "20,21", "--out", str(ck / "config.json")], "checkpoint"),
        (["--checkpoint", str(ck), "--tokens", "20", "--out", str(tmp_path)], "is a directory"),
        (["--checkpoint", str(ck), "--tokens", "20", "--out", str(tmp_path / "nope" / "l.pt")], "does not exist"),
        (["--checkpoint", str(ck), "--tokens", " , ", "--out", str(tmp_path / "l.pt")], "empty"),
        (["--checkpoint", str(ck), "--tokens", "1,x", "--out", str(tmp_path / "l.pt")], "--tokens"),
        (["--checkpoint", str(ck), "--tokens", "99999", "--out", str(tmp_path / "l.pt")], "outside the vocabulary"),
    ]
    if not torch.cuda.is_available():
        cases.append((["--checkpoint", str(ck), "--device", "cuda", "--tokens", "20", "--out", str(tmp_path / "l.pt")],
                      "no CUDA device"))
    for argv, match in cases:
        assert main(["score", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert match in err and err.count("\n") == 1, (argv, err)
    assert {p.name: p.read_bytes() for p in ck.iterdir()} == before
    assert not (tmp_path / "l.pt").exists()
    assert main(["score", "--checkpoint", str(ck), "--tokens", "20,21", "--out", str(tmp_path / "l.pt")]) == 0
    assert torch.load(tmp_path / "l.pt").shape == (2, config.tiny().vocab_size)


def _cuda_like_table():
    """The CPU kernel table with the stored-format GEMV in its slot and marked CUDA: what makes `Joined` join (on
    CPU the GEMV takes FP8 weights through its dequantising reference)."""
    from dsv4_kernels.moe_gemv import weight_gemv
    from dsv4_model.decode import KernelTable, decode_kernels
    return KernelTable({**decode_kernels(torch.device("cpu")).fns, "gemv": weight_gemv}, True, "CPU as CUDA")


def test_joined_projections_are_the_products_apart(monkeypatch):
    """`linear.Joined` under a CUDA table (what the decode's kernels do at load): the shared expert's w1 and w3 and an
    attention's wq_a and wkv (FP8, 128x128 block scales) become row blocks of one weight and its scales (views: no
    second copy; the state dict unchanged), and one product gives each projection's output as its own product does;
    a weight replaced after the join (a new checkpoint tensor) is read as it now is, never from the joined copy; a
    table without the GEMV leaves them apart; formats that cannot stack (another format, blocks not whole 128 rows)
    are not joined."""
    from dsv4_model import linear
    from dsv4_model.attention import Attention
    from dsv4_model.moe import Expert
    g = torch.Generator().manual_seed(4)
    assert linear.JOIN_PROJECTIONS       # the default since run 72's A/B (a layer 8 us faster at B=1)
    off = Expert(256, 384, None, torch.bfloat16)
    for n in ("w1", "w3"):
        set_qweight(getattr(off, n), "", quant.quantize(torch.randn(384, 256, generator=g), "fp8"))
    monkeypatch.setattr(linear, "JOIN_PROJECTIONS", False)    # switched off: apart
    off.gate_up.use_kernels(off, _cuda_like_table())
    assert off.gate_up.weight is None
    monkeypatch.setattr(linear, "JOIN_PROJECTIONS", True)
    a = config.tiny()
    a.dim, a.q_lora_rank, a.head_dim, a.n_heads, a.o_groups = 256, 256, 128, 2, 2
    ex = Expert(256, 384, None, torch.bfloat16)
    att = Attention(a, 0, torch.bfloat16, 1)
    for owner, names in ((ex, ("w1", "w3")), (att, ("wq_a", "wkv"))):
        for n in names:
            lin = getattr(owner, n)
            set_qweight(lin, "", quant.quantize(torch.randn(lin.out_features, lin.in_features, generator=g) / 16, "fp8"))
        joined = ex.gate_up if owner is ex else att.x_proj
        x = torch.randn(3, 1, 256, generator=g).bfloat16()
        apart = [getattr(owner, n)(x) for n in names]
        state = {k: v.clone() for k, v in owner.state_dict().items()}
        joined.use_kernels(owner, _cuda_like_table())
        w = joined.weight
        assert w is not None and w.fmt == "fp8" and w.data.shape[0] == sum(getattr(owner, n).out_features for n in names)
        at = 0
        for n in names:
            qw = getattr(owner, n).qweight
            assert qw.data.untyped_storage().data_ptr() == w.data.untyped_storage().data_ptr()
            assert qw.data.data_ptr() == w.data[at:].data_ptr() and qw.scale.data_ptr() == w.scale[at // 128:].data_ptr()
            at += qw.data.shape[0]
        assert state.keys() == owner.state_dict().keys()
        assert all(torch.equal(v.float(), owner.state_dict()[k].float()) for k, v in state.items())
        together = joined(owner, x)
        assert [t.shape for t in together] == [t.shape for t in apart]
        for t, want in zip(together, apart):
            torch.testing.assert_close(t, want, rtol=0, atol=0)
        # a new checkpoint tensor for the second projection: read as it now is
        lin = getattr(owner, names[1])
        new = quant.quantize(torch.randn(lin.out_features, lin.in_features, generator=g) / 16, "fp8")
        set_qweight(lin, "", new)
        again = joined(owner, x)
        assert joined.weight is None and torch.equal(again[1], lin(x)) and torch.equal(again[0], apart[0])
    # no GEMV in the table: apart; blocks that are not whole 128-row scale blocks, or another format: not joined
    from dsv4_model.decode import decode_kernels
    ex2 = Expert(256, 200, None, torch.bfloat16)
    for n in ("w1", "w3"):
        set_qweight(getattr(ex2, n), "", quant.quantize(torch.randn(200, 256, generator=g), "fp8"))
    ex2.gate_up.use_kernels(ex2, decode_kernels(torch.device("cpu")))
    assert ex2.gate_up.weight is None
    ex2.gate_up.use_kernels(ex2, _cuda_like_table())
    assert ex2.gate_up.weight is None
    set_qweight(ex2.w1, "", quant.quantize(torch.randn(256, 256, generator=g), "mxfp4"))
    set_qweight(ex2.w3, "", quant.quantize(torch.randn(256, 256, generator=g), "fp8"))
    ex2.gate_up.use_kernels(ex2, _cuda_like_table())
    assert ex2.gate_up.weight is None


def test_joined_compressor_projections_are_the_two_products():
    """`Compressor.join` (what a CUDA kernel table does at load): wkv's and wgate's weights become the halves of one
    tensor (views: no second copy; the state dict unchanged) and `project` takes both products in one call, C and Z
    as the two modules give them."""
    torch.manual_seed(3)
    comp = Compressor(32, 16, 4, 8, 1e-6, torch.float32, 1, 16)
    for lin in (comp.wkv, comp.wgate):
        set_qweight(lin, "", QWeight("plain", torch.randn(32, 32).bfloat16()))
    x = torch.randn(2, 1, 32).bfloat16()
    C0, Z0 = comp.project(x)
    state = {k: v.clone() for k, v in comp.state_dict().items()}
    comp.join()
    assert comp.joint is not None and comp.joint.shape == (64, 32)
    for half, lin in zip(comp.joint.chunk(2), (comp.wkv, comp.wgate)):
        assert lin.weight.data_ptr() == half.data_ptr() and lin.weight.untyped_storage().data_ptr() == \
            comp.joint.untyped_storage().data_ptr()
    assert state.keys() == comp.state_dict().keys() and all(torch.equal(v, comp.state_dict()[k]) for k, v in state.items())
    C1, Z1 = comp.project(x)
    assert C1.dtype == Z1.dtype == torch.float32 and torch.equal(C1, C0) and torch.equal(Z1, Z0)
    comp.join()                                     # a second table: joined once
    assert comp.wkv.weight.data_ptr() == comp.joint.data_ptr()
    # a weight replaced after the join (a new checkpoint tensor): its own product, never the joined copy's old values
    new = torch.randn(32, 32).bfloat16()
    set_qweight(comp.wkv, "", QWeight("plain", new))
    C2, Z2 = comp.project(x)
    assert comp.joint is None and torch.equal(C2, x.float() @ new.float().T) and torch.equal(Z2, Z0)
