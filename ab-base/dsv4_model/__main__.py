"""python -m dsv4_model generate|score: the model's command line."""
from __future__ import annotations

import argparse
import math
import os
import stat
import sys
import tempfile
from pathlib import Path

import torch

# bf16 activations are the official release's numerics (its generate.py sets bf16 as the default dtype); float32 is
# a debugging deviation (every activation between projections kept in fp32), not the released model's logits
DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "float32": torch.float32, "fp32": torch.float32}
MAX_SEQ_LEN = 1 << 20    # DSV4's context: the released config's max_position_embeddings (YaRN's 65536 x 16)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", default="tiny", help="checkpoint directory, or 'tiny' (embedded default)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=DTYPES, default="bf16",
                   help="activation dtype: bf16 (the official release's numerics, the default) or float32 (fp32, "
                        "a debugging deviation from them)")
    p.add_argument("--precision", action="append", default=[], metavar="POLICY|COMPONENT=FORMAT",
                   help="precision policy (faithful: as stored, the default; floor) and/or per-component formats "
                        "(stored|plain|bf16|fp8|mxfp4|nvfp4), e.g. routed_experts=nvfp4 (repeatable)")
    p.add_argument("--max-seq-len", type=int, default=None, help="cache capacity (default: the config's 4096)")
    p.add_argument("--no-sim", action="store_true", help="switch the FP8/FP4 activation simulations off")


def _check_flags(a) -> None:
    """Range-check the flags before anything loads (a NaN or an overflow otherwise surfaces deep in torch)."""
    checks = [("--max-seq-len", a.max_seq_len, a.max_seq_len is None or 1 <= a.max_seq_len <= MAX_SEQ_LEN,
               f"an integer in [1, {MAX_SEQ_LEN}] (the cache capacity)")]
    if a.cmd == "generate":
        checks += [
            ("--max-new-tokens", a.max_new_tokens, a.max_new_tokens >= 1, "an integer >= 1"),
            ("--temperature", a.temperature, math.isfinite(a.temperature) and a.temperature >= 0,
             "a finite number >= 0 (0 = greedy)"),
            ("--top-p", a.top_p, 0 < a.top_p <= 1, "a number in (0, 1]"),            # NaN fails the comparison
            ("--top-k", a.top_k, a.top_k >= 0, "an integer >= 0 (0 = off)"),
            ("--repetition-penalty", a.repetition_penalty,
             math.isfinite(a.repetition_penalty) and a.repetition_penalty > 0, "a finite number > 0 (1 = off)"),
            # the sampler hashes the seed's low 32 bits (dsv4_kernels.sampling.reference.mix32): larger seeds would
            # alias smaller ones
            ("--seed", a.seed, 0 <= a.seed < 1 << 32, "an integer in [0, 2**32)")]
    for flag, val, ok, want in checks:
        if not ok:
            raise ValueError(f"{flag}: expected {want}, found {val}")
    for flag, texts in (("--prompt", a.prompt), ("--system", [a.system])) if a.cmd == "generate" else ():
        for t in texts:
            try:
                t.encode("utf-8")
            except UnicodeEncodeError as e:   # argv bytes that are not UTF-8 arrive as surrogate escapes U+DC80..DCFF
                c = ord(t[e.start])
                what = f"byte 0x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else f"lone surrogate U+{c:04X}"
                raise ValueError(f"{flag}: not valid UTF-8: {what} at character {e.start}; expected UTF-8 text") from None


def _root(checkpoint: str) -> Path:
    from . import resolve_checkpoint
    from .tiny import cache_root
    try:
        return resolve_checkpoint(checkpoint)
    except (FileExistsError, NotADirectoryError):         # only 'tiny' creates folders: its cache path hits a file
        cache = cache_root()
        var = "DSV4_CACHE_DIR" if os.environ.get("DSV4_CACHE_DIR") else "the cache folder"
        bad = next((p for p in (cache, *cache.parents) if p.exists() and not p.is_dir()), cache)
        raise ValueError(f"{var} {cache}: must be a directory, found a file" + (f" at {bad}" if bad != cache else "")) from None


def _config(root: Path, max_seq_len: int | None):
    """The checkpoint's ModelArgs, read before the weights so config and input errors come first and cheaply."""
    from .config import load_args
    return load_args(root / "config.json", max_seq_len)


def _model(a, root: Path):
    import dsv4_model
    m = dsv4_model.load(root, device=a.device, dtype=DTYPES[a.dtype], precision=a.precision,
                        max_seq_len=a.max_seq_len)
    if a.no_sim:
        m.set_simulation(False)
    return m


_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7f, *range(0x80, 0xa0)] if c not in (0x09, 0x0a)}


def printable(text: str) -> str:
    """Generated text for a terminal: control characters (ESC sequences that move the cursor or retitle the
    window, a bell, a carriage return that hides what came before) shown escaped as \\xNN; tabs and newlines kept."""
    return text.translate(_CONTROL)


def cmd_generate(a) -> int:
    from .encoding import encode_messages
    from .generate import generate_batch
    from .tokenizer import ByteTokenizer
    root = _root(a.checkpoint)
    tok = ByteTokenizer.load(root / "tokenizer.json", _config(root, a.max_seq_len).vocab_size)
    model = _model(a, root)
    sys_msg = [{"role": "system", "content": a.system}] if a.system else []
    prompts = [tok.encode(encode_messages(sys_msg + [{"role": "user", "content": p}], a.mode,
                                          reasoning_effort=a.reasoning_effort)) for p in a.prompt]
    outs: list[list[int]] = [[] for _ in prompts]
    shown = [""] * len(prompts)

    def stream(row: int, t: int) -> None:          # one prompt streams live; several are printed at the end
        outs[row].append(t)
        text = tok.decode(outs[row])
        if len(prompts) == 1 and not text.endswith("\ufffd"):   # wait for the rest of a multi-byte character
            sys.stdout.write(printable(text[len(shown[0]):]))
            sys.stdout.flush()
            shown[0] = text
    if str(a.checkpoint) == "tiny":
        print("dsv4_model: the tiny checkpoint has random weights: its text is noise (it shows the decode runs, "
              "not what a trained model says)", file=sys.stderr)
    if a.no_graph:
        print("dsv4_model: --no-graph: running the graph-safe step eagerly", file=sys.stderr)
    generate_batch(model, prompts, max_new_tokens=a.max_new_tokens, temperature=a.temperature, top_k=a.top_k,
                   top_p=a.top_p, repetition_penalty=a.repetition_penalty, seed=a.seed, eos_id=tok.eos_id,
                   graphs=not a.no_graph, check=a.check, on_token=stream, kernels=not a.no_kernels)
    for i, (p, o) in enumerate(zip(prompts, outs)):
        if len(prompts) == 1:
            sys.stdout.write(printable(tok.decode(o)[len(shown[0]):]) + "\n")
        else:
            print(f"[{i}] {printable(tok.decode(o))}")
        print(f"[{i}: {len(p)} prompt tokens, {len(o)} generated]", file=sys.stderr)
    return 0


def _check_out(out: Path, checkpoint: Path) -> None:
    """--out must be a new or replaceable .pt file in a writable folder, and never a file of the checkpoint."""
    if out.is_dir():
        raise ValueError(f"--out {out}: is a directory; expected a file path")
    if not out.parent.is_dir():
        raise ValueError(f"--out {out}: folder {out.parent} does not exist")
    target = out.resolve()
    ck = checkpoint.resolve()
    if target == ck or ck in target.parents:
        raise ValueError(f"--out {out}: inside the checkpoint directory {checkpoint}; refusing to write over its files")
    if out.suffix != ".pt":                               # a typo must not replace a model file or a source file
        raise ValueError(f"--out {out}: expected a name ending in .pt (torch.save logits), found {out.suffix or 'no suffix'}")
    if out.exists():
        st = out.stat()
        if not stat.S_ISREG(st.st_mode):                  # a rename would swap a FIFO or a device for a file
            raise ValueError(f"--out {out}: expected a regular file, found a {_kind(st.st_mode)}")
        if not (st.st_mode & 0o222 and os.access(out, os.W_OK)):   # mode bits too: root's access() says yes
            raise ValueError(f"--out {out}: expected a writable file, found a read-only one (mode {stat.filemode(st.st_mode)})")
    if not os.access(out.parent, os.W_OK | os.X_OK):
        raise ValueError(f"--out {out}: expected a writable folder, found {out.parent} not writable")


def _kind(mode: int) -> str:
    return next((k for f, k in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"),
                                (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket")) if f(mode)), "special file")


def _save(obj, out: Path) -> None:
    """torch.save to `out` atomically: a partial file never replaces a good one. The file keeps the mode of the one
    it replaces, or gets the umask's for a new one (mkstemp's 0600 would hide the result from the group)."""
    if out.exists():
        mode = stat.S_IMODE(out.stat().st_mode)
    else:
        mode = os.umask(0)                                # the portable way to read the umask: set and restore
        os.umask(mode)
        mode = 0o666 & ~mode
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
        with os.fdopen(fd, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        os.replace(tmp, out)
        tmp = None
    except OSError as e:                                  # name --out, not the temporary file beside it
        raise OSError(f"--out {out}: cannot write it ({e.strerror or e}); expected a writable file in a writable folder") from None
    finally:                                              # Ctrl-C included: no stray temporary file
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def cmd_score(a) -> int:
    try:
        tokens = [int(t) for t in a.tokens.split(",") if t.strip()]
    except ValueError:
        raise ValueError(f"--tokens must be comma-separated integers, found {a.tokens!r}") from None
    if not tokens:
        raise ValueError(f"--tokens is empty ({a.tokens!r}); give at least one token id")
    # Path() drops a trailing slash or "/.": `--out x.pt/` and `--out x.pt/.` replaced the file x.pt
    if not a.out or a.out.endswith(("/", os.sep)) or os.path.basename(a.out) in (".", ".."):
        raise ValueError(f"--out {a.out!r}: expected a file path ending in .pt, found "
                         + ("an empty string" if not a.out else "a directory name"))
    out = Path(a.out)
    root = _root(a.checkpoint)
    _check_out(out, root)
    args = _config(root, a.max_seq_len)
    bad = [t for t in tokens if not 0 <= t < args.vocab_size]
    if bad:
        raise ValueError(f"--tokens: token {bad[0]} outside the vocabulary [0, {args.vocab_size})")
    if len(tokens) > args.max_seq_len:
        raise ValueError(f"--tokens: {len(tokens)} tokens exceed the cache capacity max_seq_len={args.max_seq_len}")
    logits = _model(a, root).score(tokens).cpu()
    _save(logits, out)
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
        _check_flags(a)
        rc = cmd_generate(a) if a.cmd == "generate" else cmd_score(a)
        sys.stdout.flush()                                # here, not at exit, so a closed pipe is handled below
        return rc
    except BrokenPipeError:                               # stdout's reader went away (`| head`): stop like a Unix filter
        try:                                              # and keep the flush at exit from raising it again
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, sys.stdout.fileno())
            os.close(null)
        except (OSError, ValueError):                     # stdout without a descriptor (in-process callers)
            pass
        return 141                                        # 128 + SIGPIPE: what a shell shows for a filter cut off
    except (ValueError, OSError) as e:                    # bad input, checkpoint and config errors: one line, exit 2
        print(f"dsv4_model: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:                             # Ctrl-C: --out is written atomically, so nothing half-written
        print("dsv4_model: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
