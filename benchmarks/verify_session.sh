#!/usr/bin/env bash
# GPU calls that check a kernel change end to end (each fits the device's 10-minute call):
#   bash benchmarks/verify_session.sh tests    build the CUDA extension; in parallel the kernel tests, the
#                                              graph-safe CUDA tests and `graphcheck capture` of the graph-safe
#                                              target; then the GEMV rows of benchmarks/kernels.py alone on the GPU
#   bash benchmarks/verify_session.sh bench    the routed-expert rows, then a profiled Flash decode (no compile)
# Run from the repository root; logs to $OUT. The extension build is cached per machine (TORCH_EXTENSIONS_DIR).
set -u
. "$(dirname "$0")/device_env.sh"
python -c "import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/env.txt"
if [ "${1:-tests}" = tests ]; then
( time python -c "from dsv4_kernels.moe_gemv import cuda_kernel as c; print('cuda build:', c.build())" ) 2>&1 | tee "$OUT/build.txt" | grep -E "build|real"
(timeout 240 python -X faulthandler -m pytest -q -p no:cacheprovider -m "not slow" tests/kernels > "$OUT/pytest-kernels.txt" 2>&1) &
(timeout 240 python -m pytest -q -p no:cacheprovider -m cuda tests/dsv4_model/test_graphsafe.py > "$OUT/pytest-graphsafe.txt" 2>&1) &
(timeout 200 python -m graphcheck capture dsv4_model.target:graphsafe_decode --device cuda --config graphcheck-graphsafe.toml \
   --output-format full > "$OUT/capture-graphsafe.txt" 2>&1; echo "exit $?" >> "$OUT/capture-graphsafe.txt") &
wait
for f in pytest-kernels pytest-graphsafe; do echo "== $f"; grep -E "^FAILED|^ERROR|Fatal|passed|failed" "$OUT/$f.txt" | head -25; done
tail -2 "$OUT/capture-graphsafe.txt"
timeout 150 python benchmarks/kernels.py --only gemv,fp8 2>&1 > "$OUT/bench.txt"; grep -E "CUDA|copy|FAIL" "$OUT/bench.txt" | head -40
else
timeout 200 python benchmarks/kernels.py --only routed 2>&1 > "$OUT/bench-routed.txt"; grep -E "CUDA|copy|FAIL" "$OUT/bench-routed.txt" | head -20
timeout ${DECODE_S:-150} python benchmarks/decode.py --configs flash --batches 1,8 --no-compile --profile --steps 20 > "$OUT/decode-profile.txt" 2>&1
grep -E "^flash |config|bandwidth|Error|decoder step|sampler" "$OUT/decode-profile.txt"
fi
