#!/usr/bin/env bash
# One batched GPU session: the CUDA tests, the kernel suite under compute-sanitizer, capture of the DSV4 decode
# and of every kernel target, the audit with the CUDA layer, and the kernel benchmark. Logs go to $OUT.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-} DSV4_CACHE_DIR=/tmp/dsv4 GRAPHCHECK_KERNEL_CACHE=/tmp/gck PYTHONUNBUFFERED=1
python - <<'PY' 2>&1 | tee "$OUT/env.txt"
import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name())
for m in ("triton", "cutlass"):
    try: print(m, __import__(m).__version__)
    except Exception as e: print(m, "missing", e)
PY
timeout 280 python -m pytest -q -p no:cacheprovider tests/test_kernels.py tests/test_runtime.py -k "cuda or parity or raise or capture" 2>&1 | tail -30 > "$OUT/pytest-gpu.txt"; tail -6 "$OUT/pytest-gpu.txt"
timeout 200 compute-sanitizer --tool memcheck --print-limit 20 python -m pytest -q -p no:cacheprovider tests/test_kernels.py -k "kvcache or compressor" > "$OUT/memcheck.txt" 2>&1; tail -3 "$OUT/memcheck.txt"
for t in dsv4_model.target:reference_decode dsv4_kernels.targets:compressor_reduce_csa dsv4_kernels.targets:compressor_reduce_hca dsv4_kernels.targets:nvfp4_kvcache dsv4_kernels.targets:fused_swiglu dsv4_kernels.targets:nvfp4_gemv; do
  echo "== capture $t"; timeout 120 python -m graphcheck capture "$t" --device cuda 2>&1 | grep -E "GC0|clean|Error" | cut -c1-220
done 2>&1 | tee "$OUT/capture.txt"
echo "== audit (portable + CUDA layer)"; timeout 120 python -m graphcheck audit dsv4_model.target:reference_decode --device cuda 2>&1 | grep -E "GC[0-9]" | cut -c1-200 | tee "$OUT/audit.txt"
timeout 60 python benchmarks/debug_h2d.py 2>&1 | tail -3 | cut -c1-600
timeout 200 python benchmarks/kernels.py --json "$OUT/kernels.json" 2>&1 | tail -15 | tee "$OUT/bench.txt"
timeout 60 python benchmarks/audit_overhead.py 2>&1 | tail -3
