"""Hot-path kernels for the DSV4 decode (CUDA C++, Triton, and CuTeDSL where installed), each beside its PyTorch
reference; `select` picks once at load (`compiled` too, where an op has a CuTeDSL implementation).

Each subpackage declares its `KERNEL` record (`_record.py`); `_select` discovers them, and the public function of
every op is exported here under its own name (`dsv4_kernels.rms_norm`, `dsv4_kernels.dequantize_nvfp4_kvcache`):
a new kernel package is found without an edit here.
"""
from ._select import KERNELS, PACKAGES, available, compiled, select  # noqa: F401

# under its own name, the public function replaces the attribute the import system set for a subpackage of the same
# name (`dsv4_kernels.sinkhorn` is the function, as `from .sinkhorn import sinkhorn` made it)
globals().update({op.public.__name__: op.public for _rec in PACKAGES.values() for op in _rec.ops})
