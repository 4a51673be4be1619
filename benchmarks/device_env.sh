# Sourced by the GPU session scripts (run from the repository root): the log folder $OUT, the package-dir mapping
# of `kernels/` as `dsv4_kernels` without an install, caches in /tmp, and one extension build dir per machine.
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
PP=$(mktemp -d); ln -sfn "$PWD/kernels" "$PP/dsv4_kernels"
export PYTHONPATH=$PWD:$PP:${PYTHONPATH:-} DSV4_CACHE_DIR=/tmp/dsv4 PYTHONUNBUFFERED=1 GRAPHCHECK_CACHE_DIR=/tmp/gc
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/root/torch_ext}
