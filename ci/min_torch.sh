#!/usr/bin/env bash
# The runtime layers and the model on the oldest torch the package declares (torch>=2.8 in the runtime extra):
# a fresh venv with torch==2.8.0, the runtime tests and the project's own gate.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV_MIN:-.venv-min-torch}
python3 -m venv "$VENV"
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.8.0"
python -m pip install -q -e '.[runtime,test]'
python -c "import torch; assert torch.__version__.startswith('2.8.'), torch.__version__"
# the slow ones included (an explicit -m overrides the default skip of `slow`)
python -m pytest -q -m "slow or not slow" tests/dsv4_model tests/graphcheck/test_runtime.py tests/graphcheck/test_gate.py
graphcheck run --no-progress --output-format concise
