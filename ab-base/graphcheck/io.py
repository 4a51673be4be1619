"""Writing output files: never over an input, and atomically (the old file or the complete new one, never half)."""
from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from pathlib import Path

# Files an output must never replace whatever the caller lists: sources, configuration, checkpoints.
PROTECTED_SUFFIXES = (".py", ".pyi", ".pyx", ".toml", ".cfg", ".ini", ".safetensors", ".pt", ".pth", ".bin",
                      ".ckpt", ".gguf", ".npy", ".npz", ".onnx")


@contextlib.contextmanager
def stdout_to_stderr():
    """What runs inside writes to stderr, so stdout carries only graphcheck's own output (`--output-format json >
    inv.json` stays valid JSON): Python's sys.stdout, and file descriptor 1 too, which C/C++ code, extension builds
    and subprocesses write to without passing through Python."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:                      # no fd 1 (a closed stdout): nothing below Python to redirect
        saved = None
    if saved is not None:
        os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            sys.stderr.flush()
            os.dup2(saved, 1)
            os.close(saved)


class OutputError(ValueError):
    """An output path that would destroy an input or cannot be written; one line naming it (exit 2)."""


def write_stdout(text: str) -> None:
    """Write and flush stdout; a stdout that refuses (`> /dev/full`: ENOSPC, EIO) is an OutputError naming it.
    A closed pipe stays BrokenPipeError (exit 141, quiet). Afterwards fd 1 points at /dev/null, so the
    interpreter's final flush of what is still buffered does not fail a second time."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        raise OutputError(f"stdout: cannot write the output ({e.strerror or e})") from None


def check_output(path: Path | str, protected: list[Path | str | None] = (), flag: str = "-o") -> Path:
    """Refuse an output path that is a directory, one of `protected` (the config, the baseline, an input
    file; whether or not it exists yet: a report written where the baseline will be read is a corrupt
    baseline), a source/config/checkpoint file by its suffix, or a file inside a checkpoint directory; and one
    whose directory cannot be written. Called before any work, so a long run never dies at its last step.
    `flag` is the option the path came from, for the message."""
    if str(path) == "-":                       # stdout, as the output format's own stream
        return Path("-")
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{flag} {path}: is a directory, expected a file path")
    if path.exists() and not path.is_file():   # /dev/null, a FIFO: written through, never replaced
        return path
    real = Path(os.path.realpath(path))        # never raises, a symlink loop included
    for p in protected:
        if p is not None and str(real) == os.path.realpath(p):
            raise OutputError(f"{flag} {path}: refusing to overwrite an input ({p}); choose another path")
    if path.suffix.lower() in PROTECTED_SUFFIXES:
        raise OutputError(f"{flag} {path}: refusing to write a {path.suffix} file (a source, config or checkpoint name); "
                          "choose another path")
    parent = real.parent
    if path.exists() and any(parent.glob("*.safetensors")):
        raise OutputError(f"{flag} {path}: refusing to overwrite a file in a checkpoint directory ({parent})")
    existing = next((d for d in [parent, *parent.parents] if d.exists()), None)
    if existing is None or not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise OutputError(f"{flag} {path}: cannot write there ({existing} is not a writable directory)")
    if path.exists() and not os.access(path, os.W_OK):
        raise OutputError(f"{flag} {path}: the file is not writable")
    return path


def write_atomic(path: Path | str, text: str) -> None:
    """Write `text` as the whole new content of `path`: "-" is stdout; a device or FIFO is written through (an
    atomic replace would put a regular file in place of /dev/null); a regular file is replaced in one rename and
    keeps its permissions (a new one gets the umask's). Paths that are not valid UTF-8 go back out as their
    original bytes (surrogateescape)."""
    if str(path) == "-":
        write_stdout(text)
        return
    path = Path(path)
    if path.exists() and not path.is_file():
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as fh:
            fh.write(text)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as fh:
            fh.write(text)
            fh.flush()
            os.fchmod(fh.fileno(), mode)       # mkstemp makes 0600: a replaced baseline would lose its read bits
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:    # Ctrl-C included: no partial file, no stray temp file
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)       # the only portable way to read it: set and restore at once
    os.umask(mask)
    return mask
