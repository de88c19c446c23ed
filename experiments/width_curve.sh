#!/usr/bin/env bash
# The width curve (issue 26 item 7): wide research over the generated corpus at N = 2, 4, 8, 16 entities,
# every arm on the same tasks, the workload's own budgets, greedy; then the table and PNG from raw files.
# Usage: experiments/width_curve.sh   (env: WIDTHS "2 4 8 16", N tasks per width (default 30), SPLIT (dev),
#   SEED (0), MODEL (qwen2.5-coder-1.5b), ARMS (all), CONCURRENT (1), OUT (experiments/results/width_curve),
#   EXTRA: more swarm eval flags). Interrupted runs resume (--resume); test seeds go through the ledger.
# LATENCY=SECONDS: the latency-bound case instead (K2.5 Fig. 8): the workload's gold policy as a simulated
#   server with that fixed latency per model call (no model), so wall time follows critical steps.
set -uo pipefail
cd "$(dirname "$0")/.."
WIDTHS=${WIDTHS:-2 4 8 16}
N=${N:-30}
SPLIT=${SPLIT:-dev}
SEED=${SEED:-0}
MODEL=${MODEL:-qwen2.5-coder-1.5b}
ARMS=${ARMS:-all}
CONCURRENT=${CONCURRENT:-1}
OUT=${OUT:-experiments/results/width_curve}
export HF_HUB_OFFLINE=1 PYTHONPATH=$PWD
SWARM=${SWARM:-.venv/bin/swarm}
PY=${PY:-.venv/bin/python}
if [ -n "${LATENCY:-}" ]; then
    BACKEND=(-b gold --latency "$LATENCY")
    LABEL="gold-latency$LATENCY"
else
    BACKEND=(-b local -m "$MODEL" --subagent-model "$MODEL" --orchestrator-adapter none --temperature 0)
    LABEL=$MODEL
fi
# shellcheck source=experiments/eval_run.sh
. experiments/eval_run.sh
runs=()
for w in $WIDTHS; do
    id="wide-research-$SPLIT-s$SEED-n$w-$LABEL"
    runs+=("$OUT/$id")
    eval_run "$id" -w wide-research --knob "entities=$w" -n "$N" --split "$SPLIT" --seed "$SEED" --mode "$ARMS" \
        "${BACKEND[@]}" --concurrent-episodes "$CONCURRENT"
done
"$PY" experiments/width_curve.py "${runs[@]}" --out "$OUT/width-curve-$SPLIT-s$SEED-$LABEL"
