#!/usr/bin/env bash
# The project gates itself: scan + audit + capture of the DSV4 decode against the committed baseline.
# A new hazard in the decode path (an `.item()`, a host branch, a growing slice) fails here at its line.
# The saved inventory is rendered twice by `graphcheck report` (the same verdict as the run): to the log and as HTML.
# Extra arguments go to `graphcheck run` (e.g. `--config graphsafe.toml` for a second configuration).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
rm -f build/inventory.json
rc=0
graphcheck run --no-progress --output-format json -o build/inventory.json "$@" || rc=$?
if [ -f build/inventory.json ]; then
    graphcheck report build/inventory.json --output-format full || true
    graphcheck report build/inventory.json --output-format html -o build/inventory.html --quiet || true
fi
# the graph-safe decode has an EMPTY baseline: any hazard in its path fails here
graphcheck run --no-progress --config graphcheck-graphsafe.toml --output-format json -o build/inventory-graphsafe.json || rc=$?
exit "$rc"
