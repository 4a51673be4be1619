#!/usr/bin/env bash
# Issue 37's same-GPU before/after: benchmarks/decode.py's per-layer measure (graph replay at depths 2 and 8, Flash
# dimensions) of an older tree and of this one, one after the other in one device call, so both numbers come from
# the same GPU at the same clocks (a comparison across calls may land on another card: H100 against H200).
#
#   git archive BASE dsv4_model kernels benchmarks graphcheck pyproject.toml | (mkdir -p ab-base && tar -x -C ab-base)
#   bash benchmarks/commit_ab.sh [ab-base]        # on the GPU; DEPTH_ARGS overrides decode.py's options
#
# (ab-base/ is untracked, not ignored, so a device call carries it; delete it afterwards.) Logs: $OUT/depth-before.txt,
# $OUT/depth-after.txt; each tree builds its own CUDA extension first (about 80 s on a fresh machine).
set -u
BASE=${1:-ab-base}
[ -d "$BASE/dsv4_model" ] || { echo "commit_ab.sh: $BASE has no dsv4_model/: expected a tree made by git archive (see the header)" >&2; exit 2; }
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/root/torch_ext} DSV4_CACHE_DIR=/tmp/dsv4 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader > "$OUT/env.txt" 2>&1
rc=0
for tree in "$BASE" .; do
  name=$([ "$tree" = . ] && echo after || echo before)
  PP=$(mktemp -d); ln -s "$(cd "$tree" && pwd)/kernels" "$PP/dsv4_kernels"
  (cd "$tree" && export PYTHONPATH=$PWD:$PP &&
   timeout 150 python -c "from dsv4_kernels.moe_gemv import cuda_kernel as c; print('cuda build:', c.build())" &&
   timeout 230 python benchmarks/decode.py ${DEPTH_ARGS:---configs flash --depths 2,8 --batches 1,8 --steps 20 --experts 64}) \
    > "$OUT/depth-$name.txt" 2>&1
  r=$?; echo "exit $r" >> "$OUT/depth-$name.txt"; [ $r = 0 ] || rc=1
  echo "== $name ($tree)"; grep -E "^ *[0-9]+ +[0-9.]+ |depths|cuda build|^exit|Error" "$OUT/depth-$name.txt"
done
exit $rc
