#!/usr/bin/env bash
# One batched GPU session for the kernels: environment, the kernel tests (GPU parity and capture), the parity tests
# under compute-sanitizer memcheck, capture of every kernel target, and the kernel benchmark. Short logs go to $OUT.
#   bash benchmarks/gpu_session.sh [--sweep]      (run from the repository root)
set -u
. "$(dirname "$0")/device_env.sh"
python - <<'PY' 2>&1 | tee "$OUT/env.txt"
import datetime, sys, torch, triton
print(datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"), "python", sys.version.split()[0],
      "torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, torch.cuda.get_device_name())
PY
timeout 300 python -m pytest -q -p no:cacheprovider tests/kernels/test_kernels.py -m "not slow" 2>&1 | tail -25 > "$OUT/pytest-gpu.txt"
tail -4 "$OUT/pytest-gpu.txt"
timeout 300 compute-sanitizer --tool memcheck --print-limit 20 python -m pytest -q -p no:cacheprovider tests/kernels/test_kernels.py \
  -k "parity and not flash" > "$OUT/memcheck.txt" 2>&1; grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.txt" | tail -3
for t in compressor_reduce_csa compressor_reduce_hca nvfp4_kvcache fused_swiglu fp4_gemv routed_experts sinkhorn; do
  echo "== capture dsv4_kernels.targets:$t"; timeout 120 python -m graphcheck capture "dsv4_kernels.targets:$t" --device cuda 2>&1 | grep -E "GC0|clean|Error" | cut -c1-220
done 2>&1 | tee "$OUT/capture.txt"
timeout 400 python benchmarks/kernels.py --json "$OUT/kernels.json" "$@" 2>&1 | tee "$OUT/bench.txt"
