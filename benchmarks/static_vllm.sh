#!/usr/bin/env bash
# The static layer on real serving code: vLLM's v1 GPU worker, scanned from its two execute_model entry points.
#
#   bash benchmarks/static_vllm.sh [REV]    this checkout's graphcheck, and (with REV) the one at git revision REV
#
# Downloads the pinned vLLM wheel once (no dependencies, nothing installed: the static scan only parses it) into
# $GRAPHCHECK_CACHE_DIR (default ~/.cache/graphcheck-corpus). Prints, per graphcheck, the functions in scope, the
# unresolved calls and every finding; benchmarks/results/ holds the committed runs.
set -euo pipefail
VLLM=${VLLM_VERSION:-0.34.0}
CACHE=${GRAPHCHECK_CACHE_DIR:-$HOME/.cache/graphcheck-corpus}
SRC=$CACHE/vllm-$VLLM
if [ ! -d "$SRC/vllm/v1" ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  python -m pip download -q --no-deps --only-binary=:all: "vllm==$VLLM" -d "$tmp"
  python - "$tmp" "$SRC" <<'PY'
import glob, os, sys, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
part = dest + ".part"
with zipfile.ZipFile(glob.glob(os.path.join(tmp, "vllm-*.whl"))[0]) as z:
    z.extractall(part, [n for n in z.namelist() if n.endswith(".py")])
os.replace(part, dest)
PY
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
scan() {   # PYTHONPATH selects which graphcheck runs
  (cd "$SRC" && PYTHONPATH=$1 python -m graphcheck scan vllm/v1 vllm/model_executor/models/llama.py \
     vllm/model_executor/layers --no-cache --jobs "${JOBS:-2}" --show-scope --output-format concise \
     --entry-point vllm.v1.worker.gpu_worker:Worker.execute_model \
     --entry-point vllm.v1.worker.gpu.model_runner:GPUModelRunner.execute_model 2>&1 || true)
}
echo "### graphcheck at $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet || echo '+changes'), vllm $VLLM, $(date -u +%FT%H:%MZ)"
scan "$ROOT"
if [ $# -ge 1 ]; then
  old=$(mktemp -d); git -C "$ROOT" archive "$1" graphcheck | tar -x -C "$old"
  echo; echo "### graphcheck at $(git -C "$ROOT" rev-parse --short "$1"), vllm $VLLM"
  scan "$old"; rm -rf "$old"
fi
