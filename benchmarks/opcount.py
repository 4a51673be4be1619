"""ATen ops per source function in one runner step of the graph-safe decode at Flash structure (3 layers, 16
experts), on CPU: a proxy for the number of small CUDA kernels per step. The GPU kernels that already exist
(stored-format GEMVs, Sinkhorn, routed experts, compressor pooling) are emulated as one op each; `--fused` also emulates the one-launch
fake quants, RMSNorm, RoPE, the q path's norm + RoPE, mHC mixes and a block's mHC pre + Sinkhorn + RMSNorm
(dsv4_kernels.act_quant, .rms_norm, .rope, .head_norm_rope, .mhc) the MoE route (.moe_route), the shared expert's SwiGLU + FP8 (.swiglu_fp8) and the indexer's rotation + FP4 (.hadamard_fp4) as one op each, and the sampler's penalty and pick (dsv4_kernels.sampling), the attention core (dsv4_kernels.attention) and the indexer's
scores and top-k (dsv4_kernels.indexer) as their launches plus their torch glue.

    python benchmarks/opcount.py [B] [--fused] [--by-function]      (with the dsv4_kernels mapping on PYTHONPATH; ~2 min)
"""
import collections
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from dsv4_kernels.rms_norm.reference import rms_norm_ref

from dsv4_model.attention import Attention
from dsv4_model.compressor import Compressor
from dsv4_model.decode import GraphSafeDecoder
from dsv4_model.indexer import Indexer
from dsv4_model.linear import Linear, RMSNorm
from dsv4_model.mhc import HyperConnection, HyperHead
from dsv4_model.moe import Expert, Experts, Gate
from dsv4_model.runner import Runner
from dsv4_model.sampler import Sampler
from dsv4_model.synthetic import flash_args, random_model

SKIP = {"aten.view.default", "aten._unsafe_view.default", "aten.unsqueeze.default", "aten.slice.Tensor",
        "aten.expand.default", "aten.select.int", "aten.t.default", "aten.permute.default", "aten.transpose.int",
        "aten.squeeze.dim", "aten.unflatten.int", "aten.alias.default", "aten.detach.default",
        "aten.as_strided.default", "aten.reshape.default", "aten.lift_fresh.default", "aten._reshape_alias.default",
        "aten.flatten.using_ints", "aten.view.dtype", "aten.numpy_T.default"}


def one_op(x, *args, **kwargs):
    """A kernel emulated as one launch (same shape and dtype as its input)."""
    return x.clone()


def one_pre(X, mix, *args):
    """The mHC pre kernel as one launch: x (one op) and post / comb logits as views of the mix."""
    hc = X.shape[-2]
    return X.select(-2, 0).clone(), mix[..., hc:2 * hc], mix[..., 2 * hc:].unflatten(-1, (hc, hc))


def unfused_pre_norm(hc: HyperConnection):
    """A block's pre, Sinkhorn and RMSNorm as the module's own three functions (the Sinkhorn the one launch it is
    on CUDA), what the reference composition `mhc_pre_norm_ref` runs without the fused kernel."""
    def run(X, mix, scale, base, eps, norm_eps, iters, weight, rms_eps):
        x, post, logits = hc.pre_mix(X, mix, scale, base, eps, norm_eps)
        return rms_norm_ref(x, weight, rms_eps), post, hc.sinkhorn(logits, iters, eps)
    return run


def one_route(logits, k, *args):
    """The route kernel as one launch: weights and picks written by it (the picks' values mean nothing here)."""
    out = logits[:, :2 * k].clone()
    return out[:, :k], out.view(torch.int64)


class OneLaunch:
    """A Triton kernel launched as one op: `kernel[grid](*args)` zeroes the output argument at index `out`."""

    def __init__(self, out: int):
        self.out = out

    def __getitem__(self, grid):
        return lambda *args, **kwargs: args[self.out].zero_()


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    B, fused = (int(args[0]) if args else 1), "--fused" in sys.argv
    a = flash_args(3, 512)
    a.n_routed_experts, a.vocab_size = 16, 4096
    model = random_model(a, device="cpu")
    dec = GraphSafeDecoder(model, batch=B, kernels=False)
    for m in model.modules():            # the existing GPU kernels: one op each
        if isinstance(m, Linear) and m.fmt in ("fp8", "mxfp4"):
            m.gemv = lambda x, w: torch.zeros(x.shape[0], w[1].shape[0], dtype=x.dtype)
        if isinstance(m, HyperConnection):
            m.sinkhorn = lambda c, it, eps: c.clone()
            m.pre_norm = unfused_pre_norm(m)
        if isinstance(m, Compressor):      # the pooling: one Triton launch on CUDA
            m.pool_reduce = lambda kv, gate, ape, m_, overlap: kv[:, 0, :ape.shape[-1] // (1 + overlap)].clone()
        if fused:
            if isinstance(m, Linear):
                m.fp8_quant = one_op
            elif isinstance(m, RMSNorm):
                m.kernel = one_op
            elif isinstance(m, Attention):
                m.q_norm_rope, m.norm_rope, m.fp8_nope, m.norm_fp8, m.rope = one_op, one_op, one_op, one_op, one_op
            elif isinstance(m, Indexer):
                m.hadamard_fp4, m.rope = one_op, one_op
            elif isinstance(m, Compressor):
                m.norm_rope = lambda x, w, eps, cs, rd, dtype=None, block=0: x.to(dtype or x.dtype, copy=True)
                m.ring_write = lambda kv, gate, C, Z, rows, slot: kv.select(1, 0).copy_(C)
                m.close_block = lambda entries, rows, b, closes, c, *a: entries.select(1, 0).copy_(c)
            elif isinstance(m, HyperHead):
                m.head_mix = lambda X, *a: X.select(-2, 0).clone()
            elif isinstance(m, Gate):          # the route after the fp32 product: one launch, two outputs
                m.route = one_route
            elif isinstance(m, Expert):        # the shared expert's SwiGLU + FP8: one launch
                m.swiglu_fp8 = one_op
            if isinstance(m, HyperConnection):
                m.pre_mix, m.post_mix = one_pre, lambda y, X, post, comb, b=None: X.clone()
                m.pre_norm = lambda X, mix, *args: one_pre(X, mix)     # pre + Sinkhorn + RMSNorm: one launch
    for m in model.modules():
        if isinstance(m, Experts):
            m.compute = lambda x, idx, wts, w1, w3, w2, limit, act=True: torch.zeros_like(x)
    runner = Runner(dec, Sampler(B, a.vocab_size, device="cpu"), buckets=(B,), log=lambda s: None)
    if fused:                            # the sampler's Triton kernels: one op per launch, their torch glue as it runs
        from dsv4_kernels.sampling import triton_kernel as tk
        tk._penalize_scale_kernel, tk._chunk_sums_kernel, tk._chunk_picks_kernel = OneLaunch(6), OneLaunch(2), OneLaunch(8)
        runner.sampler.penalize_scale, runner.sampler.pick = tk.penalize_scale_triton, tk.sample_pick_triton
        from dsv4_kernels.attention import triton_kernel as ak   # the attention core: its two launches, likewise
        ak._attend_split_kernel, ak._attend_merge_kernel = OneLaunch(5), OneLaunch(4)     # fp32 keys
        ak._scores_kernel, ak._attend_pv_kernel = OneLaunch(6), OneLaunch(5)              # bf16 keys (official)
        from dsv4_kernels.indexer import triton_kernel as ik     # the indexer's scores: one launch
        ik._index_scores_kernel, ik._rank_topk_kernel = OneLaunch(3), OneLaunch(1)
        for m in model.modules():
            if isinstance(m, Attention):
                m.core = ak.attention_triton
            elif isinstance(m, Indexer):
                m.score, m.select = ik.index_scores_triton, ik.topk_blocks_triton
    for r in range(B):
        runner.start(r, [0, 5 + r, 6 + r], temperature=0.8, top_k=50, top_p=0.95, seed=r)
    runner.body(B)
    where, ops, pairs = collections.Counter(), collections.Counter(), collections.Counter()
    layer, per_layer = ["rest of the step"], collections.Counter()
    kinds = {4: "CSA", 128: "HCA", 0: "SWA"}

    def block(i, *args, _block=dec.block):          # which layer the ops run in (the decoder's per-layer entry)
        layer[0] = f"layer {i} ({kinds[a.ratio(i)]}{', hashed' if i < a.n_hash_layers else ''})"
        try:
            return _block(i, *args)
        finally:
            layer[0] = "rest of the step"
    dec.block = block

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func)
            out = func(*args, **(kwargs or {}))
            if name == "aten.to.dtype" and out is args[0]:       # already that dtype: no kernel
                return out
            if name not in SKIP:
                f, key = sys._getframe(1), "?"
                while f:
                    fn = f.f_code.co_filename
                    if ("dsv4_model" in fn or "kernels" in fn or "opcount" in fn) and "python_dispatch" not in fn:
                        key = fn.split("/")[-1] + ":" + f.f_code.co_name
                        break
                    f = f.f_back
                where[key] += 1
                per_layer[layer[0]] += 1
                pairs[key, name] += 1
                ops[name] += 1
            return out

    with Count():
        runner.body(B)
    print(f"B={B} fused={fused} total {sum(where.values())}; per layer: "
          + ", ".join(f"{k} {v}" for k, v in sorted(per_layer.items())))
    for k, v in where.most_common(40):
        print(f"{v:5d} {k}")
    print()
    for k, v in ops.most_common(25):
        print(f"{v:5d} {k}")
    if "--by-function" in sys.argv:
        print()
        for (fn, op), v in sorted(pairs.items(), key=lambda kv: (-where[kv[0][0]], -kv[1])):
            print(f"{v:5d} {fn:36s} {op}")


if __name__ == "__main__":
    main()
