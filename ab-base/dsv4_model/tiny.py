"""The embedded default checkpoint: built deterministically from a seed by the real writer in the ModelOpt NVFP4
layout (native names; FP8 attention, shared experts and indexer wq_b; NVFP4 routed experts with input_scale;
bf16 head, gate and compressors), cached under the user cache dir, so every test and the README command go
through the real loader."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from . import config
from .checkpoint import random_state, write_checkpoint
from .tokenizer import ByteTokenizer

FORMAT_VERSION = 3     # 3: the MTP block (mtp.0.*)


def cache_root() -> Path:
    base = os.environ.get("DSV4_CACHE_DIR") or os.path.join(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "dsv4_model")
    return Path(base)


def tiny(seed: int = 0) -> Path:
    """Path of the tiny NVFP4 checkpoint (config.json, tokenizer.json, model.safetensors), built on first use."""
    args = config.tiny()
    key = hashlib.sha256(json.dumps([FORMAT_VERSION, seed, args.to_json()], sort_keys=True).encode()).hexdigest()[:12]
    root = cache_root() / f"tiny-{key}"
    if (root / "model.safetensors").is_file():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the final place and rename: concurrent builders (parallel tests) never see a partial dir.
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-", dir=root.parent))
    try:
        write_checkpoint(tmp, args, random_state(args, seed), fmt="modelopt", naming="native", config="hf")
        ByteTokenizer().save(tmp / "tokenizer.json")
        try:
            tmp.rename(root)
        except OSError:
            if not (root / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root
