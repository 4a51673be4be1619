"""Checkpoints: the name map (native <-> HF), the safetensors reader (single or sharded, memory-mapped), format
decoding (plain, FP8 block, MXFP4, NVFP4), validation before any compute, and the writer.

Every problem is a `CheckpointError` whose one line names the file or tensor and what was expected.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import torch

from .config import ModelArgs
from .precision import component_of
from .quant import (dequant_fp8_block, dequant_mxfp4, dequant_nvfp4_weight, quantize_fp8_block, quantize_mxfp4,
                    quantize_nvfp4_weight)


class CheckpointError(ValueError):
    pass


# native -> HF, {L} layer and {E} expert placeholders; each also covers "<name>.<suffix>" (weight, scale, ...)
NAME_MAP: list[tuple[str, str]] = [
    ("embed", "model.embed_tokens"), ("head", "lm_head"), ("norm", "model.norm"),
    *[(f"hc_head_{x}", f"model.hc_head.hc_{x}") for x in ("fn", "base", "scale")],
    ("layers.{L}.attn_norm", "model.layers.{L}.input_layernorm"),
    ("layers.{L}.ffn_norm", "model.layers.{L}.post_attention_layernorm"),
    *[(f"layers.{{L}}.hc_{s}_{x}", f"model.layers.{{L}}.{s}_hc.{x}") for s in ("attn", "ffn") for x in ("fn", "base", "scale")],
    *[(f"layers.{{L}}.attn.indexer.compressor.{a}", f"model.layers.{{L}}.self_attn.compressor.indexer.{b}")
      for a, b in (("wkv", "kv_proj"), ("wgate", "gate_proj"), ("ape", "position_bias"), ("norm", "kv_norm"))],
    ("layers.{L}.attn.indexer.wq_b", "model.layers.{L}.self_attn.compressor.indexer.q_b_proj"),
    ("layers.{L}.attn.indexer.weights_proj", "model.layers.{L}.self_attn.compressor.indexer.scorer.weights_proj"),
    *[(f"layers.{{L}}.attn.compressor.{a}", f"model.layers.{{L}}.self_attn.compressor.{b}")
      for a, b in (("wkv", "kv_proj"), ("wgate", "gate_proj"), ("ape", "position_bias"), ("norm", "kv_norm"))],
    *[(f"layers.{{L}}.attn.{a}", f"model.layers.{{L}}.self_attn.{b}")
      for a, b in (("wq_a", "q_a_proj"), ("q_norm", "q_a_norm"), ("wq_b", "q_b_proj"), ("wkv", "kv_proj"),
                   ("kv_norm", "kv_norm"), ("wo_a", "o_a_proj"), ("wo_b", "o_b_proj"), ("attn_sink", "sinks"))],
    ("layers.{L}.ffn.gate.bias", "model.layers.{L}.mlp.gate.e_score_correction_bias"),
    ("layers.{L}.ffn.gate", "model.layers.{L}.mlp.gate"),
    *[(f"layers.{{L}}.ffn.shared_experts.{a}", f"model.layers.{{L}}.mlp.shared_experts.{b}")
      for a, b in (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj"))],
    *[(f"layers.{{L}}.ffn.experts.{{E}}.{a}", f"model.layers.{{L}}.mlp.experts.{{E}}.{b}")
      for a, b in (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj"))],
    *[(f"layers.{{L}}.ffn.experts.{{E}}.{a}", f"model.layers.{{L}}.mlp.experts.{{E}}.{a}") for a in ("w1", "w2", "w3")],
]
_FUSED = re.compile(r"model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)$")


def _compile(t: str) -> re.Pattern:
    pat = re.escape(t).replace(r"\{L\}", r"(?P<L>\d+)").replace(r"\{E\}", r"(?P<E>\d+)")
    return re.compile(f"^{pat}(?P<rest>\\..+)?$")


_TO_NATIVE = [(_compile(h), n) for n, h in NAME_MAP]
_TO_HF = [(_compile(n), h) for n, h in NAME_MAP]


def _translate(name: str, rules) -> str | None:
    for rx, tmpl in rules:
        m = rx.match(name)
        if m:
            g = m.groupdict()
            out = tmpl.replace("{L}", g.get("L") or "").replace("{E}", g.get("E") or "")
            return out + (m.group("rest") or "")
    return None


def hf_to_native(name: str) -> str | None:
    return _translate(name, _TO_NATIVE)


def native_to_hf(name: str) -> str:
    hf = _translate(name, _TO_HF)
    if hf is None:
        raise CheckpointError(f"no HF name for native tensor {name!r}")
    return hf


def module_key(native: str) -> str:
    """Native tensor name -> the model's state_dict key (only the mHC parameters differ)."""
    return re.sub(r"hc_(attn|ffn|head)_(fn|base|scale)$", r"hc_\1.\2", native)


# -- what a model of these args must contain -------------------------------------------------------------
def expected_tensors(args: ModelArgs) -> dict[str, tuple[tuple[int, ...], str]]:
    """native name -> (shape, kind); kind: linear (a quantisable weight), float (kept fp32), int."""
    d, H, D, hc = args.dim, args.n_heads, args.head_dim, args.hc_mult
    mix = (2 + hc) * hc
    out: dict[str, tuple[tuple[int, ...], str]] = {
        "embed.weight": ((args.vocab_size, d), "float"), "head.weight": ((args.vocab_size, d), "linear"),
        "norm.weight": ((d,), "float"), "hc_head_fn": ((hc, hc * d), "float"), "hc_head_base": ((hc,), "float"),
        "hc_head_scale": ((1,), "float"),
    }
    for L in range(args.n_layers):
        p = f"layers.{L}."
        r = args.ratio(L)
        out.update({
            p + "attn_norm.weight": ((d,), "float"), p + "ffn_norm.weight": ((d,), "float"),
            **{p + f"hc_{s}_fn": ((mix, hc * d), "float") for s in ("attn", "ffn")},
            **{p + f"hc_{s}_base": ((mix,), "float") for s in ("attn", "ffn")},
            **{p + f"hc_{s}_scale": ((3,), "float") for s in ("attn", "ffn")},
            p + "attn.wq_a.weight": ((args.q_lora_rank, d), "linear"), p + "attn.q_norm.weight": ((args.q_lora_rank,), "float"),
            p + "attn.wq_b.weight": ((H * D, args.q_lora_rank), "linear"), p + "attn.wkv.weight": ((D, d), "linear"),
            p + "attn.kv_norm.weight": ((D,), "float"),
            p + "attn.wo_a.weight": ((args.o_groups * args.o_lora_rank, H * D // args.o_groups), "linear"),
            p + "attn.wo_b.weight": ((d, args.o_groups * args.o_lora_rank), "linear"),
            p + "attn.attn_sink": ((H,), "float"),
            p + "ffn.gate.weight": ((args.n_routed_experts, d), "linear"),
        })
        if r:
            coff = 2 if r == 4 else 1
            out.update({p + "attn.compressor.wkv.weight": ((coff * D, d), "linear"),
                        p + "attn.compressor.wgate.weight": ((coff * D, d), "linear"),
                        p + "attn.compressor.ape": ((r, coff * D), "float"), p + "attn.compressor.norm.weight": ((D,), "float")})
        if r == 4:
            Hi, Di = args.index_n_heads, args.index_head_dim
            out.update({p + "attn.indexer.wq_b.weight": ((Hi * Di, args.q_lora_rank), "linear"),
                        p + "attn.indexer.weights_proj.weight": ((Hi, d), "linear"),
                        p + "attn.indexer.compressor.wkv.weight": ((2 * Di, d), "linear"),
                        p + "attn.indexer.compressor.wgate.weight": ((2 * Di, d), "linear"),
                        p + "attn.indexer.compressor.ape": ((4, 2 * Di), "float"),
                        p + "attn.indexer.compressor.norm.weight": ((Di,), "float")})
        if L < args.n_hash_layers:
            out[p + "ffn.gate.tid2eid"] = ((args.vocab_size, args.n_activated_experts), "int")
        else:
            out[p + "ffn.gate.bias"] = ((args.n_routed_experts,), "float")
        I = args.moe_inter_dim
        for e in range(args.n_routed_experts):
            out.update({p + f"ffn.experts.{e}.w1.weight": ((I, d), "linear"), p + f"ffn.experts.{e}.w3.weight": ((I, d), "linear"),
                        p + f"ffn.experts.{e}.w2.weight": ((d, I), "linear")})
        Is = I * args.n_shared_experts
        out.update({p + "ffn.shared_experts.w1.weight": ((Is, d), "linear"), p + "ffn.shared_experts.w3.weight": ((Is, d), "linear"),
                    p + "ffn.shared_experts.w2.weight": ((d, Is), "linear")})
    return out


# -- reading --------------------------------------------------------------------------------------------
class _Source:
    """Tensors of a checkpoint directory by stored name, memory-mapped, one safe_open handle per shard."""

    def __init__(self, root: Path):
        from safetensors import SafetensorError, safe_open
        self.root = root
        index = root / "model.safetensors.index.json"
        if index.exists():
            try:
                wmap = json.loads(index.read_text())["weight_map"]
            except (ValueError, KeyError) as e:
                raise CheckpointError(f"{index}: not a valid safetensors index ({e.__class__.__name__}: {e})") from None
            files = sorted(set(wmap.values()))
        else:
            files = sorted(p.name for p in root.glob("*.safetensors"))
            wmap = None
            if not files:
                raise CheckpointError(f"{root}: no *.safetensors files and no model.safetensors.index.json")
        self.handles, self.where = {}, {}
        for f in files:
            path = root / f
            if not path.exists():
                raise CheckpointError(f"{path}: listed in the index but missing")
            try:
                h = safe_open(str(path), framework="pt")
            except (SafetensorError, OSError, ValueError) as e:
                raise CheckpointError(f"{path}: corrupt or truncated safetensors file ({e})") from None
            self.handles[f] = h
            for k in h.keys():
                self.where[k] = f
        if wmap is not None:
            for k, f in wmap.items():
                if self.where.get(k) != f:
                    raise CheckpointError(f"{root / f}: index lists tensor {k!r} but the file does not hold it")

    def get(self, name: str) -> torch.Tensor:
        try:
            return self.handles[self.where[name]].get_tensor(name)
        except Exception as e:  # noqa: BLE001 - safetensors raises several types on damaged data
            raise CheckpointError(f"{self.root / self.where[name]}: tensor {name!r} cannot be read ({e})") from None


_SUFFIXES = ("weight", "scale", "weight_scale_inv", "weight_scale", "weight_scale_2", "input_scale")


def _group(names: list[str]) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Stored names -> {native base: {suffix: stored name}}; and names that map to nothing."""
    groups: dict[str, dict[str, str]] = {}
    unknown = []
    for n in names:
        if n.startswith("mtp.") or _FUSED.match(n):
            continue
        native = hf_to_native(n) if n.startswith(("model.", "lm_head")) else n
        if native is None:
            unknown.append(n)
            continue
        base, _, suffix = native.rpartition(".")
        if suffix in _SUFFIXES and base:
            groups.setdefault(base, {})[suffix] = n
        else:
            groups.setdefault(native, {})[""] = n
    return groups, unknown


def _finite(name: str, t: torch.Tensor) -> None:
    if not torch.isfinite(t.float()).all():
        raise CheckpointError(f"tensor {name!r}: non-finite values in a scale")


def _decode_linear(src: _Source, base: str, parts: dict[str, str], shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A linear weight in any supported format -> (fp32 weight, input_scale or None)."""
    wname = parts.get("weight")
    if wname is None:
        raise CheckpointError(f"tensor {base}.weight: missing (expected shape {shape})")
    w = src.get(wname)
    out, k = shape
    if w.dtype == torch.uint8 and "weight_scale" in parts:              # NVFP4 (ModelOpt)
        for s in ("weight_scale", "weight_scale_2"):
            if s not in parts:
                raise CheckpointError(f"tensor {base}.{s}: missing for NVFP4 weight {wname!r}")
        if tuple(w.shape) != (out, k // 2):
            raise CheckpointError(f"tensor {wname!r}: NVFP4 packed shape {tuple(w.shape)}, expected {(out, k // 2)}")
        sc, sc2 = src.get(parts["weight_scale"]), src.get(parts["weight_scale_2"])
        if sc.dtype != torch.float8_e4m3fn:
            raise CheckpointError(f"tensor {parts['weight_scale']!r}: dtype {sc.dtype}, expected float8_e4m3fn")
        _finite(parts["weight_scale"], sc)
        _finite(parts["weight_scale_2"], sc2)
        try:
            wf = dequant_nvfp4_weight(w, sc, sc2)
        except ValueError as e:
            raise CheckpointError(f"tensor {wname!r}: {e}") from None
        inp = src.get(parts["input_scale"]) if "input_scale" in parts else None
        if inp is not None:
            _finite(parts["input_scale"], inp)
        return wf, inp
    if w.dtype == torch.int8 and "scale" in parts:                       # MXFP4 experts
        sc = src.get(parts["scale"])
        _finite(parts["scale"], sc.float() if sc.dtype != torch.float8_e8m0fnu else sc.float())
        try:
            return dequant_mxfp4(w, sc), None
        except ValueError as e:
            raise CheckpointError(f"tensor {wname!r}: {e}") from None
    if w.dtype == torch.float8_e4m3fn:                                   # FP8 block
        sname = parts.get("scale") or parts.get("weight_scale_inv")
        if sname is None:
            raise CheckpointError(f"tensor {base}.scale: missing for FP8 weight {wname!r}")
        sc = src.get(sname)
        _finite(sname, sc)
        try:
            return dequant_fp8_block(w, sc), None
        except ValueError as e:
            raise CheckpointError(f"tensor {wname!r}: {e}") from None
    if not w.dtype.is_floating_point:
        raise CheckpointError(f"tensor {wname!r}: dtype {w.dtype} is not a supported weight format")
    if tuple(w.shape) != shape:
        raise CheckpointError(f"tensor {wname!r}: shape {tuple(w.shape)}, expected {shape}")
    return w.float(), None


def read_state(root: Path, args: ModelArgs) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Validate and decode a checkpoint -> (native name -> fp32/int tensor, linear base -> input_scale)."""
    src = _Source(root)
    groups, unknown = _group(list(src.where))
    # fused HF experts: gate_up_proj [E, 2I, d] (w1 rows first, then w3), down_proj [E, d, I]
    fused: dict[str, torch.Tensor] = {}
    for n in src.where:
        m = _FUSED.match(n)
        if m:
            L, kind = m.group(1), m.group(2)
            t = src.get(n)
            for e in range(t.shape[0]):
                if kind == "gate_up_proj":
                    w1, w3 = t[e].chunk(2, 0)
                    fused[f"layers.{L}.ffn.experts.{e}.w1"] = w1
                    fused[f"layers.{L}.ffn.experts.{e}.w3"] = w3
                else:
                    fused[f"layers.{L}.ffn.experts.{e}.w2"] = t[e]
    expected = expected_tensors(args)
    state: dict[str, torch.Tensor] = {}
    input_scales: dict[str, torch.Tensor] = {}
    for name, (shape, kind) in expected.items():
        if kind == "linear":
            base = name[: -len(".weight")]
            if base in fused:
                w = fused.pop(base)
                if tuple(w.shape) != shape:
                    raise CheckpointError(f"fused expert tensor for {name!r}: shape {tuple(w.shape)}, expected {shape}")
                state[name] = w.float()
                continue
            parts = groups.pop(base, None)
            if parts is None:
                raise CheckpointError(f"tensor {name!r} (or its HF name {native_to_hf(name)!r}): missing from {root}")
            w, inp = _decode_linear(src, base, parts, shape)
            if tuple(w.shape) != shape:
                raise CheckpointError(f"tensor {name!r}: decoded shape {tuple(w.shape)}, expected {shape}")
            state[name] = w
            if inp is not None:
                input_scales[base] = inp
            continue
        base, _, suffix = name.rpartition(".")
        parts = groups.get(base, {}) if suffix in _SUFFIXES else groups.get(name, {})
        key = suffix if suffix in _SUFFIXES else ""
        stored = parts.pop(key, None)
        if not parts:
            groups.pop(base if suffix in _SUFFIXES else name, None)
        if stored is None:
            raise CheckpointError(f"tensor {name!r}: missing from {root} (expected shape {shape})")
        t = src.get(stored)
        if tuple(t.shape) != shape:
            raise CheckpointError(f"tensor {stored!r}: shape {tuple(t.shape)}, expected {shape}")
        if kind == "int":
            if t.dtype not in (torch.int64, torch.int32):
                raise CheckpointError(f"tensor {stored!r}: dtype {t.dtype}, expected int64 (or int32)")
            if int(t.min()) < 0 or int(t.max()) >= args.n_routed_experts:
                raise CheckpointError(f"tensor {stored!r}: expert ids outside [0, {args.n_routed_experts})")
            state[name] = t.long()
        else:
            if not t.dtype.is_floating_point:
                raise CheckpointError(f"tensor {stored!r}: dtype {t.dtype}, expected a floating-point type")
            state[name] = t.float()
    leftovers = sorted(n for parts in groups.values() for n in parts.values()) + sorted(unknown) + sorted(fused)
    if leftovers:
        more = f" (and {len(leftovers) - 1} more)" if len(leftovers) > 1 else ""
        raise CheckpointError(f"unexpected tensor {leftovers[0]!r} in {root}{more}: not part of a model with this config.json")
    return state, input_scales


# -- writing --------------------------------------------------------------------------------------------
def write_checkpoint(root: Path, args: ModelArgs, state: dict[str, torch.Tensor], *, fmt: str = "nvfp4",
                     naming: str = "hf", shard_bytes: int | None = None, calib: dict[str, float] | None = None) -> None:
    """Write config.json + safetensors. fmt: bf16 | fp32 | nvfp4 (every linear) | native-fp8 (the DeepSeek release
    layout: FP8 block linears, MXFP4 experts). naming: hf (per-expert names for NVFP4, fused otherwise) | native."""
    from safetensors.torch import save_file
    root.mkdir(parents=True, exist_ok=True)
    out: dict[str, torch.Tensor] = {}
    expected = expected_tensors(args)
    fused: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
    for name, (shape, kind) in expected.items():
        t = state[name]
        base = name[: -len(".weight")] if kind == "linear" else name
        if kind == "linear" and fmt == "nvfp4":
            q = quantize_nvfp4_weight(t)
            amax = (calib or {}).get(base, 4.0)
            q["input_scale"] = torch.tensor(amax / (6.0 * 448.0), dtype=torch.float32)
            items = {f"{base}.{k}": v for k, v in q.items()}
        elif kind == "linear" and fmt == "native-fp8" and base.split(".")[-1] not in ("gate", "head") \
                and ".compressor." not in base and "weights_proj" not in base:
            if ".experts." in base and "shared" not in base:
                w, s = quantize_mxfp4(t)
            else:
                w, s = quantize_fp8_block(t)
            items = {f"{base}.weight": w, f"{base}.scale": s}
        elif kind == "int":
            items = {name: t.long()}
        elif kind == "float" and (name.endswith("fn") or name.endswith("base") or name.endswith("scale") or
                                  name.endswith("ape") or name.endswith("attn_sink") or name.endswith("gate.bias")):
            items = {name: t.float()}                    # mHC, sinks, ape and the gate bias are fp32
        else:
            items = {name: t.to(torch.float32 if fmt == "fp32" else torch.bfloat16)}
        for n, v in items.items():
            m = re.match(r"layers\.(\d+)\.ffn\.experts\.(\d+)\.(w[123])\.weight$", n)
            if naming == "hf" and fmt not in ("nvfp4", "native-fp8") and m:
                fused.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = v
                continue
            out[native_to_hf(n) if naming == "hf" else n] = v.contiguous()
    for L, experts in fused.items():
        E = len(experts)
        out[f"model.layers.{L}.mlp.experts.gate_up_proj"] = torch.stack([torch.cat([experts[e]["w1"], experts[e]["w3"]], 0) for e in range(E)])
        out[f"model.layers.{L}.mlp.experts.down_proj"] = torch.stack([experts[e]["w2"] for e in range(E)])
    cfg = args.to_json()
    cfg.pop("max_seq_len")
    if fmt == "nvfp4":
        cfg["moe_quant_algo"] = "NVFP4"
    (root / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    names = sorted(out)
    if not shard_bytes:
        save_file({n: out[n] for n in names}, str(root / "model.safetensors"))
        return
    shards, cur, size = [], [], 0
    for n in names:
        nb = out[n].numel() * out[n].element_size()
        if cur and size + nb > shard_bytes:
            shards.append(cur)
            cur, size = [], 0
        cur.append(n)
        size += nb
    shards.append(cur)
    wmap = {}
    for i, group in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file({n: out[n] for n in group}, str(root / fname))
        wmap.update({n: fname for n in group})
    total = sum(out[n].numel() * out[n].element_size() for n in names)
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": wmap}, indent=1))


def random_state(args: ModelArgs, seed: int = 0) -> dict[str, torch.Tensor]:
    """Deterministic synthetic weights with sane scales; tid2eid rows hold distinct experts."""
    g = torch.Generator().manual_seed(seed)
    state = {}
    for name, (shape, kind) in expected_tensors(args).items():
        if kind == "int":
            state[name] = torch.stack([torch.randperm(args.n_routed_experts, generator=g)[: shape[1]] for _ in range(shape[0])])
        elif name.endswith("norm.weight"):
            state[name] = 1.0 + 0.1 * torch.randn(shape, generator=g)
        elif name.endswith("_scale"):
            state[name] = 0.5 + 0.5 * torch.rand(shape, generator=g)
        elif name.endswith("_base") or name.endswith("gate.bias") or name.endswith("attn_sink"):
            state[name] = 0.1 * torch.randn(shape, generator=g)
        elif name.endswith("ape"):
            state[name] = 0.5 * torch.randn(shape, generator=g)
        elif name == "embed.weight":
            state[name] = torch.randn(shape, generator=g)
        else:
            fan_in = shape[-1]
            state[name] = torch.randn(shape, generator=g) / math.sqrt(fan_in)
    return state
