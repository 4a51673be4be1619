"""Issue 37's fused small-chain kernels on a GPU, in one run: each fused op against the chain of launches it
replaced (parity, then an A/B of their times), and optionally the per-layer decode measure with the fused ops on
and off.

    python benchmarks/fuse_ab.py                          # parity + A/B at B = 1, 8, 32 (about a minute)
    python benchmarks/fuse_ab.py --depth                  # also decode.py --depths 2,8 with the fused ops on and off
    python benchmarks/fuse_ab.py --depth-only             # only those
    python benchmarks/fuse_ab.py --device cpu --batches 1 --reps 2   # CPU crash test (the references; no timing)

The fused ops (each a decode slot of its kernel record) and the chains they replaced, which `unfuse` puts back on a
loaded model (what the decode ran before them, every link the kernel the decode selects for it):
- q_norm_rope (`dsv4_kernels.head_norm_rope`): `head_rms_ref` (PyTorch, the official per-op bf16 rounding) + RoPE;
- mhc_pre_norm (`dsv4_kernels.mhc`): mHC pre + Sinkhorn + RMSNorm;
- norm_rope_fp8 (`dsv4_kernels.norm_rope_fp8`), the kv path: RMSNorm + RoPE + FP8 of the unrotated dims + cat; an
  entry: cast + RMSNorm + RoPE;
- fp8_nope: FP8 of the unrotated dims + cat;
- pool (`dsv4_kernels.compressor_pool`): the cats of the pooled rows and the bias (CSA) + the reduction;
- ring_write, close_block (`dsv4_kernels.compressor_ring`): the graph-safe step's compressor state writes (two
  index_puts; an index, a where and an index_put, and a where per CSA ring);
- route (`dsv4_kernels.moe_route`): the router after its fp32 product: scores, bias, top-k, gather, the
  renormalisation and route scale, the sort into expert order and its gather (about 11 launches);
- swiglu_fp8 (`dsv4_kernels.swiglu_fp8`): the shared expert between its projections: two casts to fp32, SiLU,
  the product, the cast back and the down-projection's FP8 fake quant (6 launches). (Its input's FP8 simulation,
  once for w1 and w3 since this op came, is not switched: `unfuse` leaves it shared.);
- hadamard_fp4 (`dsv4_kernels.hadamard_fp4`): the indexer's rotation of q and of each entry: the cast to fp32, the
  GEMM with the Hadamard matrix, the scale, the cast back and the FP4 fake quant (5 launches, twice per CSA layer);
- attend_ring (`dsv4_kernels.attention`, the core on the window ring): the window's gather into the official order,
  the concatenations of keys and of masks, the one-list core and the cast of o to bf16 (5 launches a CSA or HCA
  layer, 4 a window-only one);
- score (`dsv4_kernels.indexer`, the scores with the head weights' scale in the launch): the scale as the indexer made
  it before (a cast to fp32, the product, the cast back: 3 launches a CSA layer) and the scores.
Parity: fresh inputs, outputs poisoned (freed memory filled with NaN first), the Flash shapes at each batch and odd
shapes: bit for bit against the chain where the kernel is built to be (BITWISE: norm_rope_fp8, fp8_nope, pool,
swiglu_fp8), the route's picks equal and its weights within ULPS ulps, else the share of equal elements (held to
EQUAL_SHARE for hadamard_fp4) and the largest difference;
each fused op twice on the same inputs (deterministic). A/B: each op
captured CALLS times in a CUDA graph, the graph replayed; microseconds per call, fused against the chain.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading

import torch

from graph_timing import graph_us

CALLS = 20            # calls of one op per captured graph (the A/B)


def unfused_ops(device) -> dict:
    """The chains of launches the fused ops replaced, keyed by decode slot, each link the kernel `select` gives on
    `device` (the references on CPU)."""
    from dsv4_kernels import select
    from dsv4_kernels.rms_norm.reference import head_rms_ref
    rms, rope, fp8 = select("rms_norm", device), select("rope_tail", device), select("fp8_fake_quant", device)
    pre, sink = select("mhc_pre", device), select("sinkhorn", device)
    from dsv4_kernels.compressor_pool.reference import pool_rows_ref
    from dsv4_kernels.compressor_ring.reference import close_block_ref, ring_write_ref
    reduce = select("compressor_reduce", device)

    def pool(kv, gate, ape, m, overlap):
        return reduce(*pool_rows_ref(kv, gate, ape, m, overlap))

    def q_norm_rope(x, cs, eps, rd):
        return rope(head_rms_ref(x, eps), cs, rd)

    def fp8_nope(x, rd, block):
        return torch.cat([fp8(x[..., :-rd], block), x[..., -rd:]], -1)

    def norm_rope_fp8(x, weight, eps, cs, rd, dtype=None, block=0):
        y = rope(rms(x if dtype is None else x.to(dtype), weight, eps), cs, rd)
        return fp8_nope(y, rd, block) if block else y

    def mhc_pre_norm(X, mix, scale, base, eps, norm_eps, iters, weight, rms_eps):
        x, post, logits = pre(X, mix, scale, base, eps, norm_eps)
        return rms(x, weight, rms_eps), post, sink(logits, iters, eps)

    from dsv4_kernels.fused_swiglu.reference import swiglu_ref
    from dsv4_kernels.moe_route.reference import moe_route_ref

    def swiglu_fp8(gate, up, limit, block):
        return fp8(swiglu_ref(gate, up, limit).to(gate.dtype), block)

    from dsv4_kernels.hadamard_fp4.reference import hadamard_ref
    fp4 = select("fp4_fake_quant", device)

    def hadamard_fp4(x, hadamard, block=32):
        return fp4(hadamard_ref(x, hadamard), block)

    from dsv4_kernels.attention.reference import attention_ring_ref
    core = select("decode_attention", device)

    def attend_ring(q, window, order, win_valid, comp, comp_valid, sink, scale):
        return attention_ring_ref(q, window, order, win_valid, comp, comp_valid, sink, scale, core=core)

    scores = select("index_scores", device)

    def score(q, k, w, scale=None):
        return scores(q, k, w if scale is None else (w.float() * scale).to(w.dtype))

    return {"score": score, "q_norm_rope": q_norm_rope, "mhc_pre_norm": mhc_pre_norm, "norm_rope_fp8": norm_rope_fp8,
            "fp8_nope": fp8_nope, "ring_write": ring_write_ref, "close_block": close_block_ref, "pool": pool,
            "route": moe_route_ref, "swiglu_fp8": swiglu_fp8, "hadamard_fp4": hadamard_fp4, "attend_ring": attend_ring}


# the decode slots of the fused ops (`unfused_ops` gives each one's chain)
FUSED_SLOTS = ("q_norm_rope", "mhc_pre_norm", "norm_rope_fp8", "fp8_nope", "ring_write", "close_block", "pool", "route",
               "swiglu_fp8", "hadamard_fp4", "attend_ring", "score")


def fused_ops(device) -> dict:
    """The fused ops as the decode selects them on `device`."""
    from dsv4_model.decode import small_kernels
    small = small_kernels(torch.device(device))
    return {k: small[k] for k in FUSED_SLOTS}


def unfuse(model, only: list[str] | None = None) -> None:
    """Put the chains back on a model whose kernels `GraphSafeDecoder` set (call after building the decoder, before
    capturing): the decode as it ran before the fused ops; `only`: just these slots' (keys of `unfused_ops`)."""
    from dsv4_model.attention import Attention
    from dsv4_model.compressor import Compressor
    from dsv4_model.indexer import Indexer
    from dsv4_model.mhc import HyperConnection
    from dsv4_model.moe import Expert, Gate
    ops = unfused_ops(model.embed.weight.device)
    unknown = set(only or ()) - set(ops)
    if unknown:
        raise ValueError(f"unfuse: no fused op {sorted(unknown)}; expected some of {sorted(ops)}")
    swaps = {Attention: {"q_norm_rope": "q_norm_rope", "norm_rope": "norm_rope_fp8", "fp8_nope": "fp8_nope",
                         "ring_core": "attend_ring"},
             Compressor: {"norm_rope": "norm_rope_fp8", "ring_write": "ring_write", "close_block": "close_block",
                          "pool_reduce": "pool"},
             HyperConnection: {"pre_norm": "mhc_pre_norm"}, Gate: {"route": "route"},
             Expert: {"swiglu_fp8": "swiglu_fp8"}, Indexer: {"hadamard_fp4": "hadamard_fp4", "score": "score"}}
    for m in model.modules():
        for kind, attrs in swaps.items():
            if isinstance(m, kind):
                for attr, slot in attrs.items():
                    if only is None or slot in only:
                        setattr(m, attr, ops[slot])


def _table(g, *lead, rd, dev):
    ang = torch.rand(*lead, rd // 2, generator=g) * 200
    return torch.stack([ang.cos(), ang.sin()], -1).to(dev)


def _sylvester(d: int, dev) -> torch.Tensor:
    from dsv4_model.indexer import hadamard_matrix
    return hadamard_matrix(d).to(dev)


def _hash_table(g, dev, vocab=1000, experts=256, k=6):
    """A hash layer's tid2eid [vocab, k]: distinct experts per token, as the release's."""
    return torch.stack([torch.randperm(experts, generator=g)[:k] for _ in range(vocab)]).to(dev)


def _ring_args(B, H, D, W, M, r, g, dev):
    """The core on the ring's arguments: q, a ring read from a per-row rotation, M compressed keys (a view of a longer
    buffer, as the entries), masks with a quarter of each off, a sink and the scale."""
    order = ((torch.randint(0, W, (B, 1), generator=g) + torch.arange(W)) % W).to(dev)
    comp = None if M is None else r(B, M + 3, D)[:, :M]
    cv = None if M is None else (torch.rand(B, M, generator=g) > 0.25).to(dev)
    return (r(B, 1, H, D), r(B, W, D), order, (torch.rand(B, W, generator=g) > 0.25).to(dev), comp, cv,
            torch.randn(H, generator=g).to(dev), D ** -0.5)


def cases(B: int, dev: str, g: torch.Generator, odd: bool = False) -> list[tuple[str, str, tuple]]:
    """(label, slot, args) at Flash's shapes for B rows (bf16 streams on CUDA, fp32 on CPU); `odd`: shapes off the
    powers of two (the tiny preset's head dim, a 3-stream mHC, a 40-wide row)."""
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    r = lambda *s, scale=2.0: (torch.randn(*s, generator=g) * scale).to(dev, dt)          # noqa: E731
    f = lambda *s: torch.randn(*s, generator=g).to(dev)                                   # noqa: E731
    w = lambda d: (torch.rand(d, generator=g) + 0.5).to(dev)                             # noqa: E731
    if odd:
        X = r(B, 1, 3, 1000)
        return [(f"q {B}x1x3x40/8", "q_norm_rope", (r(B, 1, 3, 40), _table(g, B, 1, 1, rd=8, dev=dev), 1e-6, 8)),
                (f"mhc {B}x3x1000", "mhc_pre_norm", (X, X.flatten(-2).float() @ (f(15, 3000) * 0.02).T,
                                                      w(3), f(15), 1e-6, 1e-6, 20, w(1000), 1e-6)),
                (f"kv {B}x1x128/64", "norm_rope_fp8", (r(B, 1, 128), w(128), 1e-6, _table(g, B, 1, rd=64, dev=dev),
                                                        64, None, 64)),
                (f"kv {B}x96/32 b16", "norm_rope_fp8", (r(B, 96), w(96), 1e-6, _table(g, B, rd=32, dev=dev), 32, None,
                                                         16)),
                (f"nope {B}x1x520/8", "fp8_nope", (r(B, 1, 520), 8, 128)),
                (f"pool CSA {B}x8x80", "pool", (f(B, 8, 80), f(B, 8, 80) * 3, f(4, 80), 4, True)),
                (f"route {B}x72/8 sigmoid", "route", (f(B, 72) * 3, 8, 2.5, "sigmoid", f(72) * 0.3)),
                (f"swiglu {B}x1x96 L10", "swiglu_fp8", (r(B, 1, 96, scale=8.0), r(B, 1, 96, scale=8.0), 10.0, 96)),
                (f"rotate {B}x1x2x64", "hadamard_fp4", (r(B, 1, 2, 64), _sylvester(64, dev), 32)),
                (f"attend {B}x2x128 16+40", "attend_ring", _ring_args(B, 2, 128, 16, 40, r, g, dev)),
                (f"attend {B}x3x96 20", "attend_ring", _ring_args(B, 3, 96, 20, None, r, g, dev)),
                (f"score {B}x2x64 40", "score", (r(B, 1, 2, 64), r(B, 40, 64), r(B, 1, 2), 0.09))]
    X = r(B, 1, 4, 4096)
    return [(f"q {B}x1x64x512", "q_norm_rope", (r(B, 1, 64, 512), _table(g, B, 1, 1, rd=64, dev=dev), 1e-6, 64)),
            (f"mhc {B}x4x4096", "mhc_pre_norm", (X, X.flatten(-2).float() @ (f(24, 16384) * 0.01).T, w(3), f(24),
                                                  1e-6, 1e-6, 20, w(4096), 1e-6)),
            (f"kv {B}x1x512", "norm_rope_fp8", (r(B, 1, 512), w(512), 1e-6, _table(g, B, 1, rd=64, dev=dev), 64, None,
                                                 64)),
            (f"entry {B}x512", "norm_rope_fp8", (f(B, 512) * 2, w(512), 1e-6, _table(g, B, rd=64, dev=dev), 64, dt, 0)),
            (f"nope {B}x1x512", "fp8_nope", (r(B, 1, 512), 64, 64)),
            (f"pool CSA {B}x8x1024", "pool", (f(B, 8, 1024), f(B, 8, 1024) * 3, f(4, 1024), 4, True)),
            (f"pool HCA {B}x128x512", "pool", (f(B, 128, 512), f(B, 128, 512) * 3, f(128, 512), 128, False)),
            (f"route {B}x256/6", "route", (f(B, 256) * 3, 6, 1.5, "sqrtsoftplus", f(256) * 0.3)),
            (f"route hash {B}x256/6", "route", (f(B, 256) * 3, 6, 1.5, "sqrtsoftplus", None, _hash_table(g, dev),
                                                 torch.randint(0, 1000, (B,), generator=g).to(dev))),
            (f"swiglu {B}x1x2048", "swiglu_fp8", (r(B, 1, 2048, scale=4.0), r(B, 1, 2048, scale=4.0), None, 128)),
            (f"rotate q {B}x1x64x128", "hadamard_fp4", (r(B, 1, 64, 128), _sylvester(128, dev), 32)),
            (f"rotate entry {B}x128", "hadamard_fp4", (r(B, 128), _sylvester(128, dev), 32)),
            (f"attend CSA {B}x64x512", "attend_ring", _ring_args(B, 64, 512, 128, 512, r, g, dev)),
            (f"attend HCA {B}x64x512", "attend_ring", _ring_args(B, 64, 512, 128, 64, r, g, dev)),
            (f"score {B}x64x128 1024", "score", (r(B, 1, 64, 128), r(B, 1024, 128), r(B, 1, 64), 128 ** -0.5 / 8))]


# built to give the chain's bits (the same steps at the same rounding points); the others are within a rounding
BITWISE = {"norm_rope_fp8", "fp8_nope", "pool", "swiglu_fp8", "attend_ring", "score"}
# the picks equal, the weights within ULPS fp32 ulps: the route's renormalising sum runs in another order than torch's
# CUDA row sum (run 55: 1-2 ulps)
ULPS = {"route": 4}
# quantised after another order of sums: a rounding apart moves an FP4 code by a whole step (up to a third of its
# block's largest value), so these are held to the share of elements equal to the chain's instead
EQUAL_SHARE = {"hadamard_fp4": 0.99}


def _within_ulps(got, want, ulps: int) -> bool:
    """Integer outputs (the picks) equal, floating ones within `ulps` units in the last place of the chain's."""
    return all(torch.equal(a, b) if not b.is_floating_point() else
               bool(((a - b).abs() <= ulps * torch.finfo(b.dtype).eps * b.abs()).all()) for a, b in zip(got, want))


def _outs(y):
    return y if isinstance(y, tuple) else (y,)


def _poison(dev: str, nbytes: int = 64 << 20) -> None:
    if dev == "cuda":
        junk = torch.full((nbytes // 4,), float("nan"), device=dev)
        del junk


def parity(batches: list[int], dev: str) -> int:
    """One line per case; returns the number of failures (a bitwise op that is not, non-finite output, a
    non-deterministic op, a difference past one bf16 step on a normalised output)."""
    fused, chain = fused_ops(dev), unfused_ops(dev)
    g = torch.Generator().manual_seed(37)
    bad = 0
    print(f"{'case':22} {'op':14} {'bits = chain':>12} {'equal share':>11} {'max |diff|':>11} {'det':>4} {'finite':>6}")
    for B in batches:
        for odd in (False, True):
            for label, slot, args in cases(B, dev, g, odd):
                _poison(dev)
                got = _outs(fused[slot](*args))
                again = _outs(fused[slot](*args))
                want = _outs(chain[slot](*args))
                same = all(torch.equal(a, b) for a, b in zip(got, want))
                share = min((a == b).float().mean().item() for a, b in zip(got, want))
                diff = max((a.float() - b.float()).abs().max().item() for a, b in zip(got, want))
                det = all(torch.equal(a, b) for a, b in zip(got, again))
                finite = all(torch.isfinite(a.float()).all().item() for a in got)
                # a normalised stream moves by at most a bf16 step (plus an e4m3 step where quantised): 0.07 of
                # its largest value is past any one rounding
                scale = max(b.float().abs().max().item() for b in want)
                ok = det and finite and (same if slot in BITWISE else share >= EQUAL_SHARE[slot] if slot in EQUAL_SHARE
                                         else _within_ulps(got, want, ULPS[slot]) if slot in ULPS
                                         else diff <= 0.07 * max(scale, 1e-30))
                bad += not ok
                print(f"{label:22} {slot:14} {str(same):>12} {share:11.6f} {diff:11.3e} {str(det):>4} {str(finite):>6}"
                      f"{'' if ok else '  FAIL'}", flush=True)
    return bad


def ab(batches: list[int], dev: str, reps: int) -> None:
    fused, chain = fused_ops(dev), unfused_ops(dev)
    g = torch.Generator().manual_seed(38)
    print(f"{'case':22} {'op':14} {'chain us':>9} {'fused us':>9} {'speedup':>8}")
    for B in batches:
        for label, slot, args in cases(B, dev, g):
            with torch.inference_mode():
                t_chain = graph_us(lambda: chain[slot](*args), CALLS, reps)
                t_fused = graph_us(lambda: fused[slot](*args), CALLS, reps)
            print(f"{label:22} {slot:14} {t_chain:9.2f} {t_fused:9.2f} {t_chain / t_fused:8.2f}", flush=True)


def ring_state(B: int, overlap: bool, dev: str, g: torch.Generator):
    """A Flash compressor's decode state for B rows (CSA: 2 x 4 slots of 1024; HCA: 128 slots of 512; 1025 entries)
    and one step's writes (half the rows closing)."""
    m, D = (4, 512) if overlap else (128, 512)
    S, W = (2 * m, 2 * D) if overlap else (m, D)
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    st = [torch.randn(B, S, W, generator=g).to(dev), torch.randn(B, S, W, generator=g).to(dev),
          torch.randn(B, 1025, D, generator=g).to(dev, dt)]
    step = (torch.randn(B, W, generator=g).to(dev), torch.randn(B, W, generator=g).to(dev),
            torch.randint(m if overlap else 0, S, (B,), generator=g).to(dev), torch.randint(0, 1025, (B,), generator=g).to(dev),
            (torch.arange(B)[:, None] % 2 == 0).to(dev), torch.randn(B, D, generator=g).to(dev, dt))
    return m, st, step


def ring(batches: list[int], dev: str, reps: int) -> int:
    """The compressor's state writes (ring write + block close), fused against the torch ops they replaced: the
    state after one step bit for bit, then the A/B. Returns the failures."""
    fused, chain = fused_ops(dev), unfused_ops(dev)
    g = torch.Generator().manual_seed(39)
    bad = 0
    print(f"{'case':22} {'bits = chain':>12} {'chain us':>9} {'fused us':>9} {'speedup':>8}")
    for B in batches:
        for overlap in (True, False):
            m, st, (C, Z, slot, b, closes, c) = ring_state(B, overlap, dev, g)
            rows = torch.arange(B, device=dev)
            runs = {}
            for name, ops in (("fused", fused), ("chain", chain)):
                s = [t.clone() for t in st]

                def step(s=s, ops=ops):
                    ops["ring_write"](s[0], s[1], C, Z, rows, slot)
                    ops["close_block"](s[2], rows, b, closes, c, s[0], s[1], m, overlap)
                step()
                runs[name] = ([t.clone() for t in s], step)
            same = all(torch.equal(x, y) for x, y in zip(runs["fused"][0], runs["chain"][0]))
            bad += not same
            with torch.inference_mode():
                t_chain, t_fused = graph_us(runs["chain"][1], CALLS, reps), graph_us(runs["fused"][1], CALLS, reps)
            label = f"{'CSA' if overlap else 'HCA'} ring {B} rows"
            print(f"{label:22} {str(same):>12} {t_chain:9.2f} {t_fused:9.2f} {t_chain / t_fused:8.2f}"
                  f"{'' if same else '  FAIL'}", flush=True)
    return bad


# a value may be negative: on a loaded CPU the deeper model can time faster than the shallower one (--steps 1), and a
# row the pattern skipped left the side-by-side table empty (CI, 2026-12-07)
NUM = r"(-?[0-9.]+|nan)"
ROW = re.compile(r"^\s*(\d+)" + (r"\s+" + NUM) * 6 + r"\s")


def depth(args: list[str], timeout: float, unfused: str = "all") -> None:
    """benchmarks/decode.py's per-layer measure with the fused ops on, then off (`--unfused`: all, or the slots in
    `unfused`), each in its own process; their tables side by side."""
    here = os.path.dirname(os.path.abspath(__file__))
    rows = {}
    for name, extra in (("fused", []), ("unfused", ["--unfused", unfused])):
        cmd = [sys.executable, os.path.join(here, "decode.py"), *args, *extra]
        print(f"$ {' '.join(cmd[1:])}", flush=True)
        # streamed as it comes (a call cut off by its time limit keeps what was measured), kept for the table
        lines = []
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
            watchdog = threading.Timer(timeout, proc.kill)
            watchdog.start()
            for line in proc.stdout:
                print(line, end="", flush=True)
                lines.append(line)
            rc = proc.wait()
            rc = rc if watchdog.is_alive() else f"{rc} (killed after {timeout:.0f} s)"
            watchdog.cancel()
        text = "".join(lines)
        print(f"exit {rc}", flush=True)
        # B, ms@lo, ms@hi, layer ms, floor ms, x floor, kernels per layer
        rows[name] = {int(m.group(1)): m.groups()[1:] for m in map(ROW.match, text.splitlines()) if m}
    print(f"{'B':>3} {'layer ms fused':>14} {'unfused':>8} {'x floor fused':>13} {'unfused':>8} "
          f"{'kernels per layer fused':>23} {'unfused':>8}")
    for b in sorted(set(rows["fused"]) & set(rows["unfused"])):
        on, off = rows["fused"][b], rows["unfused"][b]
        print(f"{b:>3} {on[2]:>14} {off[2]:>8} {on[4]:>13} {off[4]:>8} {on[5]:>19} {off[5]:>8}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--reps", type=int, default=50, help="graph replays per A/B timing")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--depth", action="store_true", help="also decode.py --depths 2,8 with the fused ops on and off")
    ap.add_argument("--depth-only", action="store_true", help="only the decode.py runs (no parity, no A/B)")
    ap.add_argument("--depth-args", default="--configs flash --depths 2,8 --batches 1,8 --steps 30 --experts 64",
                    help="decode.py's options for --depth")
    ap.add_argument("--depth-timeout", type=float, default=240, help="seconds for each decode.py run")
    ap.add_argument("--depth-unfused", default="all", metavar="SLOT,..",
                    help="the fused ops the unfused run replaces: all, or these slots (e.g. attend_ring)")
    a = ap.parse_args(argv)
    unknown = set(a.depth_unfused.split(",")) - set(FUSED_SLOTS) if a.depth_unfused != "all" else set()
    if unknown:
        print(f"benchmarks/fuse_ab.py: --depth-unfused {a.depth_unfused!r}: no fused op {sorted(unknown)}; expected "
              f"'all' or some of {', '.join(FUSED_SLOTS)}", file=sys.stderr)
        return 2
    if a.device == "cuda" and not torch.cuda.is_available() and not a.depth_only:
        print("benchmarks/fuse_ab.py: --device cuda and no CUDA GPU (--device cpu runs the references: a crash test)",
              file=sys.stderr)
        return 2
    batches = [int(b) for b in a.batches.split(",")]
    name = torch.cuda.get_device_name() if a.device == "cuda" else "CPU (the references; times mean nothing)"
    print(f"{name}, torch {torch.__version__}", flush=True)
    bad = 0
    if not a.depth_only:
        print("== parity: fused against the chain it replaced", flush=True)
        bad = parity(batches, a.device)
        print(f"== A/B: microseconds per call, {CALLS} calls per CUDA graph, {a.reps} replays", flush=True)
        ab(batches, a.device, a.reps)
        print("== the compressor's state writes: parity (one step's state) and A/B", flush=True)
        bad += ring(batches, a.device, a.reps)
    if a.depth or a.depth_only:
        print("== per layer, fused ops on and off", flush=True)
        depth(a.depth_args.split(), a.depth_timeout, a.depth_unfused)
    print(f"parity failures: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
