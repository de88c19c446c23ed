#!/usr/bin/env bash
# Issue 26's re-measurement: every arm (swarm, single, single-parallel) on the same tasks of each workload,
# with each workload's own budgets, greedy, paired over N tasks; raw per-episode data and the report.
# Usage: experiments/measure_arms.sh [WORKLOAD ...]   (default: starter wide-lookup deep-lookup bfcl-parallel
#                                                       tau2-batch)
#   SPLIT (default dev; test needs a fresh seed: the ledger experiments/test_seeds.jsonl refuses a used one
#   and records the seed when the run finishes), SEED (default 0), N tasks (default 30), ARMS (default all),
#   MODEL (default qwen2.5-coder-1.5b, orchestrator and sub-agents), ADAPTER (default none),
#   CONCURRENT episodes at once (default 1: wall times comparable), SAMPLES per task (default 1),
#   OUT (default experiments/results/issue26), EXTRA: more swarm eval flags.
# Each run is OUT/<workload>-<split>-s<seed>-<label>/; an interrupted run resumes (--resume). Commit
# manifest.json and episodes.jsonl.gz of each run (not episodes/, the full records and traces), then the
# report: swarm eval --report OUT/<run> ... > OUT/report-<split>-s<seed>.md (this script writes it).
set -uo pipefail
cd "$(dirname "$0")/.."
SPLIT=${SPLIT:-dev}
SEED=${SEED:-0}
N=${N:-30}
ARMS=${ARMS:-all}
MODEL=${MODEL:-qwen2.5-coder-1.5b}
ADAPTER=${ADAPTER:-none}
CONCURRENT=${CONCURRENT:-1}
SAMPLES=${SAMPLES:-1}
OUT=${OUT:-experiments/results/issue26}
LABEL=${LABEL:-${MODEL}-${ADAPTER##*/}}
export HF_HUB_OFFLINE=1 PYTHONPATH=$PWD
SWARM=${SWARM:-.venv/bin/swarm}
WORKLOADS=${*:-starter wide-lookup deep-lookup bfcl-parallel tau2-batch}

knobs() {  # sizes every split can serve (dev pools are a quarter of the old train pools)
    case "$1" in
        wide-lookup) echo "--knob entities=4 --knob attributes=2" ;;
        deep-lookup) echo "--knob branches=3" ;;
        tau2-batch) echo "--knob k=2" ;;
        *) echo "" ;;
    esac
}

# shellcheck source=experiments/eval_run.sh
. experiments/eval_run.sh
runs=()
for wl in $WORKLOADS; do
    id="$wl-$SPLIT-s$SEED-$LABEL"
    runs+=("$OUT/$id")
    # shellcheck disable=SC2046
    eval_run "$id" -w "$wl" -n "$N" --split "$SPLIT" --seed "$SEED" --mode "$ARMS" -b local -m "$MODEL" \
        --subagent-model "$MODEL" --orchestrator-adapter "$ADAPTER" --temperature 0 \
        --concurrent-episodes "$CONCURRENT" --samples "$SAMPLES" $(knobs "$wl")
done
"$SWARM" eval --report "${runs[@]}" > "$OUT/report-$SPLIT-s$SEED-$LABEL.md"
echo "$(date -Is) report: $OUT/report-$SPLIT-s$SEED-$LABEL.md"
