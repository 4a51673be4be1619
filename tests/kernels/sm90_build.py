"""Build every Triton kernel of `dsv4_kernels` for the H200 (sm_90) on a machine without a GPU.

    python tests/kernels/sm90_build.py        # prints one line per specialisation, then "BUILT n FAILED [...]"
    python tests/kernels/sm90_build.py --arch 80   # the A100 (sm_80): the kernels `available` allows there (no e4m3)
    python tests/kernels/sm90_build.py --pdl       # with programmatic dependent launch (`dsv4_kernels._pdl.PDL`)

The interpreter tests check a kernel's logic on CPU but never compile it: a kernel that reads a plain module global,
a libdevice call or an inline-asm constraint that does not lower, a dtype the sm_90 backend rejects, or a block that
needs more shared memory than a Hopper SM has, all pass there and fail on the first GPU run. Here Triton's real
pipeline (TTIR -> TTGIR -> LLVM -> PTX -> ptxas cubin) runs for compute capability 9.0 behind a stand-in driver that
loads and launches nothing, and the kernels are called through their Python entry points with the dtypes and
shapes the decode uses (the tiny preset's and Flash's): one row and eight (Triton specialises an integer argument
equal to 1, and the expert kernels' pair count), both dtypes, the routed experts with and without the activation
simulation. Outputs are never read: nothing runs. Distinct builds are counted by their hash.

Each build's register, stack and shared-memory use comes from its cubin (`cuobjdump -res-usage`): a build that
spills (over 256 B of stack per thread) fails unless KNOWN_SPILLS names it with the reason it is tolerated.

Requires triton (the wheel ships ptxas and cuobjdump); the tensors stay on the CPU and claim to be CUDA tensors only for the
entry points that pick a code path by device (act_quant's libdevice path).
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import re
import subprocess
import sys
import traceback

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from triton.runtime.jit import JITFunction

H200_SHARED = 232448                                      # bytes of shared memory per block an H200 allows (opt-in)
# Builds known to spill (label prefix -> why it is tolerated). Any other build with more than 256 B of stack per
# thread fails the check: a spill is local-memory traffic on every iteration.
KNOWN_SPILLS = {
    "routed_experts float32": "the Triton experts kernel in fp32 (about 9 KB of stack per thread): only the fallback "
                              "where the CUDA C++ build is missing, and only for fp32 models",
}


A100_SHARED = 166912                                      # the same for an A100 (sm_80)


class _Utils:
    def __init__(self, arch: int):
        self.props = {"max_shared_mem": H200_SHARED if arch >= 90 else A100_SHARED,
                      "multiprocessor_count": 132 if arch >= 90 else 108, "max_num_regs": 65536, "warpSize": 32}

    def load_binary(self, name, kernel, shared, device):
        return None, None, 0, 0, 1024                     # module, function, regs, spills, max threads

    def get_device_properties(self, device):
        return self.props


class BuildOnlyDriver:
    """Triton's driver interface as far as compile-and-launch needs it: the target is sm_<arch>, launches do
    nothing, and each built kernel is recorded (name, metadata)."""

    def __init__(self, arch: int = 90):
        self.arch, self.utils, self.built, self.labels, self.files = arch, _Utils(arch), [], {}, {}
        self.shared = self.utils.props["max_shared_mem"]

    def is_active(self):
        return True

    def get_current_target(self):
        return GPUTarget("cuda", self.arch, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        return torch.device("cpu")

    def launcher_cls(self, src, metadata):
        # called on each launch of a kernel whose handles are not loaded (never, here): keep one entry per build
        if all(metadata.hash != m.hash for _, m in self.built):
            self.built.append((getattr(src, "name", str(src)), metadata))
        return lambda *args, **kwargs: None


class _Cuda(torch.Tensor):
    """A CPU tensor whose `is_cuda` is True: entry points that pick the libdevice path by device take it."""

    @property
    def is_cuda(self):
        return True


def _t(*shape, dtype=torch.bfloat16, g):
    return (torch.randn(*shape, generator=g)).to(dtype).as_subclass(_Cuda)


def with_constants(settings: dict, thunk):
    """`thunk` run with module constants set ({module: {name: value}}), restored after."""
    def run():
        saved = {m: {k: getattr(m, k) for k in kv} for m, kv in settings.items()}
        for m, kv in settings.items():
            for k, v in kv.items():
                setattr(m, k, v)
        try:
            return thunk()
        finally:
            for m, kv in saved.items():
                for k, v in kv.items():
                    setattr(m, k, v)
    return run


def cases(g: torch.Generator, arch: int = 90):
    """(label, thunk) for every entry point at the decode's dtypes and shapes."""
    from dsv4_kernels.act_quant.triton_kernel import fp4_fake_quant_triton, fp8_fake_quant_triton
    from dsv4_kernels.attention import triton_kernel as atk
    from dsv4_kernels.attention.triton_kernel import attention_ring_triton, attention_triton
    from dsv4_kernels.bf16_gemv.triton_kernel import bf16_linear_triton
    from dsv4_kernels.compressor_pool.triton_kernel import compressor_pool_triton
    from dsv4_kernels.compressor_reduce.triton_kernel import compressor_reduce_triton
    from dsv4_kernels.compressor_ring.triton_kernel import close_block_triton, ring_write_triton
    from dsv4_kernels.fused_swiglu.triton_kernel import fused_swiglu_triton
    from dsv4_kernels.hadamard_fp4.triton_kernel import hadamard_fp4_triton
    from dsv4_kernels.head_norm_rope.triton_kernel import head_norm_rope_triton
    from dsv4_kernels.indexer.triton_kernel import index_scores_triton, topk_blocks_triton
    from dsv4_kernels.mhc.triton_kernel import mhc_head_triton, mhc_post_triton, mhc_pre_norm_triton, mhc_pre_triton
    from dsv4_kernels.moe_gemv import triton_kernel as moe
    from dsv4_kernels.moe_gemv.reference import random_weight
    from dsv4_kernels.moe_route.triton_kernel import moe_route_triton
    from dsv4_kernels.norm_rope_fp8.triton_kernel import fp8_nope_triton, norm_rope_fp8_triton
    from dsv4_kernels.nvfp4_kvcache.triton_kernel import dequantize_nvfp4_kvcache_triton
    from dsv4_kernels.rms_norm.triton_kernel import rms_norm_triton
    from dsv4_kernels.rope.triton_kernel import rope_tail_triton
    from dsv4_kernels.sampling.triton_kernel import chunk_picks, penalize_chunks
    from dsv4_kernels.sinkhorn.triton_kernel import sinkhorn_triton
    from dsv4_kernels.swiglu_fp8.triton_kernel import swiglu_fp8_triton

    out = []
    for dt in (torch.bfloat16, torch.float32):
        n = str(dt).split(".")[-1]
        for K, block in ((4096, 128), (512, 64), (448, 64)):
            for R in (1, 8):
                out.append((f"fp8_fake_quant {n} {R}x{K}/{block}",
                            lambda K=K, b=block, dt=dt, R=R: fp8_fake_quant_triton(_t(R, K, dtype=dt, g=g), b)))
        for R in (1, 8):
            out.append((f"fp4_fake_quant {n} R={R}", lambda dt=dt, R=R: fp4_fake_quant_triton(_t(R, 1, 128, dtype=dt, g=g), 32)))
        for shape, weighted in (((8, 4096), True), ((1, 4096), True), ((8, 1, 512), False), ((1, 1, 512), False),
                                ((8, 1, 1024), True)):
            w = _t(shape[-1], dtype=dt, g=g) if weighted else None
            out.append((f"rms_norm {n} {shape}", lambda s=shape, w=w, dt=dt: rms_norm_triton(_t(*s, dtype=dt, g=g), w, 1e-6)))
        for shape, lead in (((8, 1, 64, 512), (8, 1, 1)), ((1, 1, 64, 512), (1, 1, 1)), ((8, 1, 512), (8, 1)),
                            ((1, 1, 512), (1, 1)), ((8, 512), (8,)), ((1, 512), (1,)), ((1, 1, 2, 128), (1, 1, 1))):
            for inv in (False, True):
                out.append((f"rope_tail {n} {shape} inverse={inv}",
                            lambda s=shape, ld=lead, inv=inv, dt=dt: rope_tail_triton(
                                _t(*s, dtype=dt, g=g), _t(*ld, 32, 2, dtype=torch.float32, g=g), 64, inv)))
        for shape, lead in (((8, 1, 64, 512), (8, 1, 1)), ((1, 1, 64, 512), (1, 1, 1)), ((1, 1, 2, 128), (1, 1, 1))):
            out.append((f"head_norm_rope {n} {shape}", lambda s=shape, ld=lead, dt=dt: head_norm_rope_triton(
                _t(*s, dtype=dt, g=g), _t(*ld, 32, 2, dtype=torch.float32, g=g), 1e-6, 64)))
        for shape, lead, block, into in (((8, 1, 512), (8, 1), 64, None), ((1, 1, 512), (1, 1), 64, None),
                                         ((8, 512), (8,), 0, torch.bfloat16), ((8, 1, 128), (8, 1), 64, None)):
            # the kv path (FP8 sim of the unrotated dims), an entry (the pooled fp32 c cast in the launch)
            out.append((f"norm_rope_fp8 {n} {shape} block={block}", lambda s=shape, ld=lead, b=block, o=into, dt=dt:
                        norm_rope_fp8_triton(_t(*s, dtype=dt if o is None else torch.float32, g=g),
                                             _t(s[-1], dtype=torch.float32, g=g), 1e-6,
                                             _t(*ld, 32, 2, dtype=torch.float32, g=g), 64, o, b)))
        for shape in ((8, 1, 512), (1, 1, 512)):
            out.append((f"fp8_nope {n} {shape}", lambda s=shape, dt=dt: fp8_nope_triton(_t(*s, dtype=dt, g=g), 64, 64)))
        for B, hc, d in ((1, 4, 4096), (8, 4, 4096), (8, 4, 128)):
            X, W = _t(B, 1, hc, d, dtype=dt, g=g), (2 + hc) * hc
            mix, sc, base = _t(B, 1, W, dtype=torch.float32, g=g), _t(3, dtype=torch.float32, g=g), _t(W, dtype=torch.float32, g=g)
            out.append((f"mhc_pre {n} B={B} d={d}", lambda X=X, m=mix, s=sc, b=base: mhc_pre_triton(X, m, s, b, 1e-6, 1e-6)))
            out.append((f"mhc_head {n} B={B} d={d}",
                        lambda X=X, m=mix, s=sc, b=base, hc=hc: mhc_head_triton(X, m[..., :hc], s[:1], b[:hc], 1e-6, 1e-6)))
            post, comb = _t(B, 1, hc, dtype=torch.float32, g=g), _t(B, 1, hc, hc, dtype=torch.float32, g=g)
            out.append((f"mhc_post {n} B={B} d={d}",
                        lambda X=X, p=post, c=comb, B=B, d=d, dt=dt: mhc_post_triton(_t(B, 1, d, dtype=dt, g=g), X, p, c)))
        for R in (1, 8, 32):                                   # Flash's shared expert (2048 wide), with and without the clamp
            for limit in (None, 10.0):
                out.append((f"swiglu_fp8 {n} R={R} limit={limit}", lambda R=R, lim=limit, dt=dt: swiglu_fp8_triton(
                    _t(R, 1, 2048, dtype=dt, g=g), _t(R, 1, 2048, dtype=dt, g=g), lim, 128)))
        for shape in ((1, 1, 64, 128), (8, 1, 64, 128), (32, 1, 64, 128), (8, 128), (1, 128), (4, 1, 2, 64)):
            # Flash's indexer q and entry at 1 to 32 rows, the tiny preset's
            out.append((f"hadamard_fp4 {n} {shape}", lambda s=shape, dt=dt: hadamard_fp4_triton(_t(*s, dtype=dt, g=g), 32)))
        out.append((f"fused_swiglu {n}", lambda dt=dt: (fused_swiglu_triton(_t(48, 4096, dtype=dt, g=g), 10.0, "split"),
                                                         fused_swiglu_triton(_t(48, 4096, dtype=dt, g=g), None, "interleaved"))))
        for fmt in ("mxfp4", "nvfp4"):
            w = tuple(p.as_subclass(_Cuda) if isinstance(p, torch.Tensor) else p for p in random_weight(fmt, 256, 512, generator=g))
            for cfg in (moe.CONFIG["gemv"][:4] + (decode,) for decode in (0, 1, 2)):   # bf16 dot, fp16 dot, e2m1 asm
                for B in (1, 2, 4, 8):
                    out.append((f"fp4_gemv {n} {fmt} B={B} cfg={cfg}",
                                lambda w=w, c=cfg, dt=dt, B=B: moe.fp4_gemv_triton(_t(B, 512, dtype=dt, g=g), w, cfg=c)))
            E, dim, inter = 8, 512, 256
            ws = [tuple(p.as_subclass(_Cuda) if isinstance(p, torch.Tensor) else p for p in random_weight(fmt, a, b, E, g))
                  for a, b in ((inter, dim), (inter, dim), (dim, inter))]
            for T in (1, 4, 8):
                idx = torch.randint(0, E, (T, 6), generator=g).as_subclass(_Cuda)
                wts = torch.rand(T, 6, generator=g).as_subclass(_Cuda)
                for sim in (None, lambda h, fmt, scale: h):       # the decode runs the format's activation simulation
                    out.append((f"routed_experts {n} {fmt} T={T} act_sim={sim is not None}",
                                lambda ws=ws, idx=idx, wts=wts, dt=dt, T=T, sim=sim: moe.routed_experts_triton(
                                    _t(T, dim, dtype=dt, g=g), idx, wts, *ws, 10.0, act_sim=sim)))
    for dt in (torch.bfloat16, torch.float32):
        n = str(dt).split(".")[-1]
        # Flash (64 heads of 512; CSA: window 128 + top-512, HCA: + 32), the tiny preset (2 of 128), no mask
        # and an HCA layer at about a million tokens (the most splits, all merged at once)
        for B, H, D, N, masked in ((1, 64, 512, 640, True), (8, 64, 512, 640, True), (8, 64, 512, 160, True),
                                   (1, 64, 512, 8320, True),
                                   (1, 2, 128, 24, True), (4, 2, 128, 24, False)):
            out.append((f"decode_attention {n} B={B} H={H} D={D} N={N} mask={masked}",
                        lambda B=B, H=H, D=D, N=N, m=masked, dt=dt: attention_triton(
                            _t(B, 1, H, D, dtype=dt, g=g), _t(B, 1, N, D, dtype=dt, g=g),
                            torch.ones(B, 1, N, dtype=torch.bool).as_subclass(_Cuda) if m else None,
                            _t(H, dtype=torch.float32, g=g), D ** -0.5)))
        if dt == torch.bfloat16:
            # the official core in the launch shape that is not the default (one launch or two: PV_COLS), built
            # here all the same; as one list and on the ring (a whole number of 64-key steps, and not)
            other = 0 if atk.PV_COLS else 64
            shapes = [(1, 128, 512), (8, 128, 32), (2, 20, 100)]
            if other == 0 and arch < 90:
                # the one launch over a ring of no whole number of 64-key steps at head_dim 512 (each step may load
                # from both sources) pipelines 215 KB of shared memory, over an A100's 163 KB; not a decode shape
                # (Flash's ring is 128 slots, two whole steps), so not built for sm_80 here
                shapes.remove((2, 20, 100))
            for B, W, M in shapes:
                out.append((f"decode_attention PV_COLS={other} B={B} W={W} M={M}", with_constants(
                    {atk: {"PV_COLS": other}},
                    lambda B=B, W=W, M=M: (attention_triton(
                        _t(B, 1, 64, 512, g=g), _t(B, 1, W + M, 512, g=g),
                        torch.ones(B, 1, W + M, dtype=torch.bool).as_subclass(_Cuda), _t(64, dtype=torch.float32, g=g),
                        512 ** -0.5), attention_ring_triton(
                        _t(B, 1, 64, 512, g=g), _t(B, W, 512, g=g),
                        torch.arange(W).expand(B, W).contiguous().as_subclass(_Cuda),
                        torch.ones(B, W, dtype=torch.bool).as_subclass(_Cuda), _t(B, M, 512, g=g),
                        torch.ones(B, M, dtype=torch.bool).as_subclass(_Cuda), _t(64, dtype=torch.float32, g=g),
                        512 ** -0.5)))))
        # Flash's indexer (64 heads of 128 over 1024 blocks), the tiny preset's (2 of 64)
        for B, H, D, N in ((1, 64, 128, 1024), (8, 64, 128, 1024), (4, 2, 64, 128)):
            out.append((f"index_scores {n} B={B} H={H} D={D} N={N}", lambda B=B, H=H, D=D, N=N, dt=dt: index_scores_triton(
                _t(B, 1, H, D, dtype=dt, g=g), _t(B, N, D, dtype=dt, g=g), _t(B, 1, H, dtype=torch.float32, g=g))))
    for R, N, k in ((1, 1024, 512), (8, 1024, 512), (4, 128, 8)):      # Flash's indexer top-512, the tiny preset's
        out.append((f"topk_blocks R={R} N={N} k={k}", lambda R=R, N=N, k=k: topk_blocks_triton(
            _t(R, N, dtype=torch.float32, g=g), k)))
    for S, D in ((4, 512), (128, 512), (4, 128)):
        out.append((f"compressor_reduce S={S} D={D}", lambda S=S, D=D: compressor_reduce_triton(
            _t(8, S, D, dtype=torch.float32, g=g), _t(8, S, D, dtype=torch.float32, g=g), _t(S, D, dtype=torch.float32, g=g))))
    for n, m, D, overlap in ((8, 4, 512, True), (1, 4, 512, True), (8, 128, 512, False), (1, 128, 512, False)):
        S, W = (2 * m, 2 * D) if overlap else (m, D)            # Flash's CSA and HCA compressor state, bf16 entries
        out.append((f"compressor_pool n={n} m={m}", lambda n=n, S=S, W=W, m=m, o=overlap: compressor_pool_triton(
            _t(n, S, W, dtype=torch.float32, g=g), _t(n, S, W, dtype=torch.float32, g=g), _t(m, W, dtype=torch.float32, g=g),
            m, o)))
        out.append((f"ring_write n={n} m={m}", lambda n=n, S=S, W=W, m=m: ring_write_triton(
            _t(n, S, W, dtype=torch.float32, g=g), _t(n, S, W, dtype=torch.float32, g=g), _t(n, W, dtype=torch.float32, g=g),
            _t(n, W, dtype=torch.float32, g=g), torch.arange(n).as_subclass(_Cuda), torch.zeros(n, dtype=torch.long).as_subclass(_Cuda))))
        out.append((f"close_block n={n} m={m}", lambda n=n, S=S, W=W, m=m, D=D, o=overlap: close_block_triton(
            _t(n, 1025, D, g=g), torch.arange(n).as_subclass(_Cuda), torch.zeros(n, dtype=torch.long).as_subclass(_Cuda),
            torch.ones(n, 1, dtype=torch.bool).as_subclass(_Cuda), _t(n, D, g=g), _t(n, S, W, dtype=torch.float32, g=g),
            _t(n, S, W, dtype=torch.float32, g=g), m, o)))
    for dt in (torch.bfloat16, torch.float32):
        q = torch.randint(0, 256, (64, 256), dtype=torch.uint8, generator=g).as_subclass(_Cuda)
        sf = torch.rand(64, 32, generator=g).to(torch.float8_e4m3fn).as_subclass(_Cuda)
        gs = torch.rand(64, generator=g).as_subclass(_Cuda)
        out.append((f"nvfp4_kvcache -> {dt}", lambda q=q, sf=sf, gs=gs, dt=dt: dequantize_nvfp4_kvcache_triton(q, sf, gs, 64, 512, dt)))
    for R in (1, 8):                                           # Flash: hc 4, dim 4096, bf16 streams
        out.append((f"mhc_pre_norm R={R}", lambda R=R: mhc_pre_norm_triton(
            _t(R, 1, 4, 4096, g=g), _t(R, 1, 24, dtype=torch.float32, g=g), _t(3, dtype=torch.float32, g=g),
            _t(24, dtype=torch.float32, g=g), 1e-6, 1e-6, 20, _t(4096, dtype=torch.float32, g=g), 1e-6)))
    for B in (1, 8, 32):                                       # the LM head (rows, and row blocks), the router (split K)
        for N in (129280, 256):
            out.append((f"bf16_linear B={B} N={N}", lambda B=B, N=N: bf16_linear_triton(
                _t(B, 4096, dtype=torch.float32, g=g), _t(N, 4096, g=g))))
    for R, E, k in ((1, 256, 6), (8, 256, 6), (32, 256, 6), (4, 16, 6)):   # Flash's router, the tiny preset's
        table = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(10)]).as_subclass(_Cuda)
        ids = torch.randint(0, 10, (R,), generator=g).as_subclass(_Cuda)
        for func in ("sqrtsoftplus", "sigmoid"):
            out.append((f"moe_route R={R} E={E} {func}", lambda R=R, E=E, k=k, f=func: moe_route_triton(
                _t(R, E, dtype=torch.float32, g=g), k, 1.5, f, _t(E, dtype=torch.float32, g=g))))
        out.append((f"moe_route R={R} E={E} hash", lambda R=R, E=E, k=k, t=table, i=ids: moe_route_triton(
            _t(R, E, dtype=torch.float32, g=g), k, 1.5, "sqrtsoftplus", None, t, i)))
    for hc, R in ((4, 8), (4, 1), (3, 8)):
        out.append((f"sinkhorn hc={hc} R={R}", lambda hc=hc, R=R: sinkhorn_triton(_t(R, hc, hc, dtype=torch.float32, g=g), 20, 1e-6)))
    for R, V in ((8, 129280), (1, 129280), (4, 1000)):        # Flash's vocab, and a tiny one (one short chunk)
        cols = lambda dt, R=R: torch.zeros(R, dtype=dt).as_subclass(_Cuda)          # noqa: E731
        out.append((f"sample_pick R={R} V={V}", lambda R=R, V=V, cols=cols: chunk_picks(
            _t(R, V, dtype=torch.float32, g=g), torch.zeros(R, V, dtype=torch.long).as_subclass(_Cuda),
            cols(torch.long), cols(torch.float32), cols(torch.long), cols(torch.long))))
        out.append((f"penalize_scale R={R} V={V}", lambda R=R, V=V, cols=cols: penalize_chunks(
            _t(R, V, dtype=torch.float32, g=g), torch.zeros(R, 64, dtype=torch.long).as_subclass(_Cuda),
            cols(torch.float32), cols(torch.float32))))
    return out


def resources(cubin: str) -> dict[str, int]:
    """ptxas's resource usage of a cubin (`cuobjdump -res-usage`, shipped with the Triton wheel): REG, STACK
    (bytes per thread: spills and local arrays), SHARED, LOCAL."""
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    out = subprocess.run([tool, "-res-usage", cubin], capture_output=True, text=True).stdout
    return {k: int(v) for k, v in re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", out)}


def kernels_defined(skip_modules=frozenset()) -> set[str]:
    """Every `@triton.jit` entry kernel (`_..._kernel`) defined in a `dsv4_kernels.*.triton_kernel` module."""
    import dsv4_kernels
    names = set()
    for info in pkgutil.iter_modules(dsv4_kernels.__path__):
        if info.name in skip_modules:
            continue
        try:
            mod = importlib.import_module(f"dsv4_kernels.{info.name}.triton_kernel")
        except ModuleNotFoundError:
            continue
        names |= {v.__name__ for v in vars(mod).values()
                  if isinstance(v, JITFunction) and v.__name__.endswith("_kernel") and v.__module__ == mod.__name__}
    return names


def main() -> int:
    arch = int(sys.argv[sys.argv.index("--arch") + 1]) if "--arch" in sys.argv else 90
    if "--pdl" in sys.argv:
        # every launch as on a Hopper with PDL on: each kernel's griddepcontrol prologue lowers through ptxas
        from dsv4_kernels import _pdl
        if arch < 90:
            print("sm90_build.py: --pdl needs --arch 90 or newer (griddepcontrol is sm_90's)", file=sys.stderr)
            return 2
        _pdl.PDL, _pdl._supported = True, lambda device: True
    from dsv4_kernels._select import KERNELS, PACKAGE_OF, min_capability
    # on an older target only the kernels `available` allows there: the others' modules are neither built nor missed
    too_new = {name for name in KERNELS if min_capability(name) > divmod(arch, 10)}
    drv = BuildOnlyDriver(arch)
    driver.set_active(drv)
    # Triton calls this before loading a build: its files (the cubin among them), by build hash
    triton.knobs.runtime.kernel_load_start_hook = lambda module, fn, name, group, h: drv.files.setdefault(h, group)
    failed = []
    for label, thunk in cases(torch.Generator().manual_seed(0), arch):
        if label.split()[0] in too_new:
            continue
        before = len(drv.built)
        try:
            thunk()
            for _, meta in drv.built[before:]:
                drv.labels[meta.hash] = label
            print(f"ok     {label}: {len(drv.built) - before} new build(s)")
        except Exception as e:  # noqa: BLE001 - every failure is reported with its case, then the run goes on
            failed.append(label)
            print(f"FAILED {label}: {e.__class__.__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            traceback.print_exc(limit=-3, file=sys.stdout)
    only_new = {PACKAGE_OF[n] for n in too_new} - {PACKAGE_OF[n] for n in KERNELS if n not in too_new}
    missing = sorted(kernels_defined(only_new) - {name for name, _ in drv.built})
    for name, meta in drv.built:
        if meta.shared > drv.shared:
            failed.append(f"{name} needs {meta.shared} B of shared memory")
        cubin = next((p for f, p in drv.files.get(meta.hash, {}).items() if f.endswith(".cubin")), None)
        use = resources(cubin) if cubin else {}
        if "REG" not in use:
            failed.append(f"{name}: no cubin or resource usage found ({cubin})")
        label = drv.labels.get(meta.hash, "?")
        if use.get("STACK", 0) > 256:          # more than a few spilled registers
            known = next((why for prefix, why in KNOWN_SPILLS.items() if label.startswith(prefix)), None)
            print(f"{'spills (known: ' + known + ')' if known else 'SPILLS'} {name} [{label}]: {use}")
            if not known:
                failed.append(f"{label} spills: {use}")
    print(f"BUILT {len(drv.built)} FAILED {failed} NOT-BUILT {missing} triton {triton.__version__} sm_{arch}"
          f"{' pdl' if '--pdl' in sys.argv else ''}")
    return 1 if failed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
