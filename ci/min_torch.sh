#!/usr/bin/env bash
# The runtime layers and the model on the oldest torch the package declares (torch>=2.8 in the runtime extra):
# a fresh venv with torch==2.8.0, the runtime tests and the project's own gate.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV_MIN:-.venv-min-torch}
need_gib=9
free_gib=$(df -P -BG "$(dirname "$VENV")" | awk 'NR==2 {sub("G", "", $4); print $4}')
if [ "$free_gib" -lt "$need_gib" ]; then
    echo "min-torch job NOT RUN: it installs ~8 GB (torch 2.8's CUDA build) and $(dirname "$VENV") has ${free_gib} GiB free; needs ${need_gib}" >&2
    exit 0
fi
python3 -m venv "$VENV"
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip
# PyPI's Linux torch 2.8.0 is the CUDA build: ~7 GB installed (4 GB of it the nvidia-* libraries). One `pip install`
# keeps every wheel it downloaded until it ends (a clean CI machine ran out of disk so), so pip resolves the set
# first (from the index's metadata, nothing large downloaded) and then installs it one package per command,
# uncached, dependencies before torch: the peak is what is installed plus one wheel.
export PIP_NO_CACHE_DIR=1
report=$(mktemp)
python -m pip install -q --dry-run --ignore-installed --report "$report" "torch==2.8.0"
mapfile -t pins < <(python -c '
import json, sys
names = [(p["metadata"]["name"], p["metadata"]["version"]) for p in json.load(open(sys.argv[1]))["install"]]
names.sort(key=lambda nv: nv[0].lower() == "torch")     # torch last: everything it needs is there when it lands
print("\n".join(f"{n}=={v}" for n, v in names))' "$report")
rm -f "$report"
[ "${#pins[@]}" -gt 1 ] || { echo "min-torch job: pip resolved ${#pins[@]} package(s) for torch==2.8.0; expected torch and its CUDA libraries" >&2; exit 1; }
for pin in "${pins[@]}"; do python -m pip install -q --no-deps "$pin"; done
python -m pip check
python -m pip install -q -e '.[runtime,test]'
python -c "import torch; assert torch.__version__.startswith('2.8.'), torch.__version__"
# the slow ones included (an explicit -m overrides the default skip of `slow`)
python -m pytest -q -m "slow or not slow" tests/dsv4_model tests/graphcheck/test_runtime.py tests/graphcheck/test_gate.py
graphcheck run --no-progress --output-format concise
