"""The graph-safe decode with its CUDA kernels against the reference decode on the same GPU, on the official release
numerics (bf16 activations, issue 36), at Flash layer dimensions in the release formats (random weights).

    python benchmarks/official_numerics.py [--steps 320] [--layers 3] [--out FILE]

Three runs of greedy decoding from token 0, each `--steps` long: the reference decode (`Transformer.decode_step`, the
PyTorch references), the graph-safe decode without kernels, and with them (Triton attention core with the official
64-key blocks and P rounding, the indexer's bf16 chain, the stored-format GEMVs, ...). Then the kernel decode fed the
reference's tokens (teacher-forced), so its logits compare step for step. Reports the first step where the greedy
tokens differ, the teacher-forced relative logit error per step (max and median) and the argmax agreement; exit 1 if
the free-running tokens differ within `--steps` or the agreement is below 1. `tests/dsv4_model/test_graphsafe.py`
(`test_cuda_official_numerics_flash_greedy`) runs the same check.
"""
from __future__ import annotations

import argparse
import sys

import torch


def greedy(step, steps: int, first: int = 0, feed=None):
    """(tokens [steps], logits [steps, V]): `step(token) -> logits [V]` from `first`; `feed` forces the tokens."""
    tok, toks, logits = first, [], []
    for i in range(steps):
        if feed is not None:
            tok = int(feed[i])
        lg = step(tok).float()
        logits.append(lg.cpu())
        toks.append(tok)
        tok = int(lg.argmax())
    return torch.tensor(toks), torch.stack(logits)


def run(steps: int = 320, layers: int = 3) -> dict:
    from dsv4_model.decode import GraphSafeDecoder
    from dsv4_model.synthetic import flash_layers
    model = flash_layers(device="cuda", n_layers=layers, max_seq_len=steps + 8)
    assert model.dtype == torch.bfloat16

    def ref_step(tok):
        return model.decode_step(torch.tensor([tok], device="cuda"))[0]
    model.reset()
    ref_t, ref_l = greedy(ref_step, steps)                     # the modules hold the references: run it first
    out = {}
    for kernels in (False, True):
        dec = GraphSafeDecoder(model, batch=1, kernels=kernels)

        def gs_step(tok, dec=dec):
            dec.tokens[0] = tok
            return dec.step(1)[0]
        dec.reset()
        t, _ = greedy(gs_step, steps)
        dec.reset()
        _, lf = greedy(gs_step, steps, feed=ref_t)              # teacher-forced: the reference's tokens
        rel = (lf - ref_l).abs().amax(-1) / ref_l.abs().amax(-1)
        diff = (t != ref_t).nonzero()
        out["kernels" if kernels else "no kernels"] = {
            "first_token_diff": int(diff[0]) if len(diff) else None, "note": dec.kernel_note,
            "rel_max": rel.max().item(), "rel_median": rel.median().item(),
            "argmax_agree": (lf.argmax(-1)[:-1] == ref_t[1:]).float().mean().item(), "rel": rel}
    top2 = ref_l.topk(2, -1).values
    out["ref_margin_min"] = ((top2[:, 0] - top2[:, 1]) / ref_l.abs().amax(-1)).min().item()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=320)
    p.add_argument("--layers", type=int, default=3)
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("official_numerics: needs a CUDA device", file=sys.stderr)
        return 2
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    r = run(a.steps, a.layers)
    ok = True
    print(f"reference: greedy {a.steps} steps, smallest top-2 logit margin {r['ref_margin_min']:.2e} of the largest")
    for name in ("no kernels", "kernels"):
        v = r[name]
        print(f"graph-safe, {name}: first greedy token differing from the reference: {v['first_token_diff']}; "
              f"teacher-forced logits rel err max {v['rel_max']:.2e} median {v['rel_median']:.2e}; argmax agreement "
              f"{v['argmax_agree']:.4f}")
        print("  per step (every 20th):", " ".join(f"{x:.1e}" for x in v["rel"][::20].tolist()))
        print("  ", v["note"])
        ok &= v["first_token_diff"] is None and v["argmax_agree"] == 1.0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
