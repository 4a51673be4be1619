#!/usr/bin/env bash
# One short GPU call for the FP4 kernels and the decode step: build the CUDA C++ kernel, its parity tests against
# the reference (and the Triton kernel's), the GEMV / routed-expert rows of benchmarks/kernels.py, then
# benchmarks/decode.py with a kernel profile of each graph replay (no torch.compile: decode_session.sh has it).
# Logs to $OUT.   bash benchmarks/probe_session.sh      (run from the repository root)
set -u
. "$(dirname "$0")/device_env.sh"
python -c "import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/env.txt"
nvidia-smi --query-gpu=clocks.sm,clocks.mem --format=csv,noheader | tee -a "$OUT/env.txt"
( time python -c "from dsv4_kernels.moe_gemv import cuda_kernel as c; print('cuda build:', c.build())" ) 2>&1 | tee "$OUT/build.txt" | grep -E "build|real"
timeout 150 python -m pytest -q -p no:cacheprovider tests/kernels/test_kernels.py -k "routed or gemv or sinkhorn or fp8" 2>&1 | tail -15 > "$OUT/pytest-fp4.txt"
tail -3 "$OUT/pytest-fp4.txt"
timeout 170 python -m pytest -q -p no:cacheprovider -m cuda tests/dsv4_model/test_graphsafe.py 2>&1 | tail -15 > "$OUT/pytest-graphsafe.txt"
tail -3 "$OUT/pytest-graphsafe.txt"
timeout 200 python benchmarks/kernels.py --only gemv,fp8,routed --json "$OUT/kernels.json" 2>&1 | tee "$OUT/bench-fp4.txt" | grep -E "kernel|CUDA|\(64, 256|FAILED|copy"
timeout ${DECODE_S:-240} python benchmarks/decode.py --no-compile --profile "$@" > "$OUT/decode-profile.txt" 2>&1
grep -E "^(tiny|flash) |config|bandwidth|Error" "$OUT/decode-profile.txt"
