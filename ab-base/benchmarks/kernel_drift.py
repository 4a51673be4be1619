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
import dataclasses
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

    from dsv4_model.decode import GraphSafeDecoder, decode_kernels
    from dsv4_model.quant import act_sim
    from dsv4_model.synthetic import flash_layers

    model = flash_layers(device="cuda")
    model.set_simulation(not a.no_sim)
    feed = torch.randint(0, model.args.vocab_size, (a.steps, a.batch), generator=torch.Generator().manual_seed(1)).cuda()
    refs = decode_kernels(torch.device("cuda"), use_kernels=False)        # every slot on its PyTorch reference
    small = decode_kernels(torch.device("cuda")).fns                       # what the decode loads on this GPU
    routed = select("routed_experts", "cuda")

    def gemv_path(path):
        # the table's gemv slot serves the quantised projections and the fp32 ones (Linear.use_kernels): the FP8/FP4
        # ones go through the CUDA C++ path asked for, the rest through the stored-format entry
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

    # each group: the slots of the kernel table it switches from the reference to a kernel (None: the table the
    # decoder loads); the modules take their slots from the table (`Transformer.use_kernels`)
    def on(*slots):
        return {s: small[s] for s in slots}

    groups = {
        "reference (again)": {},
        "gemv rows": {"gemv": gemv_path("rows")},
        "gemv mma": {"gemv": gemv_path("mma")},
        "experts rows": {"experts": experts("rows")},
        "experts mma": {"experts": experts("mma")},
        "sinkhorn": {"sinkhorn": sinkhorn},
        "fp8 fake quant": on("fp8"),
        "rms_norm": on("rms"),
        "rope": on("rope"),
        "q norm + rope": on("q_norm_rope"),
        "norm + rope + fp8": on("norm_rope_fp8"),
        "fp8 nope": on("fp8_nope"),
        "mhc mixes": on("mhc_pre", "mhc_post", "mhc_pre_norm", "mhc_head"),
        "compressor pooling": on("pool"),
        "compressor state writes": on("ring_write", "close_block"),
        "attention core": on("attend"),
        "indexer scores": on("score"),
        "indexer top-k": on("select"),
        "moe route": on("route"),
        "shared swiglu + fp8": on("swiglu_fp8"),
        "indexer rotation + fp4": on("hadamard_fp4"),
        "all (as loaded)": None,
    }

    def run(group, states=None):
        """Logits of every step [steps, batch, V] and the decoder state before each step; with `states`, each step
        starts from the given state (one-step error, no carried drift)."""
        if group is not None:
            model.use_kernels(dataclasses.replace(refs, fns={**refs.fns, **group}, note=f"drift group {sorted(group)}"))
        dec = GraphSafeDecoder(model, batch=a.batch, kernels=True if group is None else None)
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

    ref, states = run({})
    marks = sorted({0, a.steps // 4, a.steps // 2, a.steps - 1})
    rel = lambda got, m: ((got[m] - ref[m]).abs().max() / ref[m].abs().max()).item()
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
