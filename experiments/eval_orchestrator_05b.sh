#!/usr/bin/env bash
# Issue 19's evaluation: base vs SFT vs SFT + PARL orchestrators (0.5B sub-agents) and the single agent,
# on the starter and wide-lookup test splits, greedy, one `swarm eval` per (condition, workload, seed).
# Usage: experiments/eval_orchestrator_05b.sh [RUN_DIR] [SEEDS]   (default runs/orchestrator-05b, "0 1 2")
#   NS / NW: starter / wide-lookup tasks per seed (default 4 / 2); WITH_15B=1 adds the 1.5B rows
#   (single agent and base swarm, 1.5B orchestrator and sub-agents).
# Reports land in traces/eval/i19/LABEL-MODE-WORKLOAD-sSEED/report.json; then:
#   python experiments/orchestrator_05b_report.py --run RUN --eval LABEL=REPORT ... (see README.md)
set -u
cd "$(dirname "$0")/.."
RUN=${1:-experiments/runs/orchestrator-05b}
SEEDS=${2:-0 1 2}
export HF_HUB_OFFLINE=1 PYTHONPATH=$PWD SWARM_LOCAL_THREADS=${SWARM_LOCAL_THREADS:-2}
SWARM=${SWARM:-.venv/bin/swarm}

one() {  # LABEL ADAPTER MODE MODEL SEED
    local label=$1 adapter=$2 mode=$3 model=$4 seed=$5
    local common=(--split test --seed "$seed" --mode "$mode" -b local -m "$model" --subagent-model "$model"
        --orchestrator-adapter "$adapter" --max-critical-steps 6 --max-subagent-steps 3 --max-tokens 256
        --temperature 0 -o traces/eval/i19 -q --json)
    echo "$(date -Is) $label $mode seed $seed, load $(cut -d' ' -f1-3 /proc/loadavg)"
    "$SWARM" eval -w starter -n "${NS:-4}" "${common[@]}" --run-id "$label-$mode-starter-s$seed" > /dev/null
    "$SWARM" eval -w wide-lookup -n "${NW:-2}" --knob entities=4 --knob attributes=2 "${common[@]}" \
        --run-id "$label-$mode-wide-lookup-s$seed" > /dev/null
}

for s in $SEEDS; do
    one base none swarm qwen2.5-coder-0.5b "$s"
    one sft "$RUN/sft/policy/adapter.gguf" swarm qwen2.5-coder-0.5b "$s"
    one parl "$(ls -d "$RUN"/checkpoints/step-* | tail -1)/adapter.gguf" swarm qwen2.5-coder-0.5b "$s"
    one base none single qwen2.5-coder-0.5b "$s"
    if [ "${WITH_15B:-0}" = 1 ]; then
        one base15 none single qwen2.5-coder-1.5b "$s"
        one base15 none swarm qwen2.5-coder-1.5b "$s"
    fi
done
