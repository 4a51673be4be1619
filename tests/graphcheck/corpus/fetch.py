"""Fetch the third-party serving corpus: files of a pinned PyPI wheel, extracted into a cache directory.

    python tests/graphcheck/corpus/fetch.py            # -> $GRAPHCHECK_CORPUS_DIR or ~/.cache/graphcheck-corpus

Nothing third-party is kept in this repository: the test reads the extracted files, and its hand-triaged
expectations (corpus/expected.py) name lines in them.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "transformers"
VERSION = "4.46.3"
FILES = [
    "transformers/__init__.py",
    "transformers/generation/__init__.py",
    "transformers/generation/logits_process.py",
    "transformers/models/__init__.py",
    "transformers/models/llama/__init__.py",
    "transformers/models/llama/modeling_llama.py",
    "transformers/models/mixtral/__init__.py",
    "transformers/models/mixtral/modeling_mixtral.py",
]


def corpus_dir() -> Path:
    base = os.environ.get("GRAPHCHECK_CORPUS_DIR") or os.path.expanduser("~/.cache/graphcheck-corpus")
    return Path(base) / f"{PACKAGE}-{VERSION}"


def fetch() -> Path:
    out = corpus_dir()
    if all((out / f).is_file() for f in FILES):
        return out
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
                        f"{PACKAGE}=={VERSION}", "-d", tmp], check=True)
        wheel = next(Path(tmp).glob(f"{PACKAGE}-{VERSION}-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            for f in FILES:
                dest = out / f
                dest.parent.mkdir(parents=True, exist_ok=True)
                part = dest.with_suffix(".part")
                part.write_bytes(z.read(f))
                os.replace(part, dest)
    return out


if __name__ == "__main__":
    print(fetch())
