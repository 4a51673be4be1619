"""Hot-path kernels for the DSV4 decode (CUDA C++ and Triton), each beside its PyTorch reference; `select` picks once
at load."""
from ._select import KERNELS, PACKAGES, available, select  # noqa: F401
from .act_quant import fp4_fake_quant, fp8_fake_quant  # noqa: F401
from .attention import decode_attention  # noqa: F401
from .compressor_reduce import compressor_reduce  # noqa: F401
from .fused_swiglu import fused_swiglu  # noqa: F401
from .indexer import index_scores, topk_blocks  # noqa: F401
from .mhc import mhc_head, mhc_post, mhc_pre  # noqa: F401
from .moe_gemv import fp4_gemv, routed_experts  # noqa: F401
from .nvfp4_kvcache import dequantize_nvfp4_kvcache  # noqa: F401
from .rms_norm import rms_norm  # noqa: F401
from .rope import rope_tail  # noqa: F401
from .sampling import penalize_scale, sample_pick  # noqa: F401

# the public function of every op a package's record declares, under its own name (it replaces the attribute the
# import system set for a subpackage of the same name, as `from .sinkhorn import sinkhorn` did)
globals().update({op.public.__name__: op.public for _rec in PACKAGES.values() for op in _rec.ops})
