#!/usr/bin/env bash
# after the wide-lookup benchmark fix (count columns asked as counts, clock times): the default 1.5B, swarm and single.
# The workload's own budgets (issue 26); an interrupted run is resumed (--resume).
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 PYTHONPATH=$PWD SWARM_LOCAL_THREADS=2
OUT=${OUT:-traces/eval/i19-bench}
for s in 0 1 2; do
  for mode in swarm single; do
    id="base15-$mode-wide-lookup-s$s"
    [ -f "$OUT/$id/report.json" ] && continue
    echo "$(date -Is) $id load $(cut -d' ' -f1-3 /proc/loadavg)"
    .venv/bin/swarm eval -w wide-lookup -n 2 --knob entities=4 --knob attributes=2 --split test --seed $s --mode $mode \
      -b local -m qwen2.5-coder-1.5b --subagent-model qwen2.5-coder-1.5b \
      --max-tokens 256 --temperature 0 -o "$OUT" -q --run-id "$id" --resume > /dev/null
    rc=$?
    # 1: an episode failed (kept in the report); anything else (2: bad input) stops the evaluation
    if [ $rc -ne 0 ] && [ $rc -ne 1 ]; then
      echo "swarm eval failed for $id (exit $rc)" >&2
      exit $rc
    fi
  done
done
echo "$(date -Is) done"
