"""Random-weight models built directly on a device, for GPU tests and benchmarks at real layer dimensions.

Writing and re-reading a checkpoint with 256 experts per layer would take minutes on the host; here every tensor is
allocated on the device and filled in place with the same scales `checkpoint.random_state` uses, then put into the
release formats: routed experts MXFP4, attention and shared-expert projections FP8 block-scaled (wo_a stays
dequantised, as the reference's converter leaves it), the other projections plain bf16, as the release stores them.
"""
from __future__ import annotations

import math

import torch

from .config import ModelArgs, flash
from .linear import set_qweight
from .model import Transformer
from .mtp import MTPBlock
from .quant import QWeight, quantize


def flash_args(n_layers: int = 3, max_seq_len: int = 4096) -> ModelArgs:
    """The real Flash layer dimensions (dim 4096, 64 heads of 512, 256 experts of 2048, top-6, indexer 64x128,
    top-512), a few layers: a hash layer, then CSA, HCA, CSA, ..."""
    pattern = [4, 128] * n_layers
    return ModelArgs(**{**flash().to_json(), "n_layers": n_layers, "compress_ratios": pattern[:n_layers] + [0],
                        "n_hash_layers": 1, "max_seq_len": max_seq_len}).validate()


@torch.no_grad()
def random_model(args: ModelArgs, device="cuda", dtype=torch.bfloat16, seed: int = 0, release: bool = True,
                 mtp: bool = False) -> Transformer:
    """`mtp`: with the config's MTP blocks (`model.mtp`), in the release formats too (FP8 e_proj/h_proj); off by
    default, as the plain decode benchmarks hold no draft (at Flash size the block is a layer's ~7 GB)."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = Transformer(args, dtype=dtype)
        if mtp:
            model.mtp.extend(MTPBlock(args, args.n_layers + i, dtype, 1) for i in range(args.n_mtp_layers))
    for block in model.mtp:
        block.attach(model)
    for name, p in list(model.named_parameters()) + list(model.named_buffers()):
        if name.endswith("tid2eid"):
            p.copy_(torch.rand(p.shape[0], args.n_routed_experts, device=p.device).argsort(-1)[:, : p.shape[1]])
        elif name.startswith("rope_") or name == "pos" or not p.is_floating_point() or p.dim() == 0 and "scale" not in name:
            continue
        elif name.endswith("norm.weight"):
            p.normal_(1.0, 0.1)
        elif name.endswith("scale"):
            p.uniform_(0.5, 1.0)
        elif name.endswith("base") or name.endswith("gate.bias") or name.endswith("attn_sink"):
            p.normal_(0.0, 0.1)
        elif name.endswith("ape"):
            p.normal_(0.0, 0.5)
        elif name == "embed.weight":
            p.normal_()
        elif p.dim() >= 2 and "state" not in name and "kv_window" not in name and "entries" not in name:
            p.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]))
    if release:
        for name, m in model.named_modules():
            for prefix in list(getattr(m, "fmts", {})):
                fmt = _release_format(name, prefix)
                if fmt == "mxfp4":                              # on the device: 256 experts per stack
                    set_qweight(m, prefix, quantize(getattr(m, f"{prefix}_weight"), "mxfp4"))
                elif fmt == "fp8":                              # small enough for the host quantiser
                    w = getattr(m, f"{prefix}_weight" if prefix else "weight")
                    set_qweight(m, prefix, quantize(w.float().cpu(), "fp8").to(w.device))
                elif not name.endswith("attn.wo_a") and getattr(m, "weight").dtype == torch.float32:
                    # the release stores the head, router, compressor and weights_proj in bf16, and the loader
                    # keeps them so under their fp32 products (dsv4_model.load): the same bytes here
                    set_qweight(m, prefix, QWeight("plain", m.weight.to(torch.bfloat16)))
    model.reset()
    return model


def _release_format(module: str, prefix: str) -> str:
    if module.endswith("ffn.experts"):
        return "mxfp4"
    if module.endswith(("attn.wq_a", "attn.wq_b", "attn.wkv", "attn.wo_b", "indexer.wq_b", "e_proj", "h_proj")) or ".shared_experts." in module:
        return "fp8"
    return "plain"


def flash_layers(device="cuda", n_layers: int = 3, max_seq_len: int = 4096) -> Transformer:
    return random_model(flash_args(n_layers, max_seq_len), device=device)
