"""Row invariance of the decode's products (issue 41's batched verify): does a row get the same bits at the plain
step's row count and at the batched verify's?

    python benchmarks/row_invariance.py --products                     # the CPU formulations over M in 1..40
    python benchmarks/row_invariance.py --device cuda --configs tiny,flash --batches 1,2,4,8 --k 2

`--products`: F.linear, `x @ W.T`, matmul of [M,1,K] rows, einsum, `bmm(W[e], x)` and rowwise.py's per-row bmm, in
fp32 and bf16, each row against the same row computed alone, at 1, 2 and 4 threads (what rowwise.py's docstring
cites).

The decode probe: a GraphSafeDecoder over the model with the row-invariant table (`kernels=True, rowwise=True`:
on CUDA the decode kernels, whose row invariance is the open question), state filled with random values and rows
at staggered positions; the main model over k+1 positions per row, first position by position (`hidden`, the
plain step: n rows per product), then from the same state in one forward (`hidden_positions`, the batched
verify: n*(k+1) rows). Each module output (every Linear: the stored-format GEMV / dense products; RMSNorm; the
router; the shared expert; the LM head), each layer's attention and MoE output and each block's output is compared
row for row; the first differing ones are printed with their largest difference. "all equal" for a (config, batch)
means the batched verify gives the plain step's bits there; otherwise the first line names the product to fix.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def products() -> int:
    import torch.nn.functional as F

    from dsv4_model.rowwise import rows_linear
    forms = {
        "F.linear": lambda x, W: F.linear(x, W),
        "x @ W.T": lambda x, W: x @ W.T,
        "matmul [M,1,K] @ W.T": lambda x, W: (x.unsqueeze(1) @ W.T).squeeze(1),
        "einsum mk,nk->mn": lambda x, W: torch.einsum("mk,nk->mn", x, W),
        "bmm(W expanded, x [M,K,1])": lambda x, W: torch.bmm(W.expand(x.shape[0], -1, -1), x.unsqueeze(-1)).squeeze(-1),
        "bmm(x [M,1,K], W^T expanded)": lambda x, W: torch.bmm(x.unsqueeze(1), W.T.expand(x.shape[0], -1, -1)).squeeze(1),
        "rowwise.rows_linear": rows_linear,
    }
    shapes = [(64, 128), (128, 128), (128, 64), (128, 512), (512, 128), (256, 320), (128, 1024), (64, 8), (128, 24),
              (2048, 128), (128, 2048), (64, 48), (128, 32)]
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}")
    g = torch.Generator().manual_seed(0)
    for threads in (1, 2, 4):
        torch.set_num_threads(threads)
        for dtype in (torch.float32, torch.bfloat16):
            for name, f in forms.items():
                bad = None
                for K, N in shapes:
                    W, X = torch.randn(N, K, generator=g).to(dtype), torch.randn(40, K, generator=g).to(dtype)
                    alone = torch.cat([f(X[i:i + 1], W) for i in range(40)])
                    bad = next(((K, N, M) for M in range(2, 41) if not torch.equal(f(X[:M], W), alone[:M])), None)
                    if bad:
                        break
                verdict = "row-invariant" if bad is None else f"NOT (first: K={bad[0]} N={bad[1]} M={bad[2]})"
                print(f"threads {threads} {str(dtype)[6:]:9} {name:30} {verdict}", flush=True)
    return 0


def _model(cfg: str, device: str):
    import dsv4_model
    from dsv4_model.precision import COMPONENTS
    from dsv4_model.synthetic import flash_layers
    if cfg == "tiny":
        return dsv4_model.load("tiny", device=device, max_seq_len=512)
    if cfg == "tiny-fp32":          # the CPU tests' model: fp32, weights dequantised at load, no activation simulation
        model = dsv4_model.load("tiny", device=device, max_seq_len=512, precision=[f"{c}=plain" for c in COMPONENTS],
                                dtype=torch.float32)
        model.set_simulation(False)
        return model
    return flash_layers(device=device, n_layers=3, max_seq_len=1024)


def probe(model, n: int, k: int, device: str, rowwise: bool = True) -> list[str]:
    """The modules and stages whose rows differ between the plain step's products and the batched verify's, in call
    order, with the largest difference (empty: bit for bit equal)."""
    import dsv4_model.decode as decode
    from dsv4_model.decode import GraphSafeDecoder
    dec = GraphSafeDecoder(model, n, kernels=device == "cuda", rowwise=rowwise)
    T = k + 1
    g = torch.Generator().manual_seed(5)
    for buf in dec.state().values():
        if buf.is_floating_point():
            buf.copy_(torch.randn(buf.shape, generator=g).to(buf.dtype))
    pos = torch.tensor([23 + 17 * r for r in range(n)], device=device)
    tok = torch.randint(16, model.args.vocab_size, (n, T), generator=g).to(device)
    start = {name: v.clone() for name, v in dec.state().items()}
    rec: dict[str, list[torch.Tensor]] = {}

    def keep(name, out):
        if isinstance(out, tuple):
            out = out[0]
        if isinstance(out, torch.Tensor) and out.dim() >= 2:
            rec.setdefault(name, []).append(out.detach().clone())
    hooks = [m.register_forward_hook(lambda mod, i, o, name=name: keep(name, o)) for name, m in model.named_modules()
             if name]
    # the stages: a layer's attention and MoE outputs, and its block's (block_step in the plain step,
    # block_positions in the verify: one label)
    stages = {"attention_positions": "attention", "moe_step": "moe", "block_step": "block", "block_positions": "block"}
    originals = {f: getattr(decode, f) for f in stages}

    def wrap(f):
        def run(blk_or_attn, *a, **kw):
            out = originals[f](blk_or_attn, *a, **kw)
            keep(f"{stages[f]}[{id(blk_or_attn)}]", out)
            return out
        return run
    names = {id(m): name for name, m in model.named_modules()}
    try:
        for f in originals:             # instrumentation of this script's run only, undone below
            setattr(decode, f, wrap(f))
        plain = [model.logits(dec.hidden(tok[:, j], pos + j)) for j in range(T)]
        per_position, rec = rec, {}
        for name, v in dec.state().items():
            v.copy_(start[name])
        batched = model.logits(dec.hidden_positions(tok, pos))
        together = rec
    finally:
        for f, fn in originals.items():
            setattr(decode, f, fn)
        for h in hooks:
            h.remove()
    diffs = []
    for name, outs in together.items():
        alone = per_position.get(name, [])
        if not outs or len(alone) != T * len(outs):
            continue
        for c, out in enumerate(outs):
            for j in range(T):
                a = alone[j * len(outs) + c]
                b = out.view(n, T, *out.shape[1:])[:, j] if out.shape[0] == n * T else out[:, j]
                a = a.reshape(b.shape)
                if not torch.equal(a, b):
                    label = name
                    if "[" in name:
                        f, i = name.rstrip("]").split("[")
                        label = f"{f}({names.get(int(i), '?')})"
                    diffs.append(f"{label} (call {c}, position {j}): max |diff| "
                                 f"{float((a.float() - b.float()).abs().max()):.3g}")
                    break
    if not all(torch.equal(plain[j][:, -1], batched[:, j]) for j in range(T)):
        diffs.append("logits differ")
    return diffs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--products", action="store_true", help="the CPU formulations' table (no model)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--configs", default="tiny,flash", help="tiny, tiny-fp32 (the CPU tests' model), flash")
    ap.add_argument("--official", action="store_true", help="the table without rowwise.py's products (what they fix)")
    ap.add_argument("--batches", default="1,2,4,8")
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--show", type=int, default=8, help="differing stages printed per row (the first is the cause)")
    a = ap.parse_args(argv)
    if a.products:
        return products()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("benchmarks/row_invariance.py: --device cuda and no CUDA GPU", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name() if a.device == "cuda" else f"CPU ({torch.backends.cpu.get_cpu_capability()})"
    print(f"{name}, torch {torch.__version__}; plain step (n rows) vs batched verify (n*(k+1) rows), k = {a.k}")
    worst = 0
    with torch.inference_mode():
        for cfg in a.configs.split(","):
            model = _model(cfg, a.device)
            for n in (int(b) for b in a.batches.split(",")):
                diffs = probe(model, n, a.k, a.device, not a.official)
                print(f"{cfg:6} n={n}: {'all equal' if not diffs else f'{len(diffs)} differing stage(s)'}")
                for line in diffs[:a.show]:
                    print(f"    {line}")
                worst = max(worst, len(diffs))
            del model
    return 1 if worst else 0


if __name__ == "__main__":
    sys.exit(main())
