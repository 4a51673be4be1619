"""python -m dsv4_model generate|score: the model's command line."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", default="tiny", help="checkpoint directory, or 'tiny' (embedded default)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=DTYPES, default="fp32")
    p.add_argument("--precision", action="append", default=[], metavar="POLICY|COMPONENT=FORMAT",
                   help="precision policy (faithful: as stored, the default; floor) and/or per-component formats "
                        "(stored|plain|bf16|fp8|mxfp4|nvfp4), e.g. routed_experts=nvfp4 (repeatable)")
    p.add_argument("--max-seq-len", type=int, default=None, help="cache capacity (default: the config's 4096)")
    p.add_argument("--no-sim", action="store_true", help="switch the FP8/FP4 activation simulations off")


def _model(a):
    import dsv4_model
    m = dsv4_model.load(a.checkpoint, device=a.device, dtype=DTYPES[a.dtype], precision=a.precision,
                        max_seq_len=a.max_seq_len)
    if a.no_sim:
        m.set_simulation(False)
    return m


def cmd_generate(a) -> int:
    from .encoding import encode_messages
    from .generate import generate_batch
    from .tokenizer import ByteTokenizer
    root = __import__("dsv4_model").resolve_checkpoint(a.checkpoint)
    tok = ByteTokenizer.load(root / "tokenizer.json")
    model = _model(a)
    sys_msg = [{"role": "system", "content": a.system}] if a.system else []
    prompts = [tok.encode(encode_messages(sys_msg + [{"role": "user", "content": p}], a.mode,
                                          reasoning_effort=a.reasoning_effort)) for p in a.prompt]
    outs: list[list[int]] = [[] for _ in prompts]
    shown = [""] * len(prompts)

    def stream(row: int, t: int) -> None:          # one prompt streams live; several are printed at the end
        outs[row].append(t)
        text = tok.decode(outs[row])
        if len(prompts) == 1 and not text.endswith("\ufffd"):   # wait for the rest of a multi-byte character
            sys.stdout.write(text[len(shown[0]):])
            sys.stdout.flush()
            shown[0] = text
    if a.no_graph:
        print("dsv4_model: --no-graph: running the graph-safe step eagerly", file=sys.stderr)
    generate_batch(model, prompts, max_new_tokens=a.max_new_tokens, temperature=a.temperature, top_k=a.top_k,
                   top_p=a.top_p, repetition_penalty=a.repetition_penalty, seed=a.seed, eos_id=tok.eos_id,
                   graphs=not a.no_graph, check=a.check, on_token=stream, kernels=not a.no_kernels)
    for i, (p, o) in enumerate(zip(prompts, outs)):
        if len(prompts) == 1:
            sys.stdout.write(tok.decode(o)[len(shown[0]):] + "\n")
        else:
            print(f"[{i}] {tok.decode(o)}")
        print(f"[{i}: {len(p)} prompt tokens, {len(o)} generated]", file=sys.stderr)
    return 0


def _check_out(out: Path, checkpoint: Path) -> None:
    """--out must be a new or replaceable file in an existing folder, and never a file of the checkpoint."""
    if out.is_dir():
        raise ValueError(f"--out {out}: is a directory; expected a file path")
    if not out.parent.is_dir():
        raise ValueError(f"--out {out}: folder {out.parent} does not exist")
    target = out.resolve()
    ck = checkpoint.resolve()
    if target == ck or ck in target.parents:
        raise ValueError(f"--out {out}: inside the checkpoint directory {checkpoint}; refusing to write over its files")


def cmd_score(a) -> int:
    try:
        tokens = [int(t) for t in a.tokens.split(",") if t.strip()]
    except ValueError:
        raise ValueError(f"--tokens must be comma-separated integers, found {a.tokens!r}") from None
    if not tokens:
        raise ValueError(f"--tokens is empty ({a.tokens!r}); give at least one token id")
    out = Path(a.out)
    _check_out(out, __import__("dsv4_model").resolve_checkpoint(a.checkpoint))
    model = _model(a)
    bad = [t for t in tokens if not 0 <= t < model.args.vocab_size]
    if bad:
        raise ValueError(f"--tokens: token {bad[0]} outside the vocabulary [0, {model.args.vocab_size})")
    if len(tokens) > model.args.max_seq_len:
        raise ValueError(f"--tokens: {len(tokens)} tokens exceed the cache capacity max_seq_len={model.args.max_seq_len}")
    logits = model.score(tokens).cpu()
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
    os.close(fd)
    try:
        torch.save(logits, tmp)
        os.replace(tmp, out)                              # atomic: a partial file never replaces a good one
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    print(f"wrote {out}: logits {tuple(logits.shape)} fp32")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dsv4_model", description="DeepSeek-V4 reference decode")
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="encode a chat prompt and stream generated text")
    _common(g)
    g.add_argument("--prompt", required=True, action="append", help="a user message (repeat for several at once, up to 8)")
    g.add_argument("--system", default="")
    g.add_argument("--mode", choices=("chat", "thinking"), default="chat")
    g.add_argument("--reasoning-effort", choices=("high", "max"), default=None)
    g.add_argument("--max-new-tokens", type=int, default=32)
    g.add_argument("--temperature", type=float, default=1.0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--repetition-penalty", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--no-graph", action="store_true", help="run the graph-safe step eagerly (no CUDA graphs)")
    g.add_argument("--no-kernels", action="store_true",
                   help="the PyTorch references instead of the CUDA kernels (the GEMVs, experts, fake quants, norms, RoPE, mHC)")
    g.add_argument("--check", action="store_true",
                   help="before capturing a batch bucket, run graphcheck's capture-under-test on it and print the verdict")
    s = sub.add_parser("score", help="teacher-forced fp32 logits of a token sequence")
    _common(s)
    s.add_argument("--tokens", required=True, help="comma-separated token ids, e.g. 0,5,7")
    s.add_argument("--out", required=True, help="where to write the [T, vocab] logits (torch.save)")
    a = ap.parse_args(argv)
    try:
        return cmd_generate(a) if a.cmd == "generate" else cmd_score(a)
    except (ValueError, OSError) as e:                    # bad input, checkpoint and config errors: one line, exit 2
        print(f"dsv4_model: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
