"""DeepSeek-V4 decode: a readable reference model, its checkpoints and an embedded tiny default."""
from __future__ import annotations

from pathlib import Path

import torch

from .checkpoint import CheckpointError, module_key, read_state
from .config import ModelArgs, load_args
from .model import Transformer
from .precision import component_of, parse_overrides
from .quant import dequant_nvfp4_weight, quantize_nvfp4_weight
from .tiny import tiny

__all__ = ["CheckpointError", "ModelArgs", "Transformer", "load", "resolve_checkpoint", "tiny"]

DEFAULT_INPUT_AMAX = 4.0   # activation amax assumed where a checkpoint carries no NVFP4 input_scale


def resolve_checkpoint(path: str | Path) -> Path:
    if str(path) == "tiny":
        return tiny()
    p = Path(path)
    if not p.is_dir():
        raise CheckpointError(f"{p}: checkpoint directory not found (expected config.json + *.safetensors, or 'tiny')")
    return p


def _snap_nvfp4(w: torch.Tensor) -> torch.Tensor:
    q = quantize_nvfp4_weight(w)
    return dequant_nvfp4_weight(q["weight"], q["weight_scale"], q["weight_scale_2"])


def load(path: str | Path = "tiny", device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
         precision: dict[str, str] | list[str] | None = None, max_seq_len: int | None = None, batch: int = 1) -> Transformer:
    """Validate and load a checkpoint into a Transformer; the precision policy is applied here.

    fp4 components keep weights on the NVFP4 grid (snapped, if the checkpoint was not NVFP4) and get an
    input_scale for the W4A4 activation simulation.
    """
    if isinstance(precision, list):
        precision = parse_overrides(precision)
    root = resolve_checkpoint(path)
    args = load_args(root / "config.json", max_seq_len)
    state, input_scales = read_state(root, args)
    model = Transformer(args, precision, dtype, batch)
    sd: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if name.endswith(".weight") and name[: -len(".weight")] in input_scales or _is_linear(model, name):
            base = name[: -len(".weight")]
            fmt = model.policy[component_of(base)]
            if fmt == "fp4" and base not in input_scales:
                t = _snap_nvfp4(t)
            if fmt == "fp4":
                amax_scale = torch.tensor(DEFAULT_INPUT_AMAX / (6.0 * 448.0))
                sd[module_key(base) + ".input_scale"] = input_scales.get(base, amax_scale).float().reshape(())
        sd[module_key(name)] = t
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not k.endswith("input_scale")]
    if missing or unexpected:
        raise CheckpointError(f"{root}: model keys not covered by the checkpoint: {(missing or unexpected)[:3]}")
    return model.to(device)


def _is_linear(model: Transformer, name: str) -> bool:
    if not name.endswith(".weight"):
        return False
    try:
        sub = model.get_submodule(module_key(name[: -len(".weight")]))
    except AttributeError:
        return False
    return sub.__class__.__name__ == "Linear"
