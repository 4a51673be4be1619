"""ModelArgs: the DSV4 hyper-parameters. Field names equal the reference's JSON keys, so a reference config
loads in one line; HF `config.json` keys are mapped onto them. `compress_ratios` always comes from the config."""
from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("dsv4_model")


@dataclass
class ModelArgs:
    vocab_size: int = 129280
    dim: int = 4096
    n_layers: int = 43
    n_heads: int = 64
    head_dim: int = 512
    rope_head_dim: int = 64
    q_lora_rank: int = 1024
    o_groups: int = 8
    o_lora_rank: int = 1024
    window_size: int = 128            # sliding window, including the current token
    compress_ratios: list[int] = field(default_factory=list)   # per layer: 0 SWA, 4 CSA, 128 HCA (+ MTP entry)
    compress_rope_theta: float = 160000.0
    rope_theta: float = 10000.0
    rope_factor: float = 16.0         # YaRN, compressed layers only
    original_seq_len: int = 65536     # 0 = no YaRN (as the reference)
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    index_n_heads: int = 64
    index_head_dim: int = 128
    index_topk: int = 512
    n_routed_experts: int = 256
    n_shared_experts: int = 1
    n_activated_experts: int = 6
    moe_inter_dim: int = 2048
    score_func: str = "sqrtsoftplus"
    route_scale: float = 1.5
    n_hash_layers: int = 3
    swiglu_limit: float = 10.0        # routed experts; 0 = no clamp (the reference's `swiglu_limit > 0`)
    shared_expert_clamp: bool = False  # the official shared expert has no clamp; True = HF transformers' behaviour
    hc_mult: int = 4
    hc_sinkhorn_iters: int = 20
    hc_eps: float = 1e-6
    norm_eps: float = 1e-6
    n_mtp_layers: int = 1
    max_seq_len: int = 4096           # runtime cache capacity, not a model property
    bos_token_id: int = 0
    eos_token_id: int = 1

    def ratio(self, layer: int) -> int:
        return self.compress_ratios[layer] if layer < len(self.compress_ratios) else 0

    def validate(self) -> "ModelArgs":
        errs = []
        if len(self.compress_ratios) < self.n_layers:
            errs.append(f"compress_ratios has {len(self.compress_ratios)} entries, expected at least n_layers={self.n_layers}")
        if (self.head_dim - self.rope_head_dim) % 64:
            errs.append(f"head_dim - rope_head_dim = {self.head_dim - self.rope_head_dim} must be divisible by 64 (FP8 sim block)")
        if self.index_head_dim & (self.index_head_dim - 1) or self.index_head_dim < self.rope_head_dim:
            errs.append(f"index_head_dim={self.index_head_dim} must be a power of two >= rope_head_dim={self.rope_head_dim}")
        if (self.n_heads * self.head_dim) % self.o_groups:
            errs.append(f"n_heads*head_dim={self.n_heads * self.head_dim} must be divisible by o_groups={self.o_groups}")
        if self.n_activated_experts > self.n_routed_experts:
            errs.append(f"n_activated_experts={self.n_activated_experts} exceeds n_routed_experts={self.n_routed_experts}")
        for d, name in ((self.dim, "dim"), (self.moe_inter_dim, "moe_inter_dim"), (self.q_lora_rank, "q_lora_rank")):
            if d % 16:
                errs.append(f"{name}={d} must be divisible by 16 (NVFP4 blocks)")
        for name in ("dim", "n_layers", "n_heads", "head_dim", "vocab_size", "n_routed_experts", "moe_inter_dim",
                     "window_size", "hc_mult", "hc_sinkhorn_iters", "o_groups", "index_n_heads"):
            if getattr(self, name) <= 0:
                errs.append(f"{name}={getattr(self, name)} must be positive")
        if self.swiglu_limit < 0:
            errs.append(f"swiglu_limit={self.swiglu_limit} must be >= 0 (0 = no clamp)")
        if any(r < 0 for r in self.compress_ratios):
            errs.append(f"compress_ratios={self.compress_ratios} holds a negative ratio")
        if self.score_func not in ("sqrtsoftplus", "softmax", "sigmoid"):
            errs.append(f"score_func={self.score_func!r} is not supported (sqrtsoftplus, softmax or sigmoid)")
        if errs:
            raise ValueError("invalid ModelArgs: " + "; ".join(errs))
        return self

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


_HF = {  # HF key -> ModelArgs field
    "hidden_size": "dim", "num_hidden_layers": "n_layers", "num_attention_heads": "n_heads", "head_dim": "head_dim",
    "qk_rope_head_dim": "rope_head_dim", "q_lora_rank": "q_lora_rank", "o_groups": "o_groups", "o_lora_rank": "o_lora_rank",
    "sliding_window": "window_size", "compress_ratios": "compress_ratios", "compress_rope_theta": "compress_rope_theta",
    "rope_theta": "rope_theta", "index_n_heads": "index_n_heads", "index_head_dim": "index_head_dim",
    "index_topk": "index_topk", "n_routed_experts": "n_routed_experts", "n_shared_experts": "n_shared_experts",
    "num_experts_per_tok": "n_activated_experts", "moe_intermediate_size": "moe_inter_dim", "scoring_func": "score_func",
    "routed_scaling_factor": "route_scale", "num_hash_layers": "n_hash_layers", "swiglu_limit": "swiglu_limit",
    "hc_mult": "hc_mult", "hc_sinkhorn_iters": "hc_sinkhorn_iters", "hc_eps": "hc_eps", "rms_norm_eps": "norm_eps",
    "num_nextn_predict_layers": "n_mtp_layers", "vocab_size": "vocab_size", "bos_token_id": "bos_token_id",
    "eos_token_id": "eos_token_id",
}
# Keys that do not change the decode math (metadata, training-only knobs, runtime sizes, or facts the model
# hard-codes and the checkpoint's tensors fix). Accepted and listed at debug level.
_UNUSED = {"architectures", "model_type", "torch_dtype", "dtype", "transformers_version", "max_position_embeddings",
           "initializer_range", "use_cache", "attention_dropout", "pad_token_id", "output_router_logits",
           "router_aux_loss_coef", "router_jitter_noise", "aux_loss_alpha", "seq_aux", "return_dict",
           "layer_types", "compress_rates", "mlp_layer_types", "rope_parameters", "moe_quant_algo", "scale_fmt",
           "expert_dtype", "scale_dtype", "quantization_config", "rope_scaling", "kv_lora_rank", "auto_map",
           "max_batch_size", "max_seq_len", "name_or_path", "_name_or_path", "tie_word_embeddings", "num_key_value_heads",
           "norm_topk_prob", "topk_method", "n_group", "topk_group", "first_k_dense_replace", "hidden_act",
           "attention_bias", "mlp_bias", "partial_rotary_factor", "ep_size", "moe_layer_freq", "generation_config",
           "chat_template", "sliding_window_pattern", "fmt"}
# Keys whose other values would change the math in ways this model does not implement: key -> accepted values.
_MUST = {"num_key_value_heads": (1,), "tie_word_embeddings": (False,), "norm_topk_prob": (True,),
         "topk_method": ("noaux_tc",), "n_group": (1, None), "topk_group": (1, None), "first_k_dense_replace": (0, None),
         "hidden_act": ("silu",), "attention_bias": (False,), "mlp_bias": (False,), "scale_fmt": ("ue8m0", None),
         "dtype": ("fp8", "bf16", "bfloat16", "float32", "float16", None), "expert_dtype": ("fp4", None)}
_TYPES = {f.name: f.type for f in dataclasses.fields(ModelArgs)}


def _coerce(key: str, field_: str, v):
    """Value of a config key for ModelArgs.field_, or a one-line error naming the key, value and type."""
    t = _TYPES[field_]
    bad = ValueError(f"config.json: {key}={v!r} has the wrong type; expected {t}")
    if t == "int":
        if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, float) and v.is_integer())):
            raise bad
        return int(v)
    if t == "float":
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise bad
        return float(v)
    if t == "bool":
        if not isinstance(v, bool):
            raise bad
        return v
    if t == "str":
        if not isinstance(v, str):
            raise bad
        return v
    if t.startswith("list"):
        if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in v):
            raise ValueError(f"config.json: {key} must be a list of integers, found {v!r}")
        return list(v)
    return v


def _rope_scaling(cfg: dict, kw: dict) -> None:
    """YaRN for the compressed layers: rope_scaling (HF/DeepSeek) or rope_parameters["compress"] (transformers)."""
    rs = cfg.get("rope_scaling")
    rp = cfg.get("rope_parameters")
    if isinstance(rp, dict) and isinstance(rp.get("compress"), dict) and not rs:
        rs = rp["compress"]
        if "rope_theta" in rs:
            kw.setdefault("compress_rope_theta", _coerce("rope_parameters.compress.rope_theta", "compress_rope_theta", rs["rope_theta"]))
        main = rp.get("main")
        if isinstance(main, dict) and "rope_theta" in main:
            kw.setdefault("rope_theta", _coerce("rope_parameters.main.rope_theta", "rope_theta", main["rope_theta"]))
    if rs is None:
        return
    if not isinstance(rs, dict):
        raise ValueError(f"config.json: rope_scaling must be an object, found {rs!r}")
    kind = rs.get("type", rs.get("rope_type"))
    if kind not in ("yarn", None):
        raise ValueError(f"config.json: rope_scaling type {kind!r} is not supported (DSV4 uses 'yarn')")
    for k in ("mscale", "mscale_all_dim", "attention_factor"):
        if k in rs and rs[k] not in (None, 0, 1, 0.0, 1.0):
            raise ValueError(f"config.json: rope_scaling.{k}={rs[k]!r} is not supported (DSV4 applies no YaRN mscale)")
    for src, dst in (("factor", "rope_factor"), ("original_max_position_embeddings", "original_seq_len"),
                     ("beta_fast", "beta_fast"), ("beta_slow", "beta_slow")):
        if src in rs:
            kw.setdefault(dst, _coerce(f"rope_scaling.{src}", dst, rs[src]))


def _check_quant(q) -> None:
    if q is None:
        return
    if not isinstance(q, dict):
        raise ValueError(f"config.json: quantization_config must be an object, found {q!r}")
    method = q.get("quant_method")
    if method not in ("fp8", "modelopt", "nvfp4", None):
        raise ValueError(f"config.json: quantization_config.quant_method={method!r} is not supported (fp8 or modelopt)")
    bs = q.get("weight_block_size")
    if bs is not None and list(bs) != [128, 128]:
        raise ValueError(f"config.json: quantization_config.weight_block_size={bs!r} is not supported (expected [128, 128])")
    if q.get("scale_fmt") not in ("ue8m0", None):
        raise ValueError(f"config.json: quantization_config.scale_fmt={q.get('scale_fmt')!r} is not supported (expected ue8m0)")
    if q.get("activation_scheme") not in ("dynamic", None):
        raise ValueError(f"config.json: quantization_config.activation_scheme={q.get('activation_scheme')!r} is not supported (expected dynamic)")


def _ratios_from_layer_types(cfg: dict) -> list[int] | None:
    lt = cfg.get("layer_types")
    if not isinstance(lt, list):
        return None
    rates = {"sliding_attention": 0, "compressed_sparse_attention": 4, "heavily_compressed_attention": 128}
    rates.update(cfg.get("compress_rates") or {})
    out = []
    for t in lt:
        if t not in rates:
            raise ValueError(f"config.json: layer_types entry {t!r} is not one of {', '.join(rates)}")
        out.append(int(rates[t]))
    return out + [0]          # the MTP layer is SWA-only


def args_from_config(cfg: dict, max_seq_len: int | None = None) -> ModelArgs:
    """Accept the HF config.json (as released, or as transformers saves it) and the reference's inference/config.json.

    Unused keys are listed at debug level; a key whose value changes the math in a way this model does not
    implement is an error naming it; a wrong type is a one-line error.
    """
    if not isinstance(cfg, dict):
        raise ValueError(f"config.json: expected a JSON object, found {type(cfg).__name__}")
    fields = {f.name for f in dataclasses.fields(ModelArgs)}
    kw: dict = {}
    unused, unknown = [], []
    for k, v in cfg.items():
        if k in _MUST and v not in _MUST[k]:
            raise ValueError(f"config.json: {k}={v!r} is not supported; this model implements {k} in {list(_MUST[k])}")
        if k in fields and k != "max_seq_len":
            kw[k] = _coerce(k, k, v)
        elif k in _HF:
            kw.setdefault(_HF[k], _coerce(k, _HF[k], v))
        elif k in _UNUSED:
            unused.append(k)
        else:
            unknown.append(k)
    if unknown:
        raise ValueError(f"config.json: unknown key(s) {sorted(unknown)} (not a DeepSeek-V4 key this model knows)")
    _rope_scaling(cfg, kw)
    _check_quant(cfg.get("quantization_config"))
    if "partial_rotary_factor" in cfg and "rope_head_dim" not in kw:
        kw["rope_head_dim"] = int(round(float(cfg["partial_rotary_factor"]) * kw.get("head_dim", ModelArgs.head_dim)))
    if "compress_ratios" not in kw:
        ratios = _ratios_from_layer_types(cfg)
        if ratios is None:
            raise ValueError("config.json: missing 'compress_ratios' (or 'layer_types'): the layer pattern is read "
                             "from the config, never assumed")
        kw["compress_ratios"] = ratios
    if "mlp_layer_types" in cfg and "n_hash_layers" not in kw and isinstance(cfg["mlp_layer_types"], list):
        kw["n_hash_layers"] = sum(1 for t in cfg["mlp_layer_types"] if t == "hash_moe")
    log.debug("config.json: keys accepted but unused by the decode: %s", ", ".join(sorted(unused)) or "none")
    if max_seq_len:
        kw["max_seq_len"] = max_seq_len
    return ModelArgs(**kw).validate()


def hf_config(args: ModelArgs, fmt: str = "release") -> dict:
    """The released HF config.json's key set (DeepSeek-V4-Flash/Pro) for these args; `fmt` picks the
    quantization_config (release/modelopt: FP8 block 128 with ue8m0 scales; fp32/bf16: none)."""
    cfg = {
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
        "vocab_size": args.vocab_size, "hidden_size": args.dim, "moe_intermediate_size": args.moe_inter_dim,
        "num_hidden_layers": args.n_layers, "num_attention_heads": args.n_heads, "num_key_value_heads": 1,
        "n_routed_experts": args.n_routed_experts, "n_shared_experts": args.n_shared_experts,
        "num_experts_per_tok": args.n_activated_experts, "max_position_embeddings": 1048576,
        "rms_norm_eps": args.norm_eps, "rope_theta": args.rope_theta,
        "rope_scaling": {"type": "yarn", "factor": args.rope_factor,
                         "original_max_position_embeddings": args.original_seq_len,
                         "beta_fast": args.beta_fast, "beta_slow": args.beta_slow},
        "q_lora_rank": args.q_lora_rank, "qk_rope_head_dim": args.rope_head_dim, "head_dim": args.head_dim,
        "compress_ratios": list(args.compress_ratios), "sliding_window": args.window_size,
        "compress_rope_theta": args.compress_rope_theta, "o_lora_rank": args.o_lora_rank, "o_groups": args.o_groups,
        "index_n_heads": args.index_n_heads, "index_head_dim": args.index_head_dim, "index_topk": args.index_topk,
        "num_hash_layers": args.n_hash_layers, "hc_mult": args.hc_mult, "hc_eps": args.hc_eps,
        "hc_sinkhorn_iters": args.hc_sinkhorn_iters, "swiglu_limit": args.swiglu_limit,
        "routed_scaling_factor": args.route_scale, "scoring_func": args.score_func, "topk_method": "noaux_tc",
        "norm_topk_prob": True, "hidden_act": "silu", "num_nextn_predict_layers": args.n_mtp_layers,
        "bos_token_id": args.bos_token_id, "eos_token_id": args.eos_token_id, "tie_word_embeddings": False,
        "attention_bias": False, "attention_dropout": 0.0, "initializer_range": 0.02, "use_cache": True,
        "torch_dtype": "bfloat16", "transformers_version": "4.57.1",
    }
    if fmt in ("release", "release-fp4x2", "modelopt"):
        cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                      "scale_fmt": "ue8m0", "weight_block_size": [128, 128]}
    if fmt in ("modelopt", "nvfp4"):
        cfg["moe_quant_algo"] = "NVFP4"
    return cfg


def read_json(path: str | Path, name: str):
    """A checkpoint's JSON file (`name`: config.json, tokenizer.json), or a one-line ValueError naming the file and
    what was wrong: missing, not UTF-8 (the byte and its offset), not JSON."""
    p = Path(path)
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{p}: {name} not found") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{p}: expected UTF-8 JSON, found byte 0x{e.object[e.start]:02x} at offset {e.start}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: invalid JSON ({e})") from None


def load_args(path: str | Path, max_seq_len: int | None = None) -> ModelArgs:
    return args_from_config(read_json(path, "config.json"), max_seq_len)


def tiny() -> ModelArgs:
    """CI-sized: seconds on a CPU; 4 layers with ratios 0/4/128/4, a hash layer, window wrap at 16 tokens."""
    return ModelArgs(vocab_size=320, dim=128, n_layers=4, n_heads=2, head_dim=128, rope_head_dim=64, q_lora_rank=64,
                     o_groups=2, o_lora_rank=32, window_size=16, compress_ratios=[0, 4, 128, 4, 0],
                     rope_factor=4.0, original_seq_len=64, index_n_heads=2, index_head_dim=64, index_topk=8,
                     n_routed_experts=8, n_activated_experts=2, moe_inter_dim=64, n_hash_layers=1, hc_mult=4,
                     max_seq_len=512).validate()


def small() -> ModelArgs:
    """For GPU benchmarks: about 1 GB of bf16 weights."""
    return ModelArgs(vocab_size=32768, dim=1024, n_layers=8, n_heads=16, head_dim=512, q_lora_rank=512, o_groups=4,
                     o_lora_rank=512, window_size=128, compress_ratios=[0, 4, 128, 4, 128, 4, 128, 4, 0],
                     index_n_heads=16, index_head_dim=128, index_topk=64, n_routed_experts=32, n_activated_experts=6,
                     moe_inter_dim=512, n_hash_layers=1, max_seq_len=4096).validate()


def flash() -> ModelArgs:
    """DeepSeek-V4-Flash shapes (metadata: 284B parameters)."""
    return ModelArgs(compress_ratios=[0, 0] + [4, 128] * 20 + [4] + [0]).validate()


def pro() -> ModelArgs:
    """DeepSeek-V4-Pro shapes (metadata: 1.6T parameters)."""
    return ModelArgs(dim=7168, n_layers=61, n_heads=128, q_lora_rank=1536, o_groups=16, index_topk=1024,
                     n_routed_experts=384, moe_inter_dim=3072, route_scale=2.5,
                     compress_ratios=[128, 128] + [4, 128] * 29 + [4] + [0]).validate()


PRESETS = {"tiny": tiny, "small": small, "flash": flash, "pro": pro}
