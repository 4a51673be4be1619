"""Checkpoint layouts, the stored-format weights (QWeight) and their semantics, and load-time validation."""
import logging

import pytest
import torch

import dsv4_model
from dsv4_model import CheckpointError, QWeight, config, quant
from dsv4_model.checkpoint import random_state, write_checkpoint

EXPECT = {  # checkpoint format -> (routed experts, attention wq_a, shared expert, indexer wq_b, head) as held
    "fp32": ("plain", "plain", "plain", "plain", "plain"),
    "bf16": ("plain", "plain", "plain", "plain", "plain"),
    "release": ("mxfp4", "fp8", "fp8", "fp8", "plain"),
    "release-fp4x2": ("mxfp4", "fp8", "fp8", "fp8", "plain"),
    "modelopt": ("nvfp4", "fp8", "fp8", "fp8", "plain"),
    "nvfp4": ("nvfp4", "nvfp4", "nvfp4", "nvfp4", "nvfp4"),
}


@pytest.fixture(scope="module")
def state():
    return random_state(config.tiny(), seed=2)


@pytest.mark.parametrize("fmt,naming", [("fp32", "native"), ("bf16", "hf"), ("release", "native"),
                                        ("release-fp4x2", "native"), ("modelopt", "native"), ("nvfp4", "hf")])
def test_layouts_load_in_stored_format(tmp_path, state, fmt, naming):
    args = config.tiny()
    write_checkpoint(tmp_path, args, state, fmt=fmt, naming=naming, shard_bytes=150_000)
    assert (tmp_path / "model.safetensors.index.json").exists()
    m = dsv4_model.load(tmp_path)
    L = m.layers[1]
    held = (L.ffn.experts.w1.fmt, L.attn.wq_a.fmt, L.ffn.shared_experts.w1.fmt, L.attn.indexer.wq_b.fmt, m.head.fmt)
    assert held == EXPECT[fmt]
    E, I, d = args.n_routed_experts, args.moe_inter_dim, args.dim
    w1, w2 = L.ffn.experts.w1, L.ffn.experts.w2
    assert w1.shape == (E, I, d) and w2.shape == (E, d, I)                          # stacked per projection
    if w1.fmt == "mxfp4":
        assert w1.data.dtype == torch.uint8 and w1.data.shape == (E, I, d // 2) and w1.scale.shape == (E, I, d // 32)
    if w1.fmt == "nvfp4":
        assert w1.scale.dtype == torch.float8_e4m3fn and w1.scale2.shape == (E,) and w1.input_scale.shape == (E,)
    # the stacks hold exactly what the writer quantised: expert 3's dequantised w2 is the same as quantising it here
    ref = quant.quantize(state["layers.1.ffn.experts.3.w2.weight"], w2.fmt) if w2.fmt != "plain" else None
    got = quant.dequant(w2, index=3)
    want = quant.dequant(ref) if ref is not None else state["layers.1.ffn.experts.3.w2.weight"].to(w2.data.dtype).float()
    assert torch.equal(got, want)
    out = m.decode_step(torch.tensor([20]))
    assert out.shape == (1, args.vocab_size) and torch.isfinite(out).all()


def test_dequant_index_selects_experts_like_a_loop():
    w = torch.randn(4, 32, 64)
    for fmt in quant.FORMATS:
        qw = quant.quantize(w, fmt, input_scale=torch.full((4,), 0.01) if fmt == "nvfp4" else None)
        idx = torch.tensor([2, 0, 2])
        assert torch.equal(quant.dequant(qw, idx), torch.stack([quant.dequant(qw, int(i)) for i in idx]))
        assert qw.shape == (4, 32, 64) and isinstance(qw.select(1), QWeight)
        assert (quant.dequant(qw) - w).abs().max() < 0.6 * w.abs().max()


def test_act_sim_per_format():
    x = torch.randn(3, 256) * 5
    assert quant.act_sim(x, "plain") is x
    for fmt in ("fp8", "mxfp4"):                  # the reference's act_quant: 1x128 blocks, power-of-two scales
        y = quant.act_sim(x, fmt)
        blocks = x.view(3, 2, 128)
        s = torch.exp2(torch.ceil(torch.log2(blocks.abs().amax(-1, keepdim=True) / 448)))
        assert torch.equal(y, ((blocks / s).to(torch.float8_e4m3fn).float() * s).view(3, 256))
    # NVFP4 W4A4: per-16 e4m3 block scales relative to the checkpoint's input_scale (amax / (6*448))
    y = quant.act_sim(x, "nvfp4", x.abs().max() / (6 * 448))
    assert not torch.equal(y, x) and (y - x).abs().max() < x.abs().max() / 4
    clipped = quant.act_sim(x, "nvfp4", torch.tensor(1.0 / 448))          # a calibrated amax of 6: |x| > 6 saturates
    assert clipped.abs().max() == 6.0
    with pytest.raises(ValueError, match="fp5"):
        quant.act_sim(x, "fp5")


def test_e2m1_rounds_ties_to_even():
    v = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.75, 7.0])
    got = quant.e2m1_table(v.device)[quant.quantize_e2m1(v).long()]
    assert got.tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -1.0, 6.0]


def _write(tmp_path, fmt="fp32", **kw):
    args = config.tiny()
    write_checkpoint(tmp_path, args, random_state(args, seed=2), fmt=fmt, naming="native", **kw)
    return tmp_path


def _edit(root, fn):
    from safetensors.torch import load_file, save_file
    f = next(root.glob("*.safetensors"))
    sd = load_file(str(f))
    fn(sd)
    save_file(sd, str(f))


@pytest.mark.parametrize("fmt,name,poison", [
    ("fp32", "layers.2.attn.wkv.weight", lambda t: t.index_put_((torch.tensor([3]), torch.tensor([5])), torch.tensor(float("nan")))),
    ("fp32", "norm.weight", lambda t: t.fill_(float("inf"))),
    ("release", "layers.1.attn.wq_b.scale", lambda t: t.view(torch.uint8).fill_(0xFF)),
    ("release", "layers.1.ffn.shared_experts.w2.weight", lambda t: t.view(torch.uint8).__setitem__((0, 0), 0x7F)),
])
def test_non_finite_weight_is_a_one_line_error_naming_it(tmp_path, fmt, name, poison):
    root = _write(tmp_path, fmt)

    def edit(sd):
        t = sd[name].clone()
        poison(t)
        sd[name] = t
    _edit(root, edit)
    with pytest.raises(CheckpointError, match=rf"{name}.*non-finite") as e:
        dsv4_model.load(root)
    assert "\n" not in str(e.value)


def test_malformed_mtp_tensors_are_named_or_ignored_on_request(tmp_path, caplog):
    args = config.tiny()
    write_checkpoint(tmp_path, args, random_state(args, seed=2, mtp=False), fmt="fp32", naming="native",
                     extra={"mtp.0.e_proj.weight": torch.zeros(4, 4), "mtp.0.norm.weight": torch.ones(4)})
    with pytest.raises(CheckpointError, match=r"mtp\.0\.") as e:      # read by default: an incomplete block is an error
        dsv4_model.load(tmp_path)
    assert "\n" not in str(e.value)
    with caplog.at_level(logging.WARNING, logger="dsv4_model"):
        m = dsv4_model.load(tmp_path, mtp=False)
    msgs = [r.getMessage() for r in caplog.records if "mtp" in r.getMessage()]
    assert len(msgs) == 1 and "2 mtp.* tensor(s)" in msgs[0] and len(m.mtp) == 0


@pytest.mark.parametrize("fmt,naming", [("release", "hf"), ("modelopt", "native")])
def test_mtp_block_loads_in_its_stored_formats(tmp_path, state, fmt, naming):
    """The MTP block's tensors keep their native names in either naming, its projections the release formats
    (e_proj/h_proj FP8 as DeepSeek ships them, routed experts MXFP4 or NVFP4), and its values are the ones written."""
    args = config.tiny()
    write_checkpoint(tmp_path, args, state, fmt=fmt, naming=naming)
    from safetensors import safe_open
    names = set(safe_open(str(tmp_path / "model.safetensors"), "pt").keys())
    assert "mtp.0.e_proj.weight" in names and "mtp.0.hc_head_fn" in names and not any("model.mtp" in n for n in names)
    m = dsv4_model.load(tmp_path, dtype=torch.float32)
    (mtp,) = m.mtp
    assert (mtp.e_proj.fmt, mtp.h_proj.fmt, mtp.ffn.experts.w1.fmt) == ("fp8", "fp8", EXPECT[fmt][0])
    assert mtp.attn.compressor is None and mtp.ffn.gate.bias is not None        # SWA only, a gate with bias
    assert torch.equal(mtp.hc_head.fn, state["mtp.0.hc_head_fn"]) and torch.equal(mtp.hnorm.weight, state["mtp.0.hnorm.weight"].bfloat16().float())
    assert mtp.main is m


def test_partial_mtp_block_is_refused_by_the_writer_and_the_loader(tmp_path, state):
    args = config.tiny()
    partial = {k: v for k, v in state.items() if k != "mtp.0.ffn.experts.3.w2.weight"}
    with pytest.raises(ValueError, match=r"mtp\.0\.ffn\.experts\.3\.w2\.weight.*missing"):
        write_checkpoint(tmp_path / "w", args, partial)
    root = _write(tmp_path / "r")
    _edit(root, lambda sd: sd.pop("mtp.0.enorm.weight"))
    with pytest.raises(CheckpointError, match=r"mtp\.0\.enorm\.weight.*missing"):
        dsv4_model.load(root)


def test_mixed_expert_formats_and_bad_packed_shape_are_named(tmp_path):
    root = _write(tmp_path, "release")
    _edit(root, lambda sd: sd.__setitem__("layers.1.ffn.experts.2.w1.weight", sd["layers.1.ffn.experts.2.w1.weight"][:, :-1].clone()))
    with pytest.raises(CheckpointError, match=r"layers.1.ffn.experts.2.w1.weight.*shape"):
        dsv4_model.load(root)


def test_wo_a_is_dequantised_at_load_as_the_reference(tmp_path):
    m = dsv4_model.load(_write(tmp_path, "release"))
    assert m.layers[0].attn.wo_a.fmt == "plain" and m.layers[0].attn.wo_b.fmt == "fp8"
