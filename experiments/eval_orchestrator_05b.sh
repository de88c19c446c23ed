#!/usr/bin/env bash
# Issue 19's evaluation: base vs SFT vs SFT + PARL orchestrators (0.5B sub-agents) and the single agent,
# on the starter and wide-lookup test splits, greedy, one `swarm eval` per (condition, workload, seed).
# Usage: experiments/eval_orchestrator_05b.sh [RUN_DIR] [SEEDS]   (default runs/orchestrator-05b, "0 1 2")
#   NS / NW: starter / wide-lookup tasks per seed (default 4 / 2)
#   WITH_15B=1: also the 1.5B single agent and base 1.5B swarm (1.5B orchestrator and sub-agents)
#   WITH_OTHERS=1: also BFCL-parallel (3 tasks), deep lookup (2, branches 3) and τ²-batch (2, k 4) for
#   base, SFT + PARL and the single agent
#   OUT: where the reports go (default traces/eval/i19)
#   CONDITIONS: which 0.5B rows to run (default "base sft parl single"); PARL_LABEL: the label of RUN_DIR's
#   last checkpoint (default parl). E.g. a second run evaluated beside the first run's reports:
#   OUT=traces/eval/i19 CONDITIONS=parl PARL_LABEL=parts WITH_OTHERS=1 experiments/eval_orchestrator_05b.sh \
#       experiments/runs/orchestrator-05b-parts
# Budgets: each workload's own (issue 26: the 6 critical / 3 sub-agent steps this used to force left
# deep lookup and tau2 unfinishable; swarm eval now refuses budgets below the gold policy's needs).
# Each run writes OUT/LABEL-MODE-WORKLOAD-sSEED/ (manifest.json, episodes.jsonl.gz, report.json); one that
# has its report is skipped, and an interrupted one is resumed (--resume: its finished episodes are kept).
# Then `swarm eval --report OUT/...` regenerates the tables from the raw files, or:
#   python experiments/orchestrator_05b_report.py --run RUN_DIR --eval-dir OUT --out results.md
set -uo pipefail
cd "$(dirname "$0")/.."
RUN=${1:-experiments/runs/orchestrator-05b}
SEEDS=${2:-0 1 2}
OUT=${OUT:-traces/eval/i19}
export HF_HUB_OFFLINE=1 PYTHONPATH=$PWD SWARM_LOCAL_THREADS=${SWARM_LOCAL_THREADS:-2}
SWARM=${SWARM:-.venv/bin/swarm}
SFT=$RUN/sft/policy/adapter.gguf
PARL=$(ls -d "$RUN"/checkpoints/step-* 2>/dev/null | tail -1)/adapter.gguf
B05=qwen2.5-coder-0.5b
B15=qwen2.5-coder-1.5b

run() {  # LABEL ADAPTER MODE MODEL SEED WORKLOAD [ARGS...]
    local label=$1 adapter=$2 mode=$3 model=$4 seed=$5 workload=$6
    shift 6
    local id="$label-$mode-$workload-s$seed"
    if [ -f "$OUT/$id/report.json" ]; then
        echo "skip $id (done)"
        return
    fi
    echo "$(date -Is) $id, load $(cut -d' ' -f1-3 /proc/loadavg)"
    "$SWARM" eval -w "$workload" "$@" --split test --seed "$seed" --mode "$mode" -b local -m "$model" \
        --subagent-model "$model" --orchestrator-adapter "$adapter" --max-tokens 256 --temperature 0 \
        -o "$OUT" -q --run-id "$id" --resume > /dev/null
    local rc=$?
    # 1: an episode crashed (kept in the report); anything else (2: bad input, e.g. a missing adapter) stops
    if [ $rc -ne 0 ] && [ $rc -ne 1 ]; then
        echo "swarm eval failed for $id (exit $rc)" >&2
        exit $rc
    fi
}

main_pair() {  # LABEL ADAPTER MODE MODEL SEED
    run "$@" starter -n "${NS:-4}"
    run "$@" wide-lookup -n "${NW:-2}" --knob entities=4 --knob attributes=2
}

others() {  # LABEL ADAPTER MODE MODEL SEED
    run "$@" bfcl-parallel -n 3
    run "$@" deep-lookup -n 2 --knob branches=3
    run "$@" tau2-batch -n 2 --knob k=4
}

has() { [[ " ${CONDITIONS:-base sft parl single} " == *" $1 "* ]]; }
PL=${PARL_LABEL:-parl}

for s in $SEEDS; do
    if has base; then main_pair base none swarm $B05 "$s"; fi
    if has sft; then main_pair sft "$SFT" swarm $B05 "$s"; fi
    if has parl; then main_pair "$PL" "$PARL" swarm $B05 "$s"; fi
    if has single; then main_pair base none single $B05 "$s"; fi
    if [ "${WITH_15B:-0}" = 1 ]; then
        main_pair base15 none single $B15 "$s"
        main_pair base15 none swarm $B15 "$s"
    fi
    if [ "${WITH_OTHERS:-0}" = 1 ]; then
        if has base; then others base none swarm $B05 "$s"; fi
        if has parl; then others "$PL" "$PARL" swarm $B05 "$s"; fi
        if has single; then others base none single $B05 "$s"; fi
    fi
done
