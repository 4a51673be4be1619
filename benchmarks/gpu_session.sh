#!/usr/bin/env bash
# One batched GPU session: the CUDA tests, the kernel suite under compute-sanitizer, capture of the DSV4 decode
# and of every kernel target, and the kernel benchmark. Logs go to $OUT (default ./gpu-out).
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-} DSV4_CACHE_DIR=/tmp/dsv4 GRAPHCHECK_KERNEL_CACHE=/tmp/gck
python - <<'PY' > "$OUT/env.txt" 2>&1
import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())
try:
    import triton; print("triton", triton.__version__)
except Exception as e: print("triton missing", e)
try:
    import cutlass; print("cutlass-dsl", cutlass.__version__)
except Exception as e: print("cutlass missing", e)
PY
cat "$OUT/env.txt"
timeout 300 python -m pytest -q -p no:cacheprovider tests/test_kernels.py tests/test_runtime.py -k "cuda or parity or raise or capture" -x 2>&1 | tail -25 | tee "$OUT/pytest-gpu.txt"
timeout 240 compute-sanitizer --tool memcheck --print-limit 20 python -m pytest -q -p no:cacheprovider tests/test_kernels.py -k "kvcache or compressor" 2>&1 | tail -12 | tee "$OUT/memcheck.txt"
for t in dsv4_model.target:reference_decode kernels.targets:compressor_reduce_csa kernels.targets:compressor_reduce_hca kernels.targets:nvfp4_kvcache kernels.targets:fused_swiglu kernels.targets:nvfp4_gemv; do
  echo "== capture $t"; timeout 120 python -m graphcheck capture "$t" --device cuda 2>&1 | tail -14
done | tee "$OUT/capture.txt"
echo "== audit (portable + CUDA layer)"; timeout 120 python -m graphcheck audit dsv4_model.target:reference_decode --device cuda 2>&1 | tail -30 | tee "$OUT/audit.txt"
timeout 240 python benchmarks/kernels.py --json "$OUT/kernels.json" 2>&1 | tail -15 | tee "$OUT/bench.txt"
