"""One launch of each B=1 FP4 GEMV kernel at 8192x8192 for Nsight Compute (after warm-up), e.g.

    ncu --kernel-name regex:'fp4_rows|mma_gemv' --launch-skip 4 --launch-count 2 \
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats python benchmarks/ncu_gemv.py

Where the time of the one-token GEMV goes (issue-bound or memory-bound): the question BENCHMARKS.md answers with it.
"""
import torch

from dsv4_kernels.moe_gemv import cuda_kernel
from dsv4_kernels.moe_gemv.reference import random_weight

w = random_weight("mxfp4", 8192, 8192, device="cuda")
x = torch.randn(1, 8192, device="cuda").bfloat16()
for _ in range(2):                      # warm-up: 2 launches of each
    cuda_kernel.fp4_gemv_cuda(x, w, path="rows")
    cuda_kernel.fp4_gemv_cuda(x, w, path="mma")
cuda_kernel.fp4_gemv_cuda(x, w, path="rows")
cuda_kernel.fp4_gemv_cuda(x, w, path="mma")
torch.cuda.synchronize()
