#!/usr/bin/env bash
# The project gates itself: scan + audit + capture of the DSV4 decode against the committed baseline.
# A new hazard in the decode path (an `.item()`, a host branch, a growing slice) fails here at its line.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
graphcheck run --no-progress -o build/inventory.json
graphcheck report build/inventory.json --format html -o build/inventory.html
# the graph-safe decode has an EMPTY baseline: any hazard in its path fails here
graphcheck run --no-progress --config graphcheck-graphsafe.toml -o build/inventory-graphsafe.json
