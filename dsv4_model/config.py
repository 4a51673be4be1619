"""ModelArgs: the DSV4 hyper-parameters. Field names equal the reference's JSON keys, so a reference config
loads in one line; HF `config.json` keys are mapped onto them. `compress_ratios` always comes from the config."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path


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
    original_seq_len: int = 65536
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
    swiglu_limit: float = 10.0
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
_IGNORED = {"architectures", "model_type", "torch_dtype", "transformers_version", "quantization_config", "tie_word_embeddings",
            "max_position_embeddings", "norm_topk_prob", "topk_method", "layer_types", "compress_rates", "mlp_layer_types",
            "rope_parameters", "moe_quant_algo", "hidden_act", "initializer_range", "use_cache", "attention_bias",
            "attention_dropout", "dtype", "scale_fmt", "expert_dtype", "pad_token_id", "rope_scaling"}


def args_from_config(cfg: dict, max_seq_len: int | None = None) -> ModelArgs:
    """Accept HF keys and the reference's legacy keys alike; unknown keys are an error naming them."""
    fields = {f.name for f in dataclasses.fields(ModelArgs)}
    kw: dict = {}
    unknown = []
    for k, v in cfg.items():
        if k in fields:
            kw[k] = v
        elif k in _HF:
            kw.setdefault(_HF[k], v)
        elif k not in _IGNORED:
            unknown.append(k)
    rs = cfg.get("rope_scaling") or {}
    for src, dst in (("factor", "rope_factor"), ("original_max_position_embeddings", "original_seq_len"),
                     ("beta_fast", "beta_fast"), ("beta_slow", "beta_slow")):
        if src in rs:
            kw.setdefault(dst, rs[src])
    if unknown:
        raise ValueError(f"config.json: unknown key(s) {sorted(unknown)}")
    if "compress_ratios" not in kw:
        raise ValueError("config.json: missing 'compress_ratios' (the layer pattern is read from the config, never assumed)")
    if max_seq_len:
        kw["max_seq_len"] = max_seq_len
    return ModelArgs(**kw).validate()


def load_args(path: str | Path, max_seq_len: int | None = None) -> ModelArgs:
    p = Path(path)
    try:
        cfg = json.loads(p.read_text())
    except FileNotFoundError:
        raise ValueError(f"{p}: config.json not found") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: invalid JSON ({e})") from None
    return args_from_config(cfg, max_seq_len)


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
