"""graphcheck capture targets, one per kernel: `graphcheck capture dsv4_kernels.targets:compressor_reduce_csa`.

Each step runs the kernel (or its reference without a GPU) on fresh inputs; the capture layer checks that it
records into the graph (no stream-0 launch) and that replay on new data matches eager bit for bit.

Each kernel package keeps its targets in its own `target.py` and names them in its `KERNEL` record; this module
serves them all under `dsv4_kernels.targets:NAME`, so the capture commands and the tests find a new kernel's
targets without an edit here.
"""
from __future__ import annotations


def __getattr__(name: str):
    """A target a package's record names, from that package's target.py."""
    import importlib

    from ._select import PACKAGES
    for pkg, rec in PACKAGES.items():
        if any(name in op.targets for op in rec.ops):
            mod = importlib.import_module(f"{__package__}.{pkg}.target")
            if hasattr(mod, name):
                return getattr(mod, name)
            raise AttributeError(f"dsv4_kernels.{pkg}'s KERNEL record names the capture target {name!r}, "
                                 f"but dsv4_kernels/{pkg}/target.py does not define it")
    raise AttributeError(f"module 'dsv4_kernels.targets' has no capture target {name!r}")


def names() -> list[str]:
    """Every capture target the records name, in package order."""
    from ._select import PACKAGES
    return [t for rec in PACKAGES.values() for op in rec.ops for t in op.targets]
