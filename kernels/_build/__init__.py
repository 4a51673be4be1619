"""JIT-build a kernel's CUDA extension once per process (sm_90), cached under the user cache dir."""
from __future__ import annotations

import functools
import os
from pathlib import Path


@functools.lru_cache(maxsize=None)
def extension(name: str, source: str):
    from torch.utils import cpp_extension
    cache = Path(os.environ.get("GRAPHCHECK_KERNEL_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                 / "graphcheck-kernels") / name
    cache.mkdir(parents=True, exist_ok=True)
    arch = os.environ.get("GRAPHCHECK_CUDA_ARCH", "90")
    return cpp_extension.load(  # graphcheck: ignore[GC802] -- built once per process; the warm-up step builds it before any capture
        name=f"graphcheck_{name}", sources=[source], build_directory=str(cache), verbose=False,
        extra_cuda_cflags=["-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}", "-lineinfo"])
