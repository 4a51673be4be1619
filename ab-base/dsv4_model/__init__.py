"""DeepSeek-V4 decode: a readable reference model, its checkpoints and an embedded tiny default."""
from __future__ import annotations

import logging
from pathlib import Path

import torch

from .checkpoint import CheckpointError, Plan, module_key
from .config import ModelArgs, load_args
from .linear import set_qweight
from .model import Transformer
from .mtp import MTPBlock
from .precision import component_of, parse_overrides, resolve
from .quant import QWeight, act_sim, dequant, quantize
from .tiny import tiny

__all__ = ["CheckpointError", "ModelArgs", "QWeight", "Transformer", "act_sim", "dequant", "load",
           "resolve_checkpoint", "tiny"]

log = logging.getLogger("dsv4_model")


def resolve_checkpoint(path: str | Path) -> Path:
    if str(path) == "tiny":
        return tiny()
    p = Path(path)
    if not p.is_dir():
        raise CheckpointError(f"{p}: checkpoint directory not found (expected config.json + *.safetensors, or 'tiny')")
    return p


def _device(device: str | torch.device) -> torch.device:
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"device {device!r}: {e}") from None
    if dev.type not in ("cpu", "cuda"):     # meta holds no data; xpu/mps/hpu raised deep in torch with a traceback
        raise ValueError(f"device {device!r}: expected cpu or cuda[:N], found a {dev.type} device")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: no CUDA device is available on this machine")
    return dev


def _convert(qw: QWeight, target: str, dtype: torch.dtype) -> QWeight:
    """Apply a precision-policy target to a stored weight (once, at load)."""
    if target == "stored" or target == qw.fmt:
        return qw
    if target in ("plain", "bf16"):
        want = torch.bfloat16 if target == "bf16" else (qw.data.dtype if qw.fmt == "plain" else dtype)
        return QWeight("plain", dequant(qw, dtype=want))
    return quantize(dequant(qw), target, qw.input_scale if qw.fmt == "nvfp4" else None)


def _read_as_stored(stored: torch.dtype, compute: torch.dtype) -> bool:
    """A plain weight stored bf16 under an fp32 product (the head, router and compressor projections the reference
    declares fp32) stays bf16: exact in fp32, so every product widens it to the same values, and a decode step
    reads 2 bytes a weight, not the 4 of an fp32 copy (the head alone: 1.06 GB less per step at Flash size)."""
    return stored == torch.bfloat16 and compute == torch.float32


def load(path: str | Path = "tiny", device: str | torch.device = "cpu", dtype: torch.dtype = torch.bfloat16,
         precision: dict[str, str] | list[str] | str | None = None, max_seq_len: int | None = None,
         batch: int = 1, mtp: bool = True) -> Transformer:
    """Validate a checkpoint (from its headers, before any data is read) and load it into a Transformer.

    Weights stay in the format the checkpoint stores (QWeight) and move to `device` one at a time; the modules
    are built on the meta device first, so nothing is allocated twice. A plain (unquantised) weight is held in the
    dtype its module computes in, cast once here, unless it is bf16 under an fp32 product (the head, router and
    compressor projections the reference declares fp32): that one stays as stored, and the product widens it.
    `precision`: a policy name and/or COMPONENT=FORMAT overrides (see precision.py); the default computes every
    projection as stored. `dtype`: the activation dtype, bf16 by default as the official release computes (float32
    is a debugging deviation). `mtp`: build the checkpoint's MTP blocks (`model.mtp`, see mtp.py) when it holds
    them; False ignores them (one warning).
    """
    dev = _device(device)
    if isinstance(precision, str):
        precision = [precision]
    policy = parse_overrides(precision) if isinstance(precision, list) or precision is None else resolve(precision)
    root = resolve_checkpoint(path)
    args = load_args(root / "config.json", max_seq_len)
    plan = Plan(root, args, mtp)
    if plan.mtp and not plan.with_mtp:
        why = "mtp=False" if not mtp else "the config sets num_nextn_predict_layers = 0"
        log.warning("%s: ignoring %d mtp.* tensor(s) (%s)", root, len(plan.mtp), why)
    with torch.device("meta"):
        model = Transformer(args, dtype, batch)
        if plan.with_mtp:
            model.mtp.extend(MTPBlock(args, args.n_layers + i, dtype, batch) for i in range(args.n_mtp_layers))
    for block in model.mtp:
        block.attach(model)
    model.init_state(dev)
    model.policy = policy
    for name, val in plan.tensors(dev):
        if isinstance(val, QWeight):
            if name.endswith(".wo_a"):        # the reference dequantises wo_a (convert.py) and runs it in bf16/fp32
                val = _convert(val, "plain", dtype)
            val = _convert(val, policy[component_of(name)], dtype).to(dev)
            if ".ffn.experts." in name:
                mod, prefix = model.get_submodule(name.rsplit(".", 1)[0]), name.rsplit(".", 1)[1]
            else:
                mod, prefix = model.get_submodule(module_key(name)), ""
                want = getattr(mod, "dtype", val.data.dtype)
                if val.fmt == "plain" and val.data.dtype != want and not _read_as_stored(val.data.dtype, want):
                    # the dtype the module computes in (bf16 under fp32 excepted): cast once here, the values the
                    # per-step cast gave, not a copy every step
                    val = QWeight("plain", val.data.to(want))
            set_qweight(mod, prefix, val)
            continue
        key = module_key(name)
        owner, _, attr = key.rpartition(".")
        mod = model.get_submodule(owner) if owner else model
        old = getattr(mod, attr)
        t = val.to(device=dev, dtype=old.dtype)
        if attr in mod._parameters:
            mod._parameters[attr] = torch.nn.Parameter(t, requires_grad=False)
        else:
            mod._buffers[attr] = t
    left = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.is_meta]
    if left:
        raise CheckpointError(f"{root}: model tensors not covered by the checkpoint: {left[:3]}")
    return model
