#!/usr/bin/env bash
# The graphcheck-scan pre-commit hook as a user gets it, measured with pre-commit itself:
#   1. `pre-commit install-hooks` (the hook environment built from this repository's .pre-commit-hooks.yaml at HEAD),
#      against the floor: the same for a hook repository that installs nothing but a trivial package;
#   2. `git commit` with the hook installed: a commit that stages a file outside the entry-point module (it must
#      pass without the entry-point module staged) and one that stages a host sync in the captured region.
# Usage: benchmarks/precommit_hook.sh [RESULT_FILE]   (needs pre-commit and git; reaches PyPI for the env)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-/dev/stdout}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export PRE_COMMIT_HOME=$W/home GIT_AUTHOR_NAME=b GIT_AUTHOR_EMAIL=b@b GIT_COMMITTER_NAME=b GIT_COMMITTER_EMAIL=b@b
now() { date +%s.%N; }
el() { python3 -c "print(f'{$2 - $1:.2f}')"; }
{
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  host: $(nproc) cores  $(python3 --version)  $(pre-commit --version)  $(git --version)"
echo "graphcheck repo: $REPO @ $(git -C "$REPO" rev-parse --short HEAD)"

# the floor: a hook repository whose env installs one trivial package
mkdir -p "$W/floor/floorpkg" && cd "$W/floor" && git init -q
printf '[project]\nname = "floorpkg"\nversion = "0"\n[project.scripts]\nfloor = "floorpkg:main"\n' > pyproject.toml
printf 'def main():\n    return 0\n' > floorpkg/__init__.py
printf -- '- id: floor\n  name: floor\n  entry: floor\n  language: python\n' > .pre-commit-hooks.yaml
git add . && git commit -qm floor

mkdir -p "$W/user/pkg" && cd "$W/user" && git init -q
printf '[tool.graphcheck]\npaths = ["pkg"]\nentry-points = ["pkg.model:step"]\n' > pyproject.toml
printf 'import torch\nfrom .helpers import log\n\n\ndef step(x: torch.Tensor):\n    log(x)\n    return x * 2\n' > pkg/model.py
printf 'import torch\n\n\ndef log(x: torch.Tensor):\n    return x.sum()\n' > pkg/helpers.py
touch pkg/__init__.py
cat > .pre-commit-config.yaml <<YAML
repos:
  - repo: $W/floor
    rev: $(git -C "$W/floor" rev-parse HEAD)
    hooks: [{id: floor}]
YAML
git add . && git commit -qm init --no-verify
t0=$(now); pre-commit install-hooks; t1=$(now)
floor=$(el "$t0" "$t1")
rm -rf "$PRE_COMMIT_HOME"
cat > .pre-commit-config.yaml <<YAML
repos:
  - repo: $REPO
    rev: $(git -C "$REPO" rev-parse HEAD)
    hooks: [{id: graphcheck-scan}]
YAML
git add . && git commit -qm hooks --no-verify
t0=$(now); pre-commit install-hooks; t1=$(now)
env=$(el "$t0" "$t1")
pre-commit install >/dev/null
envdir=$(ls -d "$PRE_COMMIT_HOME"/repo*/py_env-* | head -1)
echo "--- hook env packages ($envdir)"
"$envdir/bin/python" -m pip list --format=freeze 2>/dev/null | grep -v '^\(pip\|setuptools\|wheel\)=='
size=$(du -sm "$envdir" | cut -f1)
"$envdir/bin/python" -c "import importlib.util as u; print('torch importable in the hook env:', u.find_spec('torch') is not None)"

echo '# a comment' >> pkg/helpers.py && git add pkg/helpers.py
echo "--- commit 1: stages pkg/helpers.py only (the entry-point module pkg/model.py is not staged)"
t0=$(now); set +e; git commit -qm "helpers only" 2>&1; rc1=$?; set -e; t1=$(now)
c1=$(el "$t0" "$t1")
printf 'import torch\n\n\ndef log(x: torch.Tensor):\n    return x.sum().item()\n' > pkg/helpers.py && git add pkg/helpers.py
echo "--- commit 2: a host sync in the captured region (reached from the entry point)"
t0=$(now); set +e; git commit -qm "sync" 2>&1; rc2=$?; set -e; t1=$(now)
c2=$(el "$t0" "$t1")

echo "--- summary"
echo "hook env build (pre-commit install-hooks): ${env} s; floor (trivial python hook repo): ${floor} s; ratio $(python3 -c "print(f'{$env/$floor:.2f}')")x; env size ${size} MB"
echo "commit 1 (clean, entry module not staged): exit ${rc1}, ${c1} s"
echo "commit 2 (new .item() in the captured region): exit ${rc2}, ${c2} s"
} 2>&1 | tee "$OUT"
