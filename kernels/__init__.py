"""Hot-path kernels for the DSV4 decode, each beside its PyTorch reference; see each subpackage's docstring."""
from ._select import available, use_kernel  # noqa: F401
from .compressor_reduce import compressor_reduce  # noqa: F401
from .fused_swiglu import fused_swiglu  # noqa: F401
from .nvfp4_kvcache import dequantize_nvfp4_kvcache  # noqa: F401
