"""Kernel or reference, decided once: `select(name, device, force_reference=False)` at model load.

Every kernel here can run where the device is CUDA and Triton imports (the FP4/FP8 GEMVs prefer their CUDA C++
build, `moe_gemv/cuda_kernel.py`, and fall back to Triton when it does not build). CPU always gets the PyTorch
reference. No environment variable and no per-step choice: the caller holds the returned function.
"""
from __future__ import annotations

import functools
import importlib
from typing import Callable

import torch

# name -> (module, kernel function, reference function)
KERNELS = {
    "routed_experts": ("moe_gemv", "routed_experts", "routed_experts_ref"),
    "fp4_gemv": ("moe_gemv", "fp4_gemv", "fp4_gemv_ref"),
    "fused_swiglu": ("fused_swiglu", "fused_swiglu", "fused_swiglu_ref"),
    "compressor_reduce": ("compressor_reduce", "compressor_reduce_kernel", "compressor_reduce_ref"),
    "nvfp4_kvcache": ("nvfp4_kvcache", "dequantize_nvfp4_kvcache_kernel", "dequantize_nvfp4_kvcache_ref"),
    "sinkhorn": ("sinkhorn", "sinkhorn", "sinkhorn_ref"),
    "fp8_fake_quant": ("act_quant", "fp8_fake_quant", "fp8_fake_quant_ref"),
    "fp4_fake_quant": ("act_quant", "fp4_fake_quant", "fp4_fake_quant_ref"),
    "rms_norm": ("rms_norm", "rms_norm", "rms_norm_ref"),
    "rope_tail": ("rope", "rope_tail", "rope_tail_ref"),
    "mhc_pre": ("mhc", "mhc_pre", "mhc_pre_ref"),
    "mhc_post": ("mhc", "mhc_post", "mhc_post_ref"),
    "mhc_head": ("mhc", "mhc_head", "mhc_head_ref"),
    "mhc_pre_norm": ("mhc", "mhc_pre_norm", "mhc_pre_norm_ref"),
    "penalize_scale": ("sampling", "penalize_scale", "penalize_scale_ref"),
    "sample_pick": ("sampling", "sample_pick", "sample_pick_ref"),
    "decode_attention": ("attention", "decode_attention", "attention_ref"),
    "index_scores": ("indexer", "index_scores", "index_scores_ref"),
    "topk_blocks": ("indexer", "topk_blocks", "topk_blocks_ref"),
    "gather_picks": ("indexer", "gather_picks", "gather_picks_ref"),
    "bf16_linear": ("bf16_gemv", "bf16_linear", "bf16_linear_ref"),
}
# The kernels that also have a CuTeDSL implementation (`<package>/cutedsl_kernel.py`, class `CompiledKernels`:
# built for the model's shapes and compiled for every bucket at load, see `compiled`), and those of them the decode
# takes in CuTeDSL by default: none until the A/B on the H200 (benchmarks/cutedsl.py) shows one faster than the
# kernel above. Flip one by adding its name here, or per call with `compiled(..., backend="cutedsl")`.
CUTEDSL = {"routed_experts": "moe_gemv", "gather_picks": "indexer"}
CUTEDSL_BY_DEFAULT: frozenset[str] = frozenset()
# The kernels whose Triton code converts to or from e4m3 (`tl.float8e4nv`: FP8 activations, NVFP4 and FP8 scales)
# need compute capability 8.9 (Ada, Hopper); the others run from 8.0 (Ampere: bf16), so an A100 gets them too.
E4M3 = frozenset({"routed_experts", "fp4_gemv", "nvfp4_kvcache", "fp8_fake_quant", "fp4_fake_quant"})


def min_capability(name: str) -> tuple[int, int]:
    return (8, 9) if name in E4M3 else (8, 0)


@functools.lru_cache(maxsize=None)
def available(name: str) -> tuple[bool, str]:
    """(usable, reason) for the kernel `name` on this machine's CUDA device. Cached: decided once per process."""
    if name not in KERNELS:
        raise KeyError(f"dsv4_kernels: no kernel named {name!r}; known: {', '.join(KERNELS)}")
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    try:
        import triton  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means no Triton
        return False, f"triton not importable ({e.__class__.__name__}: {e})"
    need, cap = min_capability(name), torch.cuda.get_device_capability()
    if cap < need:
        why = "e4m3 conversions" if name in E4M3 else "bf16"
        return False, f"compute capability {cap[0]}.{cap[1]} < {need[0]}.{need[1]} ({why})"
    return True, "ok"


def compiled(name: str, device: torch.device | str, shape: tuple = (), prepare: dict | None = None,
             backend: str | None = None) -> Callable:
    """`select(name, device)`, or for backend "cutedsl" (default: whether `name` is in CUTEDSL_BY_DEFAULT) the
    CuTeDSL kernel `CompiledKernels(*shape).prepare(**prepare)`, compiled here for every bucket so that no step
    compiles. Asking for CuTeDSL where it cannot run is an error that says why."""
    backend = backend or ("cutedsl" if name in CUTEDSL_BY_DEFAULT else "default")
    if backend == "default":
        return select(name, device)
    if backend != "cutedsl":
        raise ValueError(f"dsv4_kernels.compiled({name!r}): backend must be 'default' or 'cutedsl', found {backend!r}")
    if name not in CUTEDSL:
        raise KeyError(f"dsv4_kernels.compiled: {name!r} has no CuTeDSL kernel; those that do: {', '.join(CUTEDSL)}")
    from ._cutedsl import available as cutedsl_available
    ok, reason = cutedsl_available() if torch.device(device).type == "cuda" else (False, f"device {device!s} is not CUDA")
    if not ok:
        raise RuntimeError(f"dsv4_kernels.compiled({name!r}, {device!s}, backend='cutedsl'): cannot run: {reason}")
    mod = importlib.import_module(f"{__package__}.{CUTEDSL[name]}.cutedsl_kernel")
    return mod.CompiledKernels(*shape).prepare(**(prepare or {}))


def select(name: str, device: torch.device | str, force_reference: bool = False) -> Callable:
    """The function to call for `name` on `device`: the kernel on CUDA, the reference on CPU or when forced.
    Asking for the kernel on a CUDA device where it cannot run is an error that says why (not a silent fallback)."""
    module, kern, ref = KERNELS.get(name) or (None, None, None)
    if module is None:
        raise KeyError(f"dsv4_kernels.select: no kernel named {name!r}; known: {', '.join(KERNELS)}")
    mod = importlib.import_module(f"{__package__}.{module}")
    if force_reference or torch.device(device).type != "cuda":
        return getattr(mod, ref)
    ok, reason = available(name)
    if not ok:
        raise RuntimeError(f"dsv4_kernels.select({name!r}, {device!s}): the kernel cannot run: {reason} "
                           "(pass force_reference=True for the PyTorch reference)")
    return getattr(mod, kern)
