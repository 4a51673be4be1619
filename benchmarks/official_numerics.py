"""The graph-safe decode against the reference decode on the same GPU, on the official release numerics (bf16
activations, issue 36), at Flash layer dimensions in the release formats (random weights).

    python benchmarks/official_numerics.py [--steps 320] [--layers 3] [--probe-only] [--knob MODULE.NAME=VALUE]

The graph-safe step changes state and control flow, never the layer math, so on one device it must give the
reference's bits. Two pairs, each free-running greedy from token 0 for `--steps`, then teacher-forced on the
reference's tokens:
  pytorch  the reference decode (`Transformer.decode_step`) and the graph-safe decode, both with the PyTorch references
           (`model.use_kernels(decode_kernels(dev, use_kernels=False))`);
  kernels  both with the decode kernels: the script puts one table on the model (`model.use_kernels(
           decode_kernels(dev))`), so the reference dispatch and the graph-safe decoder built over the same modules
           run the same Triton/CUDA kernels, as the official code runs its own kernels.
Gate (exit 1): within each pair the same greedy tokens at every step and teacher-forced logits bit for bit. Measured,
not gated: the kernels against the PyTorch references (another accumulation order on the tensor cores), as the
first greedy step where they part and the per-step relative logit error. Where a pair differs, the first step and
the first module call whose outputs differ (a hook on every module and every swappable layer function) are printed.
Before the runs, three probes of shape invariance on this GPU (what makes the pairs equal): an attention core over
n keys against the same keys padded to a capacity and masked, index scores over n against N entries, and the routed
experts of one token's k picks against one expert per call.
`tests/dsv4_model/test_graphsafe.py` (`test_cuda_official_numerics_flash_greedy`) runs the gate.
"""
from __future__ import annotations

import argparse
import sys

import torch

import ab_knobs  # benchmarks/ab_knobs.py: this script's directory is on sys.path


def greedy(step, steps: int, first: int = 0, feed=None):
    """(tokens [steps], logits [steps, V]): `step(token) -> logits [V]` from `first`; `feed` forces the tokens."""
    tok, toks, logits = first, [], []
    for i in range(steps):
        if feed is not None:
            tok = int(feed[i])
        lg = step(tok).float()
        logits.append(lg.to("cpu", copy=True))          # a copy: the decoder returns a view of its static buffer
        toks.append(tok)
        tok = int(lg.argmax())
    return torch.tensor(toks), torch.stack(logits)


class Recorder:
    """Every output of every module forward and of the layer functions the kernels swap (attention core, index
    scores, top-k, pooling, routed experts, the fp32 products: a CUDA table's joined compressor projections run
    there, not through the wkv/wgate modules), per step, in call order: where two runs part, the first call that
    differs. Outputs of different lengths along the last axis (n keys against a capacity) compare on the common
    part."""

    FUNCS = ("core", "score", "select", "pool_reduce", "compute", "q_norm_rope", "norm_rope", "fp8_nope", "norm_fp8", "rope", "kernel",
             "fp8_quant", "hadamard_fp4", "gemv", "matmul", "sinkhorn", "pre_mix", "post_mix", "pre_norm", "head_mix",
             "route", "swiglu_fp8", "dense", "grouped", "f32")

    def __init__(self, model):
        self.model, self.log, self.handles, self.saved = model, [], [], []

    def __enter__(self):
        for name, m in self.model.named_modules():
            self.handles.append(m.register_forward_hook(lambda mod, a, out, name=name: self._add(name, out)))
            for f in self.FUNCS:
                fn = m.__dict__.get(f)
                if callable(fn):
                    self.saved.append((m, f, fn))

                    def wrapped(*a, _fn=fn, _name=f"{name}.{f}", **k):
                        out = _fn(*a, **k)
                        self._add(_name, out)
                        return out
                    setattr(m, f, wrapped)
        return self

    def _add(self, name, out):
        if isinstance(out, tuple):
            out = out[0]
        if isinstance(out, torch.Tensor):
            self.log.append((name, out.detach().float().cpu() if out.is_floating_point() else out.detach().cpu()))

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        for m, f, fn in self.saved:
            setattr(m, f, fn)

    def cut(self) -> list:
        out, self.log = self.log, []
        return out


def first_difference(a: list, b: list) -> str | None:
    """The first entry of run a (in its call order) whose output differs from the same name's call in run b. Names
    called a different number of times in the two runs (the reference's per-expert dispatch, its pooling only when a
    block closes) do not pair up and are skipped."""
    seen: dict[str, int] = {}
    byname: dict[str, list] = {}
    mine: dict[str, int] = {}
    for name, t in b:
        byname.setdefault(name, []).append(t)
    for name, _ in a:
        mine[name] = mine.get(name, 0) + 1
    for name, t in a:
        i = seen[name] = seen.get(name, -1) + 1
        other = byname.get(name, [])
        if len(other) != mine[name]:
            continue
        u = other[i]
        if t.shape[:-1] != u.shape[:-1] and t.numel() == u.numel():
            u = u.reshape(t.shape)
        if t.shape[:-1] != u.shape[:-1]:
            continue
        n = min(t.shape[-1], u.shape[-1])
        x, y = t[..., :n], u[..., :n]
        if not torch.equal(x, y):
            d = (x.float() - y.float()).abs().max().item() if x.is_floating_point() else "ints"
            return f"{name} (call {i}, shape {tuple(t.shape)} vs {tuple(u.shape)}): max |diff| {d}"
    return None


def probes(model, dev: str = "cuda") -> list[str]:
    """Shape invariance of the three ops whose shapes differ between the reference and the graph-safe step."""
    from dsv4_kernels.attention.reference import attention_ref
    from dsv4_kernels.indexer.reference import index_scores_ref
    from dsv4_model.moe import routed_experts
    g = torch.Generator(device=dev).manual_seed(0)
    bf = torch.bfloat16
    H, D, W = model.args.n_heads, model.args.head_dim, model.args.window_size
    q = torch.randn(1, 1, H, D, device=dev, generator=g).to(bf)
    out = []
    for n, N in ((W + 5, W + 82), (W + 64, W + 130), (W + 1, W + 3)):
        K = torch.randn(1, 1, N, D, device=dev, generator=g).to(bf)
        mask = torch.arange(N, device=dev)[None, None, :] < n
        sink = torch.randn(H, device=dev, generator=g)
        a = attention_ref(q, K[:, :, :n], None, sink, D ** -0.5)
        b = attention_ref(q, K, mask, sink, D ** -0.5)
        out.append(f"attention_ref {n} keys vs {N} masked: {'equal' if torch.equal(a, b) else 'DIFFER'} "
                   f"(max {(a - b).abs().max().item():.2e})")
    Hi, Di = model.args.index_n_heads, model.args.index_head_dim
    qi = torch.randn(1, 1, Hi, Di, device=dev, generator=g).to(bf)
    w = torch.randn(1, 1, Hi, device=dev, generator=g).to(bf)
    for n, N in ((3, 82), (40, 82), (81, 1024)):
        k = torch.randn(1, N, Di, device=dev, generator=g).to(bf)
        a, b = index_scores_ref(qi, k[:, :n], w), index_scores_ref(qi, k, w)[..., :n]
        out.append(f"index_scores_ref {n} vs {N} entries: {'equal' if torch.equal(a, b) else 'DIFFER'}")
    layer = next(lay for lay in model.layers if lay.ffn.gate.hash is False)
    ex = layer.ffn.experts
    x = torch.randn(1, model.args.dim, device=dev, generator=g).to(bf)
    k = model.args.n_activated_experts
    idx = torch.randperm(ex.n, device=dev, generator=g)[:k].sort().values.view(1, k)
    wts = torch.rand(1, k, device=dev, generator=g)
    ws = ex.w1.astuple(), ex.w3.astuple(), ex.w2.astuple()
    a = routed_experts(x, idx, wts, *ws, ex.limit, act=ex.act_sim)
    b = torch.zeros_like(a)
    for j in range(k):
        b += routed_experts(x, idx[:, j:j + 1], wts[:, j:j + 1], *ws, ex.limit, act=ex.act_sim)
    out.append(f"routed_experts k={k} at once vs one per call: {'equal' if torch.equal(a, b) else 'DIFFER'}")
    return out


def pair(model, dec, steps: int, diagnose: bool, dev: str = "cuda") -> dict:
    """The reference decode and the graph-safe decoder `dec` over the same modules: greedy both, teacher-forced."""
    def ref_step(tok):
        return model.decode_step(torch.tensor([tok], device=dev))[0]

    def gs_step(tok):
        dec.tokens[0] = tok
        return dec.step(1)[0]
    model.reset()
    ref_t, ref_l = greedy(ref_step, steps)
    dec.reset()
    t, _ = greedy(gs_step, steps)
    dec.reset()
    _, lf = greedy(gs_step, steps, feed=ref_t)
    rel = (lf - ref_l).abs().amax(-1) / ref_l.abs().amax(-1)
    diff = (t != ref_t).nonzero()
    r = {"ref_t": ref_t, "ref_l": ref_l, "first_token_diff": int(diff[0]) if len(diff) else None, "rel": rel,
         "bitwise": torch.equal(lf, ref_l), "note": dec.kernel_note, "where": None}
    if diagnose and not r["bitwise"]:
        first = int((rel > 0).nonzero()[0])
        model.reset()
        dec.reset()
        with Recorder(model) as rec:
            for i in range(first + 1):
                ref_step(int(ref_t[i]))
                a = rec.cut()
                gs_step(int(ref_t[i]))
                b = rec.cut()
        r["where"] = f"step {first}: " + (first_difference(a, b) or "no recorded call differs (the glue between them)")
    return r


def run(steps: int = 320, layers: int = 3, diagnose: bool = True, dev: str = "cuda", model=None) -> dict:
    """`model`: another bf16 model on `dev` than Flash-dimension layers (the CPU test gives a tiny one)."""
    from dsv4_model.decode import GraphSafeDecoder, decode_kernels
    from dsv4_model.synthetic import flash_layers
    model = model or flash_layers(device=dev, n_layers=layers, max_seq_len=steps + 8)
    assert model.dtype == torch.bfloat16
    out = {"probes": probes(model, dev)}
    # each pair: one kernel table on the model, which both decodes then run (the decoder is built over its modules
    # as they are, kernels=None)
    model.use_kernels(decode_kernels(dev, use_kernels=False))
    out["pytorch"] = pair(model, GraphSafeDecoder(model, batch=1), steps, diagnose, dev)
    model.use_kernels(decode_kernels(dev))
    out["kernels"] = pair(model, GraphSafeDecoder(model, batch=1), steps, diagnose, dev)
    ref_t, ref_l = out["pytorch"]["ref_t"], out["pytorch"]["ref_l"]
    diff = (out["kernels"]["ref_t"] != ref_t).nonzero()
    model.reset()                                   # the reference with kernels, fed the PyTorch reference's tokens
    _, kl = greedy(lambda tok: model.decode_step(torch.tensor([tok], device=dev))[0], steps, feed=ref_t)
    out["kernels_vs_pytorch"] = {"first_token_diff": int(diff[0]) if len(diff) else None,
                                 "rel": (kl - ref_l).abs().amax(-1) / ref_l.abs().amax(-1),
                                 "agree": (kl.argmax(-1)[:-1] == ref_t[1:]).float().mean().item()}
    top2 = ref_l.topk(2, -1).values
    out["ref_margin_min"] = ((top2[:, 0] - top2[:, 1]) / ref_l.abs().amax(-1)).min().item()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=320)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--probe-only", action="store_true", help="only the shape-invariance probes")
    p.add_argument("--knob", action="append", default=[], metavar="MODULE.NAME=VALUE", help=ab_knobs.HELP)
    a = p.parse_args(argv)
    if not ab_knobs.apply(a.knob, "benchmarks/official_numerics.py"):
        return 2
    if not torch.cuda.is_available():
        print("official_numerics: needs a CUDA device", file=sys.stderr)
        return 2
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    if a.probe_only:
        from dsv4_model.synthetic import flash_layers
        print("\n".join(probes(flash_layers(device="cuda", n_layers=a.layers, max_seq_len=a.steps + 8))))
        return 0
    r = run(a.steps, a.layers)
    print("\n".join(r["probes"]))
    print(f"reference: greedy {a.steps} steps, smallest top-2 logit margin {r['ref_margin_min']:.2e} of the largest")
    ok = True
    for name in ("pytorch", "kernels"):
        v = r[name]
        print(f"{name}: reference vs graph-safe: first differing greedy token {v['first_token_diff']}; teacher-forced "
              f"logits {'bit for bit' if v['bitwise'] else 'DIFFER'} (rel max {v['rel'].max():.2e}, median "
              f"{v['rel'].median():.2e})")
        print("  ", v["note"])
        if v["where"]:
            print("   first difference:", v["where"])
        ok &= v["first_token_diff"] is None and v["bitwise"]
    kv = r["kernels_vs_pytorch"]
    print(f"measured, not gated: the reference with kernels vs with PyTorch ops: first differing greedy token "
          f"{kv['first_token_diff']}; teacher-forced: argmax agreement {kv['agree']:.4f}, rel logit difference max "
          f"{kv['rel'].max():.2e} median {kv['rel'].median():.2e}; every 20th step: "
          + " ".join(f"{x:.1e}" for x in kv["rel"][::20].tolist()))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
