"""The precision policy: which projection runs in which format. The default is the validated precision floor.

`bf16`: weights dequantised once at load, plain `F.linear`, activations untouched.
`fp8`:  the reference's FP8 activation simulation (1x128 blocks, power-of-two scales) before the GEMM.
`fp4`:  weights on the NVFP4 grid and activations fake-quantised to NVFP4 with the tensor's `input_scale` (W4A4).
"""
from __future__ import annotations

FORMATS = ("bf16", "fp8", "fp4")

# component -> format. The floor: LM head, router gate, compressor and indexer helper projections in BF16;
# the indexer's q_b_proj (QAT-trained) and the routed experts in FP4.
DEFAULT_POLICY: dict[str, str] = {
    "lm_head": "bf16",
    "router_gate": "bf16",
    "compressor": "bf16",          # attention compressor kv/gate projections
    "indexer_compressor": "bf16",  # the indexer's private compressor
    "indexer_weights_proj": "bf16",
    "indexer_q_b_proj": "fp4",
    "routed_experts": "fp4",
    "shared_experts": "fp8",
    "attention": "fp8",            # wq_a, wq_b, wkv, wo_b (wo_a is dequantised to bf16 as in the reference)
}

# checkpoint-name suffix patterns -> component (first match wins)
COMPONENT_OF = [
    ("head", "lm_head"), ("ffn.gate", "router_gate"), ("attn.indexer.compressor.", "indexer_compressor"),
    ("attn.indexer.weights_proj", "indexer_weights_proj"), ("attn.indexer.wq_b", "indexer_q_b_proj"),
    ("attn.compressor.", "compressor"), ("ffn.experts.", "routed_experts"), ("ffn.shared_experts.", "shared_experts"),
    ("attn.", "attention"),
]


def component_of(name: str) -> str:
    for pat, comp in COMPONENT_OF:
        if pat == "head" and (name == "head" or name.startswith("head.")):
            return comp
        if pat != "head" and pat in name:
            return comp
    raise KeyError(f"no precision component for projection {name!r}")


def parse_overrides(items: list[str] | None) -> dict[str, str]:
    """['lm_head=fp4', ...] -> {'lm_head': 'fp4'}; unknown components or formats are an error naming them."""
    out: dict[str, str] = {}
    for item in items or []:
        for part in item.split(","):
            if not part.strip():
                continue
            key, sep, val = part.partition("=")
            key, val = key.strip(), val.strip()
            if not sep or key not in DEFAULT_POLICY:
                raise ValueError(f"--precision {part!r}: expected COMPONENT=FORMAT with COMPONENT in {', '.join(DEFAULT_POLICY)}")
            if val not in FORMATS:
                raise ValueError(f"--precision {part!r}: format must be one of {', '.join(FORMATS)}, found {val!r}")
            out[key] = val
    return out


def resolve(overrides: dict[str, str] | None = None) -> dict[str, str]:
    pol = dict(DEFAULT_POLICY)
    pol.update(overrides or {})
    return pol
