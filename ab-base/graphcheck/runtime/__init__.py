"""The runtime layers: the portable audit (function + dispatch modes), the CUDA sync-debug audit, the guards,
and capture-under-test on CUDA or in its CPU emulation. Each produces Findings; nothing here reads the scan."""
