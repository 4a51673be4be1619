#!/usr/bin/env bash
# The closing GPU call of a kernel change: build the CUDA C++ kernel, the tests of tests/kernels on the GPU (verbose,
# whole log) with graphcheck's capture of the graph-safe target beside it, then benchmarks/decode.py alone on the
# GPU with torch.compile children for the rows named in $COMPILE_ROWS within $COMPILE_BUDGET seconds.
#   bash benchmarks/final_session.sh        (run from the repository root; logs to $OUT)
set -u
. "$(dirname "$0")/device_env.sh"
python -c "import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/env.txt"
python -c "from dsv4_kernels.moe_gemv import cuda_kernel as c; print('cuda build:', c.build())" 2>&1 | tail -1
(timeout 200 python -m graphcheck capture dsv4_model.target:graphsafe_decode --device cuda --config graphcheck-graphsafe.toml \
   --output-format full > "$OUT/capture-graphsafe.txt" 2>&1; echo "exit $?" >> "$OUT/capture-graphsafe.txt") &
timeout 200 python -X faulthandler -m pytest -v -p no:cacheprovider -m "not slow" tests/kernels > "$OUT/pytest-kernels.txt" 2>&1
grep -E "FAILED|Fatal|Segmentation|passed|failed" "$OUT/pytest-kernels.txt" | tail -8
grep -B5 "Fatal Python" "$OUT/pytest-kernels.txt" | head -12
wait
tail -3 "$OUT/capture-graphsafe.txt"
timeout ${DECODE_S:-330} python benchmarks/decode.py --compile-rows "${COMPILE_ROWS:-tiny:1,tiny:8,flash:1}" \
  --compile-budget "${COMPILE_BUDGET:-220}" > "$OUT/decode.txt" 2>&1
grep -vE "^\s*$|Warning|warn" "$OUT/decode.txt" | tail -12
