"""Fetch the third-party serving corpus: files of pinned PyPI wheels, extracted into a cache directory.

    python tests/graphcheck/corpus/fetch.py            # -> $GRAPHCHECK_CORPUS_DIR or ~/.cache/graphcheck-corpus

Nothing third-party is kept in this repository: the test reads the extracted files, and its hand-triaged
expectations (corpus/expected.py) name lines in them. Each wheel is downloaded once (no dependencies, nothing
installed: the scan only parses the files) and only the listed files are kept; a package already extracted is not
downloaded again.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# package -> (distribution, version, pip's platform arguments, files). sglang ships only CPython 3.11 Linux wheels:
# the platform is named so that any host's pip can download that wheel (it is parsed, never installed).
PACKAGES = {
    "transformers": ("transformers", "4.46.3", [], [
        "transformers/__init__.py",
        "transformers/generation/__init__.py",
        "transformers/generation/logits_process.py",
        "transformers/models/__init__.py",
        "transformers/models/llama/__init__.py",
        "transformers/models/llama/modeling_llama.py",
        "transformers/models/mixtral/__init__.py",
        "transformers/models/mixtral/modeling_mixtral.py",
    ]),
    "sglang": ("sglang", "0.5.23", ["--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
                                    "--platform", "manylinux_2_34_x86_64"], [
        "sglang/__init__.py",
        "sglang/srt/layers/sampler.py",
        "sglang/srt/layers/logits_processor.py",
        "sglang/srt/models/llama.py",
        "sglang/srt/models/qwen2.py",
        "sglang/srt/model_executor/model_runner.py",
    ]),
    # FlashInfer's Python sampling functions and its paged decode wrapper (what runs under capture after plan()),
    # with the helpers module both call; the kernels themselves are JIT modules outside these files
    "flashinfer": ("flashinfer_python", "0.7.4", [], [
        "flashinfer/__init__.py",
        "flashinfer/sampling.py",
        "flashinfer/decode.py",
        "flashinfer/utils.py",
    ]),
}
# One download may take this long (the sglang wheel is about 39 MB, transformers' about 10 MB).
TIMEOUT_S = 600


def corpus_dir(package: str = "transformers") -> Path:
    base = os.environ.get("GRAPHCHECK_CORPUS_DIR") or os.path.expanduser("~/.cache/graphcheck-corpus")
    # a folder of its own: benchmarks/static_serving.sh extracts whole packages beside it, as PACKAGE-VERSION
    return Path(base) / "corpus" / f"{package}-{PACKAGES[package][1]}"


def fetch(package: str = "transformers") -> Path:
    dist, version, platform, files = PACKAGES[package]
    out = corpus_dir(package)
    if all((out / f).is_file() for f in files):
        return out
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
                        *platform, f"{dist}=={version}", "-d", tmp], check=True, timeout=TIMEOUT_S)
        wheel = next(Path(tmp).glob(f"{dist}-{version}-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            for f in files:
                dest = out / f
                dest.parent.mkdir(parents=True, exist_ok=True)
                part = dest.with_suffix(".part")
                part.write_bytes(z.read(f))
                os.replace(part, dest)
    return out


if __name__ == "__main__":
    for name in PACKAGES:
        print(fetch(name))
