"""Where the official attention core's two launches leave the one launch's bits (issue 37; CUDA only).

    python benchmarks/attention_bits.py [--batch 8] [--keys 640] [--window 128]

Run 74 (H100) found the two launches (`PV_COLS` 64) off the one launch's bits, and their ring off their list, at
Flash's 64 heads of 512 and B=8, though FP fusion was off in every official launch. This probes which part of the
launch shape moves them: for each variant (the second launch's columns per program, the compile options of the
official launches) it prints, against the one launch as one list, how many outputs differ and by how much, and
whether the variant's ring equals its own list. A variant with 0 differing and ring = list gives the bits the
one-launch kernel gives. Both forms are also held against a float64 softmax of the same bf16 inputs, so a variant
that differs can be judged on its error, not only on its bits.
"""
from __future__ import annotations

import argparse
import sys

import torch


def inputs(B: int, N: int, W: int, seed: int = 0):
    """Flash's heads over N keys, W of them a window ring in a shuffled slot order, the first row fully masked."""
    g = torch.Generator().manual_seed(seed)
    H, D = 64, 512
    q = (torch.randn(B, 1, H, D, generator=g) * 4).to("cuda", torch.bfloat16)
    K = torch.randn(B, 1, N, D, generator=g).to("cuda", torch.bfloat16)
    mask = (torch.rand(B, 1, N, generator=g) > 0.3).cuda()
    mask[0] = False
    sink = torch.randn(H, generator=g).cuda()
    order = ((torch.randint(0, W, (B, 1), generator=g) + torch.arange(W)) % W).cuda()
    from dsv4_kernels.attention.reference import ring_of
    return q, K, mask, sink, order, ring_of(K[:, 0, :W], order), D ** -0.5


def exact(q, K, mask, sink, scale) -> torch.Tensor:
    """The sink softmax of the same bf16 inputs in float64, without the official P rounding: the error scale."""
    s = torch.einsum("bthd,btnd->bthn", q.double(), K.double()) * scale
    s = s.masked_fill(~mask.unsqueeze(2), float("-inf"))
    m = torch.maximum(s.amax(-1, keepdim=True), sink.double().view(1, 1, -1, 1)).clamp_min(-1e300)
    p = torch.exp(s - m)
    den = p.sum(-1, keepdim=True) + torch.exp(sink.double().view(1, 1, -1, 1) - m)
    return torch.einsum("bthn,btnd->bthd", p / den, K.double())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--keys", type=int, default=640, help="keys per row (CSA at Flash: 128 window + 512 picks)")
    ap.add_argument("--window", type=int, default=128)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/attention_bits.py: needs a CUDA GPU (the bits in question are the GPU's)", file=sys.stderr)
        return 2
    from dsv4_kernels.attention import triton_kernel as tk
    q, K, mask, sink, order, ring, scale = inputs(a.batch, a.keys, a.window)
    W = a.window
    comp, wv, cv = K[:, 0, W:], mask[:, 0, :W].contiguous(), mask[:, 0, W:].contiguous()
    want = exact(q, K, mask, sink, scale)
    base_cols, base_opts = tk.PV_COLS, dict(tk._NO_FMA)

    def run(cols: int, opts: dict):
        tk.PV_COLS, tk._NO_FMA = cols, opts
        try:
            lst = tk.attention_triton(q, K, mask, sink, scale)
            rng = tk.attention_ring_triton(q, ring, order, wv, comp, cv, sink, scale)
            torch.cuda.synchronize()
            return lst, rng
        finally:
            tk.PV_COLS, tk._NO_FMA = base_cols, base_opts

    one, one_ring = run(0, base_opts)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; B={a.batch} N={a.keys} W={W}, 64 heads of 512")
    print(f"one launch: ring = list bit for bit: {torch.equal(one_ring.float(), one.to(one_ring.dtype).float())}; "
          f"max |err| vs float64 {(one.double() - want).abs().max().item():.3e}")
    print(f"{'variant':44} {'differ':>8} {'max |diff|':>11} {'ring=list':>9} {'max |err| f64':>13}")
    variants = [(f"two launches, {c} cols, {name}", c, o) for c in (64, 128, 512) for name, o in (
        ("no FP fusion", base_opts), ("no FP fusion, 1 stage", {**base_opts, "num_stages": 1}),
        ("FP fusion on", {}))]
    variants += [("one launch, FP fusion on", 0, {}), ("one launch, 1 stage", 0, {**base_opts, "num_stages": 1})]
    for label, cols, opts in variants:
        try:
            lst, rng = run(cols, opts)
        except Exception as e:  # noqa: BLE001 - a variant that does not compile is a row, not the end of the probe
            print(f"{label:44} failed: {e.__class__.__name__}: {str(e)[:80]}")
            continue
        d = (lst - one).abs()
        same = torch.equal(rng.float(), lst.to(rng.dtype).float())
        print(f"{label:44} {int((d != 0).sum()):>8} {d.max().item():>11.3e} {str(same):>9} "
              f"{(lst.double() - want).abs().max().item():>13.3e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
