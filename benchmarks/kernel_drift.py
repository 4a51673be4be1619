"""Which decode kernel moves the Flash-dimension logits away from the references, and how fast the gap grows.

    python benchmarks/kernel_drift.py [--steps 16] [--batch 2]

Builds the Flash layers (random weights in the release formats) once and runs the graph-safe step `--steps` times
with every module on its PyTorch reference, then again with one kernel group switched on at a time (and all of
them), fed the same tokens. Prints max |kernel - reference| / max |reference| of the logits after the first, a
middle and the last step, and the largest one-step error (each step started from the references' state of that
step). A group whose one-step error is far off computes something else; one whose one-step error stays at rounding
size while the free-running gap grows is rounding amplified by the random-weight layers (FP8 activation rounding
flips, bf16 outputs).
"""
from __future__ import annotations

import argparse
import functools

import torch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--no-sim", action="store_true", help="FP8/FP4 activation simulations off (no rounding flips)")
    a = ap.parse_args(argv)
    from dsv4_kernels import select
    from dsv4_kernels.moe_gemv import cuda_kernel, weight_gemv
    from dsv4_kernels.sinkhorn import sinkhorn
    from dsv4_model.decode import GraphSafeDecoder, small_kernels
    from dsv4_model.linear import Linear, RMSNorm
    from dsv4_model.attention import Attention
    from dsv4_model.indexer import Indexer
    from dsv4_model.compressor import Compressor
    from dsv4_model.mhc import HyperConnection, HyperHead
    from dsv4_model.moe import Experts
    from dsv4_model.quant import act_sim
    from dsv4_model.synthetic import flash_layers

    model = flash_layers(device="cuda")
    model.set_simulation(not a.no_sim)
    feed = torch.randint(0, model.args.vocab_size, (a.steps, a.batch), generator=torch.Generator().manual_seed(1)).cuda()
    small = small_kernels(torch.device("cuda"))
    routed = select("routed_experts", "cuda")

    def gemv_path(path):
        def run(x, w):
            if w[0] in ("fp8", "mxfp4", "nvfp4") and cuda_kernel.fits(x.shape[-1], w):
                if path == "mma" and not cuda_kernel.mma_fits(x.contiguous(), w):
                    return weight_gemv(x, w)
                return cuda_kernel.fp4_gemv_cuda(x.contiguous(), w, path=path)
            return weight_gemv(x, w)
        return run

    def experts(path):
        sim = functools.partial(act_sim, fp8=small["fp8"])
        if path == "entry":
            return lambda x, idx, wts, w1, w3, w2, limit, act=True: routed(x, idx, wts, w1, w3, w2, limit,
                                                                            act_sim=sim if act else None)
        return lambda x, idx, wts, w1, w3, w2, limit, act=True: cuda_kernel.routed_experts_cuda(
            x.contiguous(), idx, wts, w1, w3, w2, limit, act_sim=sim if act else None, path=path)

    def setattrs(kind, value):
        for m in model.modules():
            if kind == "experts" and isinstance(m, Experts):
                m.compute = value
            elif kind == "gemv" and isinstance(m, Linear) and m.fmt in ("fp8", "mxfp4", "nvfp4"):
                m.gemv = value
            elif kind == "sinkhorn" and isinstance(m, HyperConnection):
                m.sinkhorn = value
            elif kind == "rms" and isinstance(m, RMSNorm):
                m.kernel = value
            elif kind == "q_norm_rope" and isinstance(m, Attention):
                m.q_norm_rope = value
            elif kind == "fp8" and isinstance(m, Linear):
                m.fp8_quant = value
            elif kind == "norm_rope_fp8" and isinstance(m, (Attention, Compressor)):
                m.norm_rope = value
            elif kind == "fp8_nope" and isinstance(m, Attention):
                m.fp8_nope = value
            elif kind == "fp4" and isinstance(m, Indexer):
                m.fp4_quant = value
            elif kind == "rope" and isinstance(m, (Attention, Indexer)):
                m.rope = value
            elif kind == "mhc" and isinstance(m, HyperConnection):
                m.pre_mix, m.post_mix, m.pre_norm = value["mhc_pre"], value["mhc_post"], value["mhc_pre_norm"]
            elif kind == "mhc" and isinstance(m, HyperHead):
                m.head_mix = value["mhc_head"]
            elif kind == "reduce" and isinstance(m, Compressor):
                m.pool_reduce = value
            elif kind == "attend" and isinstance(m, Attention):
                m.core = value
            elif kind == "score" and isinstance(m, Indexer):
                m.score = value
            elif kind == "select" and isinstance(m, Indexer):
                m.select = value

    groups = {
        "reference (again)": [],
        "gemv rows": [("gemv", gemv_path("rows"))],
        "gemv mma": [("gemv", gemv_path("mma"))],
        "experts rows": [("experts", experts("rows"))],
        "experts mma": [("experts", experts("mma"))],
        "sinkhorn": [("sinkhorn", sinkhorn)],
        "fp8 fake quant": [("fp8", small["fp8"])],
        "fp4 fake quant": [("fp4", small["fp4"])],
        "rms_norm": [("rms", small["rms"])],
        "rope": [("rope", small["rope"])],
        "q norm + rope": [("q_norm_rope", small["q_norm_rope"])],
        "norm + rope + fp8": [("norm_rope_fp8", small["norm_rope_fp8"])],
        "fp8 nope": [("fp8_nope", small["fp8_nope"])],
        "mhc mixes": [("mhc", small)],
        "compressor pooling": [("reduce", small["pool"])],
        "attention core": [("attend", small["attend"])],
        "indexer scores": [("score", small["score"])],
        "indexer top-k": [("select", small["select"])],
        "all (as loaded)": None,
    }

    def run(group, states=None):
        """Logits of every step [steps, batch, V] and the decoder state before each step; with `states`, each step
        starts from the given state (one-step error, no carried drift)."""
        dec = GraphSafeDecoder(model, batch=a.batch, kernels=group is None)     # resets every module attribute
        for kind, value in group or []:
            setattrs(kind, value)
        dec.reset()
        outs, before = [], []
        for t in range(a.steps):
            dec.tokens[:a.batch] = feed[t]
            if states is not None:
                for k, v in dec.state().items():
                    v.copy_(states[t][k])
            else:
                before.append({k: v.clone() for k, v in dec.state().items()})
            outs.append(dec.step(a.batch).clone())
        return torch.stack(outs), before

    ref, states = run([])
    marks = sorted({0, a.steps // 4, a.steps // 2, a.steps - 1})
    rel = lambda got, m: ((got[m] - ref[m]).abs().max() / ref[m].abs().max()).item()   # noqa: E731
    print(f"max |kernel - reference| / max |reference| of the logits: free-running after steps "
          f"{[m + 1 for m in marks]} | the largest one-step error (each step from the references' state)")
    for name, group in groups.items():
        try:
            got, _ = run(group)
            one, _ = run(group, states)
            print(f"{name:20} " + "  ".join(f"{rel(got, m):9.2e}" for m in marks)
                  + f"  | {max(rel(one, m) for m in range(a.steps)):9.2e}")
        except Exception as e:  # noqa: BLE001 - one group's failure must not hide the others
            print(f"{name:20} FAILED {type(e).__name__}: {str(e)[:200]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
