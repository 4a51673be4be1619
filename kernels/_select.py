"""Kernel or reference, decided once: `select(name, device, force_reference=False)` at model load.

Every kernel here can run where the device is CUDA and Triton imports (the FP4/FP8 GEMVs prefer their CUDA C++
build, `moe_gemv/cuda_kernel.py`, and fall back to Triton when it does not build). CPU always gets the PyTorch
reference. No environment variable and no per-step choice: the caller holds the returned function.

What there is to select is discovered, not listed: every subpackage of dsv4_kernels declares its `KERNEL` record
(`_record.py`), the way every rule module of graphcheck declares its `RULE`.
"""
from __future__ import annotations

import importlib
import os
import pkgutil
from typing import Callable

import torch

from ._record import Kernel, Op

# The packages not yet moved to the record form: name -> (package, kernel function, reference function), and the
# ones whose Triton code converts e4m3 (compute capability 8.9). Defined before the discovery below imports them:
# they import `available` from here.
_LEGACY = {
    "routed_experts": ("moe_gemv", "routed_experts", "routed_experts_ref"),
    "fp4_gemv": ("moe_gemv", "fp4_gemv", "fp4_gemv_ref"),
    "fused_swiglu": ("fused_swiglu", "fused_swiglu", "fused_swiglu_ref"),
    "compressor_reduce": ("compressor_reduce", "compressor_reduce_kernel", "compressor_reduce_ref"),
    "nvfp4_kvcache": ("nvfp4_kvcache", "dequantize_nvfp4_kvcache_kernel", "dequantize_nvfp4_kvcache_ref"),
    "fp8_fake_quant": ("act_quant", "fp8_fake_quant", "fp8_fake_quant_ref"),
    "fp4_fake_quant": ("act_quant", "fp4_fake_quant", "fp4_fake_quant_ref"),
    "rms_norm": ("rms_norm", "rms_norm", "rms_norm_ref"),
    "rope_tail": ("rope", "rope_tail", "rope_tail_ref"),
    "mhc_pre": ("mhc", "mhc_pre", "mhc_pre_ref"),
    "mhc_post": ("mhc", "mhc_post", "mhc_post_ref"),
    "mhc_head": ("mhc", "mhc_head", "mhc_head_ref"),
    "penalize_scale": ("sampling", "penalize_scale", "penalize_scale_ref"),
    "sample_pick": ("sampling", "sample_pick", "sample_pick_ref"),
    "decode_attention": ("attention", "decode_attention", "attention_ref"),
    "index_scores": ("indexer", "index_scores", "index_scores_ref"),
    "topk_blocks": ("indexer", "topk_blocks", "topk_blocks_ref"),
}
_LEGACY_E4M3 = frozenset({"routed_experts", "fp4_gemv", "nvfp4_kvcache", "fp8_fake_quant", "fp4_fake_quant"})
# op -> (capture targets, GPU parity tests, decode slot), as the records write them
_LEGACY_WIRING = {
    "routed_experts": (("routed_experts",), ("test_routed_experts_parity",), None),
    "fp4_gemv": (("fp4_gemv",), ("test_fp4_gemv_parity",), None),
    "fused_swiglu": (("fused_swiglu",), ("test_fused_swiglu_parity",), None),
    "compressor_reduce": (("compressor_reduce_csa", "compressor_reduce_hca"), ("test_compressor_reduce_parity",),
                          ("reduce", "compressor pooling")),
    "nvfp4_kvcache": (("nvfp4_kvcache",), ("test_kvcache_parity",), None),
    "fp8_fake_quant": (("fp8_fake_quant",), ("test_fake_quant_parity_bit_exact",), ("fp8", "FP8 fake quant")),
    "fp4_fake_quant": (("fp4_fake_quant",), ("test_fake_quant_parity_bit_exact",), ("fp4", "FP4 fake quant")),
    "rms_norm": (("rms_norm",), ("test_rms_norm_parity",), ("rms", "RMSNorm")),
    "rope_tail": (("rope_tail",), ("test_rope_tail_parity",), ("rope", "RoPE")),
    "mhc_pre": (("mhc_pre",), ("test_mhc_pre_and_head_parity",), ("mhc_pre", "mHC pre")),
    "mhc_post": (("mhc_post",), ("test_mhc_post_parity",), ("mhc_post", "mHC post")),
    "mhc_head": (("mhc_head",), ("test_mhc_pre_and_head_parity",), ("mhc_head", "mHC head")),
    "penalize_scale": (("penalize_scale",), ("test_penalize_scale_parity",), None),
    "sample_pick": (("sample_pick",), ("test_sample_pick_parity",), None),
    "decode_attention": (("decode_attention",), ("test_decode_attention_parity",), ("attend", "attention core")),
    "index_scores": (("index_scores",), ("test_index_scores_parity",), ("score", "indexer scores")),
    "topk_blocks": (("topk_blocks",), ("test_topk_blocks_parity",), ("select", "indexer top-k")),
}


def min_capability(name: str) -> tuple[int, int]:
    return _record(name, "dsv4_kernels.min_capability").capability


def available(name: str) -> tuple[bool, str]:
    """(usable, reason) for the kernel `name` on this machine's CUDA device. Cached: decided once per process."""
    return _record(name, "dsv4_kernels").available()


def _record(name: str, who: str) -> Kernel:
    if name not in KERNELS:
        raise KeyError(f"{who}: no kernel named {name!r}; known: {', '.join(KERNELS)}")
    return PACKAGES[PACKAGE_OF[name]]


def _discover() -> dict[str, Kernel]:
    """package name -> its record, in name order. A package without a record, or an op name two packages claim,
    is an import error naming it: the alternative is a kernel the decode silently never uses."""
    out: dict[str, Kernel] = {}
    legacy_pkgs = {pkg for pkg, _, _ in _LEGACY.values()}
    for info in sorted(pkgutil.iter_modules([os.path.dirname(__file__)]), key=lambda m: m.name):
        if not info.ispkg:
            continue
        mod = importlib.import_module(f"{__package__}.{info.name}")
        rec = getattr(mod, "KERNEL", None)
        if rec is None and info.name in legacy_pkgs:
            ops = []
            for name, (pkg, kern, ref) in _LEGACY.items():
                if pkg == info.name:
                    tg, par, dec = _LEGACY_WIRING[name]
                    ops.append(Op(name, getattr(mod, kern), getattr(mod, ref), targets=tg, parity=par, decode=dec))
            rec = Kernel(tuple(ops), capability=(8, 9) if {o.name for o in ops} & _LEGACY_E4M3 else (8, 0))
        if not isinstance(rec, Kernel):
            raise ImportError(f"dsv4_kernels.{info.name}: a kernel package must declare `KERNEL = Kernel(...)` in its "
                              f"__init__.py (dsv4_kernels/_record.py), found {type(rec).__name__}")
        out[info.name] = rec
    return out


KERNELS: dict[str, Op] = {}             # op name -> op (filled below, in package order)
PACKAGE_OF: dict[str, str] = {}         # op name -> its package
PACKAGES: dict[str, Kernel] = _discover()
for _pkg, _rec in PACKAGES.items():
    for _op in _rec.ops:
        if _op.name in KERNELS:
            raise ImportError(f"kernel op {_op.name!r} is declared by two packages ({PACKAGE_OF[_op.name]}, {_pkg})")
        KERNELS[_op.name], PACKAGE_OF[_op.name] = _op, _pkg


def select(name: str, device: torch.device | str, force_reference: bool = False) -> Callable:
    """The function to call for `name` on `device`: the kernel on CUDA, the reference on CPU or when forced.
    Asking for the kernel on a CUDA device where it cannot run is an error that says why (not a silent fallback)."""
    rec = _record(name, "dsv4_kernels.select")
    op = KERNELS[name]
    if force_reference or torch.device(device).type != "cuda":
        return op.reference
    ok, reason = rec.available()
    if not ok:
        raise RuntimeError(f"dsv4_kernels.select({name!r}, {device!s}): the kernel cannot run: {reason} "
                           "(pass force_reference=True for the PyTorch reference)")
    return op.kernel
