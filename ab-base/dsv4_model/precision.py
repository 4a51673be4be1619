"""The precision policy: which format each projection computes in, decided once at load.

Default (`faithful`): every projection computes in the format the checkpoint stores it in (see quant.py for
what each format mirrors in the official reference): plain weights -> plain GEMM, FP8 -> FP8 act sim + FP8
weights, MXFP4 experts -> FP8 act x FP4 weights, NVFP4 -> W4A4 with the checkpoint's input_scale. The one fixed
exception is the reference's own: `wo_a` is dequantised at load (its convert.py does so, its einsum runs in bf16).

`floor` (for quantised checkpoints; validated on the real NVFP4 model): the LM head, router gate, compressor and
indexer helper projections are dequantised to BF16 values once at load (held in the dtype the reference computes
each in: fp32 for all but the indexer's weights_proj); the indexer's q_b_proj (QAT-trained) and the routed experts
stay as stored.

Per-component overrides `COMPONENT=FORMAT` (FORMAT: stored | plain | bf16 | fp8 | mxfp4 | nvfp4) come on top;
a quantised format on a projection stored otherwise simulates that deployment (an explicit opt-in, e.g.
`--precision routed_experts=nvfp4`).
"""
from __future__ import annotations

COMPONENTS = ("lm_head", "router_gate", "compressor", "indexer_compressor", "indexer_weights_proj",
              "indexer_q_b_proj", "routed_experts", "shared_experts", "attention", "mtp_proj")
TARGETS = ("stored", "plain", "bf16", "fp8", "mxfp4", "nvfp4")

POLICIES: dict[str, dict[str, str]] = {
    "faithful": {},
    "floor": {"lm_head": "bf16", "router_gate": "bf16", "compressor": "bf16", "indexer_compressor": "bf16",
              "indexer_weights_proj": "bf16"},
}
DEFAULT_POLICY = "faithful"

# native projection name patterns -> component (first match wins)
COMPONENT_OF = [
    ("head", "lm_head"), ("ffn.gate", "router_gate"), ("attn.indexer.compressor.", "indexer_compressor"),
    ("attn.indexer.weights_proj", "indexer_weights_proj"), ("attn.indexer.wq_b", "indexer_q_b_proj"),
    ("attn.compressor.", "compressor"), ("ffn.experts", "routed_experts"), ("ffn.shared_experts.", "shared_experts"),
    ("attn.", "attention"), ("e_proj", "mtp_proj"), ("h_proj", "mtp_proj"),
]


def component_of(name: str) -> str:
    for pat, comp in COMPONENT_OF:
        if pat == "head" and (name == "head" or name.startswith("head.")):
            return comp
        if pat != "head" and pat in name:
            return comp
    raise KeyError(f"no precision component for projection {name!r}")


def parse_overrides(items: list[str] | None) -> dict[str, str]:
    """['floor', 'routed_experts=nvfp4', ...] -> {component: target} for every component.

    A bare word names a policy (applied first); COMPONENT=FORMAT entries override it. Errors name the culprit.
    """
    base = DEFAULT_POLICY
    out: dict[str, str] = {}
    for item in items or []:
        for part in item.split(","):
            part = part.strip()
            if not part:
                continue
            key, sep, val = part.partition("=")
            key, val = key.strip(), val.strip()
            if not sep:
                if key not in POLICIES:
                    raise ValueError(f"--precision {part!r}: expected a policy ({', '.join(POLICIES)}) or COMPONENT=FORMAT")
                base = key
                continue
            if key not in COMPONENTS:
                raise ValueError(f"--precision {part!r}: expected COMPONENT=FORMAT with COMPONENT in {', '.join(COMPONENTS)}")
            if val not in TARGETS:
                raise ValueError(f"--precision {part!r}: format must be one of {', '.join(TARGETS)}, found {val!r}")
            out[key] = val
    return resolve(out, base)


def resolve(overrides: dict[str, str] | None = None, policy: str = DEFAULT_POLICY) -> dict[str, str]:
    if policy not in POLICIES:
        raise ValueError(f"precision policy {policy!r}: expected one of {', '.join(POLICIES)}")
    pol = {c: "stored" for c in COMPONENTS}
    pol.update(POLICIES[policy])
    pol.update(overrides or {})
    return pol
