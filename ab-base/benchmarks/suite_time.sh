#!/usr/bin/env bash
# Wall and CPU time of a test command (default: the README's `python -m pytest -q`), alone or beside BUSY
# CPU-bound processes (issue 40: <= 5 minutes on a 2-core machine under a load of 4 busy processes).
#   bash benchmarks/suite_time.sh BUSY OUT [pytest args...]
# OUT gets the header (date, cores, torch, load before), the run's own output, its times (bash `time`: the
# CPU counts every process the run waited for) and the load sampled every 30 s: on a shared machine the load
# from others is part of the result.
set -uo pipefail
cd "$(dirname "$0")/.."
busy=${1:?usage: suite_time.sh BUSY OUT [pytest args...]}
out=${2:?usage: suite_time.sh BUSY OUT [pytest args...]}
shift 2
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
trap cleanup EXIT
{
  echo "# $(date -u '+%F %H:%M UTC'), $(nproc) cores, $(python -c 'import torch; print("torch", torch.__version__)'), $busy busy processes"
  echo "# command: python -m pytest -q $*"
  echo "# load before: $(uptime)"
} > "$out"
for ((i = 0; i < busy; i++)); do
  timeout 3600 python3 -c 'while True: pass' &
  pids+=($!)
done
(while sleep 30; do echo "# load: $(uptime)"; done) > "$out.load" &
pids+=($!)
TIMEFORMAT='# wall %R s, user %U s, sys %S s (the run and every process it waited for)'
{ time python -m pytest -q "$@" >> "$out" 2>&1; } 2>> "$out"
cleanup
pids=()
{ cat "$out.load"; echo "# load after: $(uptime)"; } >> "$out"
rm -f "$out.load"
