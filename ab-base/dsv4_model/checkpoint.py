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
from .quant import QWeight, e8m0_to_float, quantize_fp8_block, quantize_mxfp4, quantize_nvfp4_weight


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
    d, hc = args.dim, args.hc_mult
    out: dict[str, tuple[tuple[int, ...], str]] = {
        "embed.weight": ((args.vocab_size, d), "float"), "head.weight": ((args.vocab_size, d), "linear"),
        "norm.weight": ((d,), "float"), "hc_head_fn": ((hc, hc * d), "float"), "hc_head_base": ((hc,), "float"),
        "hc_head_scale": ((1,), "float"),
    }
    for L in range(args.n_layers):
        out.update(_block_tensors(args, f"layers.{L}.", L))
    return out


def mtp_tensors(args: ModelArgs) -> dict[str, tuple[tuple[int, ...], str]]:
    """The multi-token-prediction blocks `mtp.{i}.*` (official `MTPBlock`): one block at layer id n_layers + i
    (its compress_ratios entry, a gate with bias), the projections e_proj/h_proj that mix the next token's
    embedding into the main model's streams, their norms, and its own hc head and final norm. Embedding and LM
    head are the main model's (the official convert.py drops any mtp copy of them)."""
    d, hc = args.dim, args.hc_mult
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    for i in range(args.n_mtp_layers):
        p = f"mtp.{i}."
        out.update(_block_tensors(args, p, args.n_layers + i))
        out.update({p + "e_proj.weight": ((d, d), "linear"), p + "h_proj.weight": ((d, d), "linear"),
                    **{p + f"{n}.weight": ((d,), "float") for n in ("enorm", "hnorm", "norm")},
                    p + "hc_head_fn": ((hc, hc * d), "float"), p + "hc_head_base": ((hc,), "float"),
                    p + "hc_head_scale": ((1,), "float")})
    return out


def _block_tensors(args: ModelArgs, p: str, L: int) -> dict[str, tuple[tuple[int, ...], str]]:
    """The tensors of one block named under prefix p, at layer id L (its attention type and routing)."""
    d, H, D, hc = args.dim, args.n_heads, args.head_dim, args.hc_mult
    mix = (2 + hc) * hc
    r = args.ratio(L)
    out = {
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
    }
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
_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "F8_E4M3": torch.float8_e4m3fn, "F8_E8M0": torch.float8_e8m0fnu, "U8": torch.uint8, "I8": torch.int8,
           "I16": torch.int16, "I32": torch.int32, "I64": torch.int64, "F4": torch.float4_e2m1fn_x2, "BOOL": torch.bool}
_PACKED = (torch.uint8, torch.int8, torch.float4_e2m1fn_x2)       # two e2m1 codes per byte


class _Source:
    """Tensors of a checkpoint directory by stored name, memory-mapped, one safe_open handle per shard.
    Headers (dtype, shape) are read without touching the data."""

    def __init__(self, root: Path):
        from safetensors import SafetensorError, safe_open
        self.root = root
        index = root / "model.safetensors.index.json"
        if index.exists():
            try:
                wmap = json.loads(index.read_text())["weight_map"]
            except (ValueError, KeyError, TypeError) as e:
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

    def header(self, name: str) -> tuple[torch.dtype | None, tuple[int, ...]]:
        """(dtype, shape) as torch will see them; a safetensors F4 header counts nibbles, torch counts bytes."""
        sl = self.handles[self.where[name]].get_slice(name)
        dt, shape = _DTYPES.get(sl.get_dtype()), tuple(sl.get_shape())
        if dt == torch.float4_e2m1fn_x2 and shape:
            shape = shape[:-1] + (shape[-1] // 2,)
        return dt, shape

    def get(self, name: str) -> torch.Tensor:
        try:
            t = self.handles[self.where[name]].get_tensor(name)
        except Exception as e:  # noqa: BLE001 - safetensors raises several types on damaged data
            raise CheckpointError(f"{self.root / self.where[name]}: tensor {name!r} cannot be read ({e})") from None
        _check_finite(name, t)
        return t


def _check_finite(name: str, t: torch.Tensor) -> None:
    """Any NaN/inf in a stored tensor is a load error (it would give all-NaN logits with exit 0)."""
    if t.dtype == torch.float8_e4m3fn:
        bad = bool(((t.view(torch.uint8) & 0x7F) == 0x7F).any())          # e4m3fn has NaN only
    elif t.dtype == torch.float8_e8m0fnu:
        bad = bool((t.view(torch.uint8) == 0xFF).any())
    elif t.dtype.is_floating_point and t.dtype.itemsize > 1:
        bad = not bool(torch.isfinite(t).all())
    else:
        return                  # integers and packed e2m1 codes have no non-finite encodings
    if bad:
        raise CheckpointError(f"tensor {name!r}: non-finite values (NaN or inf)")


_SUFFIXES = ("weight", "scale", "weight_scale_inv", "weight_scale", "weight_scale_2", "input_scale")
_EXPERT = re.compile(r"^((?:layers|mtp)\.\d+)\.ffn\.experts\.(\d+)\.(w[123])$")


def _group(names: list[str]) -> tuple[dict[str, dict[str, str]], list[str], list[str]]:
    """Stored names -> ({native base: {suffix: stored name}}, names that map to nothing, mtp.* names)."""
    groups: dict[str, dict[str, str]] = {}
    unknown, mtp = [], []
    for n in names:
        if n.startswith(("mtp.", "model.mtp.")):
            mtp.append(n)          # native names inside (HF transformers has no MTP module to rename them for)
        if _FUSED.match(n):
            continue
        native = n[len("model."):] if n.startswith("model.mtp.") else hf_to_native(n) if n.startswith(("model.", "lm_head")) else n
        if native is None:
            unknown.append(n)
            continue
        base, _, suffix = native.rpartition(".")
        if suffix in _SUFFIXES and base:
            groups.setdefault(base, {})[suffix] = n
        else:
            groups.setdefault(native, {})[""] = n
    return groups, unknown, mtp


def _plan_linear(src: _Source, base: str, parts: dict[str, str], shape: tuple[int, int]) -> str:
    """The stored format of one projection, checked from the headers: plain | fp8 | mxfp4 | nvfp4."""
    wname = parts.get("weight")
    if wname is None:
        raise CheckpointError(f"tensor {base}.weight: missing (expected shape {shape})")
    dt, wshape = src.header(wname)
    out, k = shape

    def need(suffix: str, sshape, dtypes) -> None:
        sname = parts.get(suffix)
        if sname is None:
            raise CheckpointError(f"tensor {base}.{suffix}: missing for the {fmt} weight {wname!r}")
        sdt, got = src.header(sname)
        if sshape is not None and got != sshape and not (sshape == () and got == (1,)):
            raise CheckpointError(f"tensor {sname!r}: shape {got}, expected {sshape} for the {fmt} weight {wname!r} of {shape}")
        if sdt not in dtypes:
            raise CheckpointError(f"tensor {sname!r}: dtype {sdt}, expected one of {[str(d) for d in dtypes]}")

    if dt in _PACKED and "weight_scale" in parts:
        fmt = "nvfp4"
        need("weight_scale", (out, k // 16), (torch.float8_e4m3fn,))
        need("weight_scale_2", (), (torch.float32,))
        if "input_scale" in parts:
            need("input_scale", (), (torch.float32,))
    elif dt in _PACKED and ("scale" in parts or "weight_scale_inv" in parts):
        fmt = "mxfp4"
        parts.setdefault("scale", parts.pop("weight_scale_inv", None))
        need("scale", (out, k // 32), (torch.float8_e8m0fnu, torch.uint8, torch.int8, torch.float32))
    elif dt == torch.float8_e4m3fn:
        fmt = "fp8"
        parts.setdefault("scale", parts.pop("weight_scale_inv", None))
        if parts["scale"] is None:
            parts.pop("scale")
        need("scale", ((out + 127) // 128, (k + 127) // 128), (torch.float8_e8m0fnu, torch.float32, torch.uint8))
    elif dt is not None and dt.is_floating_point:
        fmt = "plain"
    else:
        raise CheckpointError(f"tensor {wname!r}: dtype {dt} is not a supported weight format "
                              "(plain float, FP8 e4m3 + scale, MXFP4 + scale, NVFP4 + weight_scale/_2)")
    want = (out, k // 2) if fmt in ("mxfp4", "nvfp4") else (out, k)
    if wshape != want:
        raise CheckpointError(f"tensor {wname!r}: shape {wshape}, expected {want} for a {fmt} weight of logical shape {shape}")
    extra = set(parts) - {"weight", "scale", "weight_scale", "weight_scale_2", "input_scale"}
    if fmt == "plain":
        extra |= set(parts) - {"weight"}
    if extra:
        raise CheckpointError(f"tensor {parts[sorted(extra)[0]]!r}: unexpected beside a {fmt} weight {wname!r}")
    return fmt


def _e8m0_bytes(name: str, t: torch.Tensor) -> torch.Tensor:
    if t.dtype in (torch.float8_e8m0fnu, torch.int8):
        return t.view(torch.uint8)
    if t.dtype == torch.uint8:
        return t
    e = torch.log2(t.float())
    if not bool((e == e.round()).all()):
        raise CheckpointError(f"tensor {name!r}: MXFP4 scales must be powers of two")
    return (e + 127).to(torch.uint8)


def _read_linear(src: _Source, parts: dict[str, str], fmt: str) -> QWeight:
    w = src.get(parts["weight"])
    if fmt == "plain":
        return QWeight("plain", w)
    if fmt == "fp8":
        return QWeight("fp8", w, e8m0_to_float(src.get(parts["scale"])))
    if fmt == "mxfp4":
        return QWeight("mxfp4", w.view(torch.uint8), _e8m0_bytes(parts["scale"], src.get(parts["scale"])))
    inp = src.get(parts["input_scale"]).float().reshape(()) if "input_scale" in parts else None
    return QWeight("nvfp4", w.view(torch.uint8), src.get(parts["weight_scale"]),
                   src.get(parts["weight_scale_2"]).float().reshape(()), inp)


class Plan:
    """What a checkpoint holds for a model of `args`, validated from the headers before any data is read.

    `mtp`: read the multi-token-prediction blocks (`mtp.*`) when the checkpoint holds them and the config asks
    for them (`num_nextn_predict_layers`); then they must be complete and well formed like the rest. `self.mtp`
    lists the stored mtp.* names, `self.with_mtp` says whether they are read (if not, they are ignored)."""

    def __init__(self, root: Path, args: ModelArgs, mtp: bool = True):
        self.root, self.args = root, args
        self.src = src = _Source(root)
        groups, unknown, self.mtp = _group(list(src.where))
        self.with_mtp = bool(mtp and self.mtp and args.n_mtp_layers)
        expected = expected_tensors(args)
        if self.with_mtp:
            expected.update(mtp_tensors(args))
        else:
            groups = {b: parts for b, parts in groups.items() if not b.startswith("mtp.")}
        fused = {(int(m.group(1)), m.group(2)): n for n in src.where if (m := _FUSED.match(n))}
        self.items: list[tuple] = []
        E, I, d = args.n_routed_experts, args.moe_inter_dim, args.dim
        for name, (shape, kind) in expected.items():
            m = _EXPERT.match(name[: -len(".weight")]) if kind == "linear" else None
            if m:
                block, e, proj = m.group(1), int(m.group(2)), m.group(3)
                if e == 0:
                    self.items.append(self._plan_experts(groups, fused, block, proj, E, shape))
                continue
            if kind == "linear":
                base = name[: -len(".weight")]
                parts = groups.pop(base, None)
                if parts is None:
                    raise CheckpointError(f"tensor {name!r} (or its HF name {native_to_hf(name)!r}): missing from {root}")
                self.items.append(("linear", base, parts, _plan_linear(src, base, parts, shape)))
                continue
            base, _, suffix = name.rpartition(".")
            gkey, key = (base, suffix) if suffix in _SUFFIXES else (name, "")
            parts = groups.get(gkey, {})
            stored = parts.pop(key, None)
            if not parts:
                groups.pop(gkey, None)
            if stored is None:
                raise CheckpointError(f"tensor {name!r}: missing from {root} (expected shape {shape})")
            dt, got = src.header(stored)
            if got != shape:
                raise CheckpointError(f"tensor {stored!r}: shape {got}, expected {shape}")
            if kind == "int" and dt not in (torch.int64, torch.int32):
                raise CheckpointError(f"tensor {stored!r}: dtype {dt}, expected int64 (or int32)")
            if kind == "float" and (dt is None or not dt.is_floating_point or dt.itemsize == 1):
                raise CheckpointError(f"tensor {stored!r}: dtype {dt}, expected a 16/32-bit floating-point type")
            self.items.append(("tensor", name, stored, kind))
        leftovers = sorted(n for parts in groups.values() for n in parts.values()) + sorted(unknown) + sorted(fused.values())
        if leftovers:
            more = f" (and {len(leftovers) - 1} more)" if len(leftovers) > 1 else ""
            raise CheckpointError(f"unexpected tensor {leftovers[0]!r} in {root}{more}: not part of a model with this config.json")
        self.largest = max(_nbytes(src, n) for n in src.where)
        self.total = sum(_nbytes(src, n) for n in src.where)

    def _plan_experts(self, groups, fused, block: str, proj: str, E: int, shape) -> tuple:
        """block: "layers.L" or "mtp.i" (HF-fused stacks exist for the main layers only)."""
        L = int(block.split(".")[1]) if block.startswith("layers.") else None
        key = (L, "gate_up_proj" if proj in ("w1", "w3") else "down_proj")
        if key in fused:
            name = fused[key]
            dt, got = self.src.header(name)
            out, k = shape
            want = (E, 2 * out, k) if key[1] == "gate_up_proj" else (E, out, k)
            if got != want:
                raise CheckpointError(f"tensor {name!r}: shape {got}, expected {want}")
            if dt is None or not dt.is_floating_point or dt.itemsize == 1:
                raise CheckpointError(f"tensor {name!r}: dtype {dt}; fused HF experts are read in plain bf16/fp32 only")
            if proj != "w1":          # w1 and w3 share gate_up_proj: it is consumed once w3 is planned
                fused.pop(key)
            return ("fused", f"layers.{L}.ffn.experts.{proj}", name, proj, out)
        per, fmt = [], None
        for e in range(E):
            base = f"{block}.ffn.experts.{e}.{proj}"
            parts = groups.pop(base, None)
            if parts is None:
                raise CheckpointError(f"tensor {base}.weight (or its HF name {native_to_hf(base + '.weight')!r}): missing from {self.root}")
            f = _plan_linear(self.src, base, parts, shape)
            if fmt is not None and f != fmt:
                raise CheckpointError(f"tensor {parts['weight']!r}: stored as {f}, but expert 0 of this layer is {fmt}")
            fmt = f
            per.append(parts)
        if fmt == "nvfp4" and len({"input_scale" in p for p in per}) > 1:
            raise CheckpointError(f"{block} {proj}: some experts carry an input_scale and some do not")
        return ("experts", f"{block}.ffn.experts.{proj}", per, fmt)

    def tensors(self, device: torch.device | str = "cpu"):
        """Yield (native name, Tensor or QWeight) one at a time, in stored format; expert stacks are filled in
        place on `device`, so at most one stored tensor (or fused expert tensor) is held on the host at once."""
        src = self.src
        for item in self.items:
            if item[0] == "tensor":
                _, name, stored, kind = item
                t = src.get(stored)
                if kind == "int":
                    if int(t.min()) < 0 or int(t.max()) >= self.args.n_routed_experts:
                        raise CheckpointError(f"tensor {stored!r}: expert ids outside [0, {self.args.n_routed_experts})")
                    t = t.long()
                yield name, t
            elif item[0] == "linear":
                _, base, parts, fmt = item
                yield base, _read_linear(src, parts, fmt)
            elif item[0] == "fused":
                _, name, stored, proj, out = item
                t = src.get(stored)
                part = t[:, :out] if proj == "w1" else t[:, out:] if proj == "w3" else t
                yield name, QWeight("plain", part.to(device, copy=True).contiguous())
                del t, part
            else:
                _, name, per, fmt = item
                stack = None
                for e, parts in enumerate(per):
                    qw = _read_linear(src, parts, fmt)
                    if stack is None:
                        alloc = (lambda t: None if t is None else torch.empty((len(per), *t.shape), dtype=t.dtype, device=device))
                        stack = QWeight(fmt, alloc(qw.data), alloc(qw.scale), alloc(qw.scale2), alloc(qw.input_scale))
                    for dst, s in zip((stack.data, stack.scale, stack.scale2, stack.input_scale),
                                      (qw.data, qw.scale, qw.scale2, qw.input_scale)):
                        if dst is not None:
                            dst[e].copy_(s)
                    del qw
                yield name, stack


def _nbytes(src: _Source, name: str) -> int:
    dt, shape = src.header(name)
    n = math.prod(shape)
    return n * (dt.itemsize if dt is not None else 1)


def read_state(root: Path, args: ModelArgs) -> dict[str, torch.Tensor | QWeight]:
    """Validate a checkpoint and read it whole, in stored format: native name (or projection base) -> value."""
    return dict(Plan(root, args).tensors())


# -- writing --------------------------------------------------------------------------------------------
_FP8_IN_RELEASE = re.compile(r"attn\.(wq_a|wq_b|wkv|wo_a|wo_b)$|attn\.indexer\.wq_b$|shared_experts\.w[123]$|[eh]_proj$")
WRITE_FORMATS = ("fp32", "bf16", "release", "release-fp4x2", "modelopt", "nvfp4")


def stored_format(fmt: str, base: str) -> str:
    """The format the writer stores projection `base` in, for checkpoint format `fmt`:
    fp32/bf16: plain. release: the DeepSeek release (FP8 attention/shared/indexer wq_b, MXFP4 routed experts as
    int8, bf16 head/gate/compressor/weights_proj); release-fp4x2: the same with experts as float4_e2m1fn_x2 (what
    the official convert.py writes); modelopt: the release with NVFP4 routed experts (nvidia/*-NVFP4);
    nvfp4: every projection NVFP4 (a "quantise every Linear" export)."""
    if fmt in ("fp32", "bf16"):
        return "plain"
    if fmt == "nvfp4":
        return "nvfp4"
    if ".ffn.experts." in base:
        return "nvfp4" if fmt == "modelopt" else "mxfp4"
    return "fp8" if _FP8_IN_RELEASE.search(base) else "plain"


def stored_fp32(name: str) -> bool:
    """A non-projection tensor the checkpoints store in fp32 (mHC, sinks, ape and the gate bias); the other plain
    floats (norms, embedding) are stored like the projections (bf16 but in an fp32 checkpoint)."""
    return name.endswith(("fn", "base", "scale", "ape", "attn_sink", "gate.bias"))


def write_checkpoint(root: Path, args: ModelArgs, state: dict[str, torch.Tensor], *, fmt: str = "nvfp4",
                     naming: str = "hf", shard_bytes: int | None = None, calib: dict[str, float] | None = None,
                     config: str = "native", extra: dict[str, torch.Tensor] | None = None) -> None:
    """Write config.json + safetensors in checkpoint format `fmt` (see `stored_format`).

    naming: native (DeepSeek names) | hf (transformers names; plain routed experts fused into gate_up_proj/down_proj).
    config: native (the reference's inference/config.json keys) | hf (the released config.json's key set).
    calib: NVFP4 activation amax per projection base (input_scale = amax / (6*448); 4.0 where absent).
    extra: stored tensors written as they are.
    The MTP blocks (`mtp_tensors`) are written when `state` holds them, under their native names in either naming
    (HF transformers keeps no MTP module, so its checkpoints carry them as `mtp.*`).
    """
    from safetensors.torch import save_file
    if fmt == "native-fp8":
        fmt = "release"
    if fmt not in WRITE_FORMATS:
        raise ValueError(f"write_checkpoint: fmt must be one of {', '.join(WRITE_FORMATS)}, found {fmt!r}")
    root.mkdir(parents=True, exist_ok=True)
    out: dict[str, torch.Tensor] = {}
    fused: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
    plain_dtype = torch.float32 if fmt == "fp32" else torch.bfloat16
    expected, mtp = expected_tensors(args), mtp_tensors(args)
    held = [n for n in mtp if n in state]
    if held and len(held) != len(mtp):
        missing = next(n for n in mtp if n not in state)
        raise ValueError(f"write_checkpoint: state holds {len(held)} of the {len(mtp)} MTP tensors; {missing!r} is missing")
    if held:
        expected.update(mtp)
    for name, (shape, kind) in expected.items():
        t = state[name]
        base = name[: -len(".weight")] if kind == "linear" else name
        sf = stored_format(fmt, base) if kind == "linear" else None
        if sf == "nvfp4":
            q = quantize_nvfp4_weight(t)
            amax = (calib or {}).get(base, 4.0)
            q["input_scale"] = torch.tensor(amax / (6.0 * 448.0), dtype=torch.float32)
            items = {f"{base}.{k}": v for k, v in q.items()}
        elif sf == "mxfp4":
            w, sc = quantize_mxfp4(t)
            if fmt == "release-fp4x2":
                w = w.view(torch.float4_e2m1fn_x2)
            items = {f"{base}.weight": w, f"{base}.scale": sc}
        elif sf == "fp8":
            w, sc = quantize_fp8_block(t)
            items = {f"{base}.weight": w, f"{base}.scale": sc}
        elif kind == "int":
            items = {name: t.long()}
        elif kind == "float" and stored_fp32(name):
            items = {name: t.float()}
        else:
            items = {name: t.to(plain_dtype)}
        for n, v in items.items():
            m = re.match(r"layers\.(\d+)\.ffn\.experts\.(\d+)\.(w[123])\.weight$", n)
            if naming == "hf" and sf == "plain" and m:
                fused.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = v
                continue
            out[native_to_hf(n) if naming == "hf" and not n.startswith("mtp.") else n] = v.contiguous()
    for L, experts in fused.items():
        E = len(experts)
        out[f"model.layers.{L}.mlp.experts.gate_up_proj"] = torch.stack([torch.cat([experts[e]["w1"], experts[e]["w3"]], 0) for e in range(E)])
        out[f"model.layers.{L}.mlp.experts.down_proj"] = torch.stack([experts[e]["w2"] for e in range(E)])
    out.update(extra or {})
    if config == "hf":
        from .config import hf_config
        cfg = hf_config(args, fmt)
    else:
        cfg = args.to_json()
        cfg.pop("max_seq_len")
        if fmt in ("release", "release-fp4x2", "modelopt"):
            cfg.update(dtype="fp8", scale_fmt="ue8m0", expert_dtype="fp4" if fmt != "modelopt" else None)
        if fmt in ("nvfp4", "modelopt"):
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


def random_state(args: ModelArgs, seed: int = 0, mtp: bool = True) -> dict[str, torch.Tensor]:
    """Deterministic synthetic weights with sane scales; tid2eid rows hold distinct experts. The MTP blocks
    (`mtp`) are drawn after the main model's tensors, so those are the same with or without them."""
    g = torch.Generator().manual_seed(seed)
    state = {}
    for name, (shape, kind) in {**expected_tensors(args), **(mtp_tensors(args) if mtp else {})}.items():
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
