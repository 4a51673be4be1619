"""config.json in every shape a user meets: the released HF files (V4-Flash, V4-Pro), one saved by transformers,
the reference's inference/config.json; unused keys accepted, unsupported ones and wrong types named."""
import logging

import pytest
import torch

from dsv4_model import config
from dsv4_model.config import args_from_config, hf_config
from dsv4_model.rope import rope_freqs


@pytest.mark.parametrize("preset", ["flash", "pro"])
def test_released_hf_config_loads(preset):
    want = config.PRESETS[preset]()
    cfg = hf_config(want, "release")
    assert {"num_key_value_heads", "quantization_config", "rope_scaling", "torch_dtype", "topk_method"} <= set(cfg)
    got = args_from_config(cfg)
    for f in ("dim", "n_layers", "n_heads", "q_lora_rank", "o_groups", "index_topk", "n_routed_experts",
              "moe_inter_dim", "route_scale", "compress_ratios", "rope_factor", "original_seq_len", "n_hash_layers"):
        assert getattr(got, f) == getattr(want, f), f


def transformers_saved_flash() -> dict:
    """The keys transformers' DeepseekV4Config.save_pretrained writes (no compress_ratios: layer_types instead)."""
    ratios = config.flash().compress_ratios[:43]
    names = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}
    return {
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "dtype": "bfloat16",
        "transformers_version": "5.0.0", "vocab_size": 129280, "hidden_size": 4096, "num_hidden_layers": 43,
        "num_attention_heads": 64, "num_key_value_heads": 1, "head_dim": 512, "partial_rotary_factor": 0.125,
        "q_lora_rank": 1024, "o_groups": 8, "o_lora_rank": 1024, "sliding_window": 128,
        "layer_types": [names[r] for r in ratios],
        "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
        "mlp_layer_types": ["hash_moe"] * 3 + ["moe"] * 40,
        "rope_parameters": {"main": {"rope_theta": 10000.0, "rope_type": "default"},
                            "compress": {"rope_theta": 160000.0, "rope_type": "yarn", "factor": 16.0,
                                         "original_max_position_embeddings": 65536, "beta_fast": 32.0,
                                         "beta_slow": 1.0, "attention_factor": 1.0}},
        "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512, "n_routed_experts": 256,
        "n_shared_experts": 1, "num_experts_per_tok": 6, "moe_intermediate_size": 2048,
        "scoring_func": "sqrtsoftplus", "routed_scaling_factor": 1.5, "norm_topk_prob": True, "swiglu_limit": 10.0,
        "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "rms_norm_eps": 1e-6, "hidden_act": "silu",
        "mlp_bias": False, "attention_bias": False, "attention_dropout": 0.0, "output_router_logits": False,
        "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0, "initializer_range": 0.02, "use_cache": True,
        "max_position_embeddings": 1048576, "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1,
        "pad_token_id": None,
    }


def test_transformers_saved_config_loads():
    got = args_from_config(transformers_saved_flash())
    want = config.flash()
    assert got.compress_ratios == want.compress_ratios and got.rope_head_dim == 64 and got.n_hash_layers == 3
    assert (got.compress_rope_theta, got.rope_factor, got.original_seq_len) == (160000.0, 16.0, 65536)


def test_reference_inference_config_loads():
    ref = {"vocab_size": 129280, "dim": 4096, "moe_inter_dim": 2048, "n_layers": 43, "n_hash_layers": 3,
           "n_heads": 64, "n_routed_experts": 256, "n_shared_experts": 1, "n_activated_experts": 6,
           "score_func": "sqrtsoftplus", "route_scale": 1.5, "swiglu_limit": 10.0, "q_lora_rank": 1024,
           "head_dim": 512, "rope_head_dim": 64, "norm_eps": 1e-6, "o_groups": 8, "o_lora_rank": 1024,
           "window_size": 128, "compress_ratios": config.flash().compress_ratios, "compress_rope_theta": 160000,
           "original_seq_len": 65536, "rope_theta": 10000, "rope_factor": 16, "beta_fast": 32, "beta_slow": 1,
           "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512, "hc_mult": 4, "hc_sinkhorn_iters": 20,
           "hc_eps": 1e-6, "dtype": "fp8", "scale_fmt": "ue8m0", "expert_dtype": "fp4", "scale_dtype": "fp8",
           "n_mtp_layers": 1, "max_batch_size": 4, "max_seq_len": 65536}
    got = args_from_config(ref)
    assert got.dim == 4096 and got.max_seq_len == config.ModelArgs.max_seq_len     # runtime size not taken


def test_unused_keys_are_listed_at_debug_level(caplog):
    with caplog.at_level(logging.DEBUG, logger="dsv4_model"):
        args_from_config(transformers_saved_flash())
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "router_aux_loss_coef" in text and "output_router_logits" in text


@pytest.mark.parametrize("key,value", [("num_key_value_heads", 8), ("tie_word_embeddings", True), ("hidden_act", "gelu"),
                                       ("norm_topk_prob", False), ("first_k_dense_replace", 3), ("mlp_bias", True)])
def test_unsupported_math_is_named(key, value):
    with pytest.raises(ValueError, match=rf"{key}={value!r}"):
        args_from_config({**transformers_saved_flash(), key: value})


@pytest.mark.parametrize("cfg,match", [
    ({"rope_scaling": {"type": "linear", "factor": 2}}, "rope_scaling type 'linear'"),
    ({"rope_scaling": {"type": "yarn", "mscale": 0.7}}, "mscale"),
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [64, 64]}}, "weight_block_size"),
    ({"hidden_size": "4096"}, r"hidden_size='4096' has the wrong type"),
    ({"swiglu_limit": [10]}, "swiglu_limit"),
    ({"compress_ratios": "0,4"}, "compress_ratios must be a list"),
    ({"scoring_func": "sparsemax"}, "sparsemax"),
    ({"surprise": 1}, "surprise"),
])
def test_bad_values_are_one_line_errors(cfg, match):
    base = hf_config(config.tiny(), "release")
    with pytest.raises(ValueError, match=match) as e:
        args_from_config({**base, **cfg})
    assert "\n" not in str(e.value)


def test_original_seq_len_zero_means_no_yarn():
    assert torch.equal(rope_freqs(64, 160000.0, (16.0, 0, 32.0, 1.0)), rope_freqs(64, 160000.0, None))
    assert not torch.equal(rope_freqs(64, 160000.0, (16.0, 65536, 32.0, 1.0)), rope_freqs(64, 160000.0, None))
    args_from_config({**hf_config(config.tiny(), "fp32"), "rope_scaling": {"type": "yarn", "factor": 4,
                                                                           "original_max_position_embeddings": 0}})


@pytest.mark.parametrize("func", ["softmax", "sigmoid"])
def test_other_score_funcs_are_implemented(func):
    import torch.nn.functional as F

    from dsv4_model.moe import Gate
    args = args_from_config({**hf_config(config.tiny(), "fp32"), "scoring_func": func})
    g = Gate(args, layer=args.n_hash_layers, dtype=torch.float32)
    g.weight.normal_()
    x = torch.randn(4, args.dim)
    w, idx = g(x, torch.zeros(4, dtype=torch.long))
    logits = x @ g.weight.T
    s = logits.softmax(-1) if func == "softmax" else logits.sigmoid()
    want = s.gather(-1, idx)
    if func != "softmax":                                   # the reference renormalises all but softmax
        want = want / want.sum(-1, keepdim=True)
    assert torch.allclose(w, want * args.route_scale, atol=1e-6)
    assert not torch.allclose(w, F.softplus(logits).sqrt().gather(-1, idx) * args.route_scale, atol=1e-3)
