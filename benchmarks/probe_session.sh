#!/usr/bin/env bash
# A short first look on the GPU: environment, then benchmarks/decode.py with a kernel profile of each graph replay
# (where the step's time goes), without torch.compile. Logs to $OUT.  bash benchmarks/probe_session.sh
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
PP=$(mktemp -d); ln -sfn "$PWD/kernels" "$PP/dsv4_kernels"
export PYTHONPATH=$PWD:$PP:${PYTHONPATH:-} DSV4_CACHE_DIR=/tmp/dsv4 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/env.txt"
timeout 400 python benchmarks/decode.py --no-compile --profile "$@" 2>&1 | tee "$OUT/decode-profile.txt" | grep -v "^-\|^ *$" | cut -c1-150
