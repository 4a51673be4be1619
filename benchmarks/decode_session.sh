#!/usr/bin/env bash
# One batched H200 session for the decode and the runtime layers (the kernel suite is gpu_session.sh):
#   phase A, side by side (correctness only, no timings): every `cuda`-marked test, `graphcheck capture` of the
#   graph-safe target, the third-party verdict table on CUDA;
#   phase B, alone on the GPU: benchmarks/decode.py (eager, graph replay, reduce-overhead, HBM floor).
# Short logs go to $OUT.   bash benchmarks/decode_session.sh   (run from the repository root)
set -u
. "$(dirname "$0")/device_env.sh"
python - <<'PY' 2>&1 | tee "$OUT/env.txt"
import datetime, sys, torch, triton, transformers
print(datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"), "python", sys.version.split()[0],
      "torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__,
      "transformers", transformers.__version__, torch.cuda.get_device_name())
PY
(timeout 270 python -m pytest -q -p no:cacheprovider -m cuda ${TESTS:-tests/} --deselect tests/kernels 2>&1 | tail -30 > "$OUT/pytest-cuda.txt") &
(timeout 200 python -m graphcheck capture dsv4_model.target:graphsafe_decode --device cuda --config graphcheck-graphsafe.toml \
   --output-format full > "$OUT/capture-graphsafe.txt" 2>&1; echo "exit $?" >> "$OUT/capture-graphsafe.txt") &
(timeout 260 python benchmarks/thirdparty_verdicts.py --device cuda --out "$OUT/thirdparty-cuda.md" > "$OUT/thirdparty-cuda.log" 2>&1; echo "exit $?" >> "$OUT/thirdparty-cuda.log") &
wait
tail -3 "$OUT/pytest-cuda.txt"; tail -4 "$OUT/capture-graphsafe.txt"; tail -15 "$OUT/thirdparty-cuda.md" 2>/dev/null || tail -5 "$OUT/thirdparty-cuda.log"
timeout 200 python benchmarks/decode.py "$@" 2>&1 | tee "$OUT/decode.txt"
