#!/usr/bin/env bash
# The project gates itself, twice:
#  - the reference decode (pyproject.toml) against graphcheck-baseline.json: its known findings, each with the reason
#    and the graph-safe code that replaces it; the baseline may only shrink;
#  - the graph-safe decode (graphcheck-graphsafe.toml) against an EMPTY baseline: any hazard in its path fails here
#    at its line.
# Each saved inventory is rendered by `graphcheck report` (the same verdict as the run): to the log and as HTML.
# Extra arguments go to both `graphcheck run`s.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
rc=0
gate() {  # gate NAME [run args...]
    local name=$1; shift
    rm -f "build/$name.json"
    local r=0
    graphcheck run --no-progress --output-format json -o "build/$name.json" "$@" || r=$?
    if [ -f "build/$name.json" ]; then
        graphcheck report "build/$name.json" --output-format full || true
        graphcheck report "build/$name.json" --output-format html -o "build/$name.html" --quiet || true
    fi
    echo "gate $name: exit $r"
    [ "$r" = 0 ] || rc=$r
}
gate inventory "$@"
gate inventory-graphsafe --config graphcheck-graphsafe.toml "$@"
exit "$rc"
