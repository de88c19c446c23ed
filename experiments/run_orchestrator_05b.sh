#!/usr/bin/env bash
# Train the default orchestrator as one low-priority background job: SFT warm start, then PARL.
# Usage: nohup experiments/run_orchestrator_05b.sh [CONFIG] > experiments/runs/orchestrator-05b.log 2>&1 &
# (NICE=N sets the niceness, default 19)
# CONFIG defaults to experiments/orchestrator_05b.toml (experiments/orchestrator_05b_smoke.toml: 2 steps).
# Re-running resumes: a finished SFT stage (RUN/sft/policy) is kept, an interrupted one resumes from
# RUN/sft/checkpoint, and `swarm train` resumes from RUN/checkpoints. Delete RUN/sft to regenerate the
# gold data after the protocol changed.
set -euo pipefail
cd "$(dirname "$0")"
CONFIG=${1:-orchestrator_05b.toml}
SWARM=../.venv/bin/swarm
PY=../.venv/bin/python
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONPATH="$(cd .. && pwd)"
RUN=$($PY -c "import sys; sys.path.insert(0, '..'); from pathlib import Path; from agent_swarm.orchestrator.rl.config import load_train_config; print(load_train_config(Path('$CONFIG')).run_dir)")
mkdir -p "$RUN"
echo "$(date -Is) run dir $RUN, load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ ! -f "$RUN/sft/policy/adapter_model.safetensors" ]; then
    nice -n "${NICE:-19}" $SWARM train sft --config "$CONFIG" --no-progress
fi
echo "$(date -Is) SFT done, load $(cut -d' ' -f1-3 /proc/loadavg)"
nice -n "${NICE:-19}" $SWARM train --config "$CONFIG" --no-progress
echo "$(date -Is) RL done, load $(cut -d' ' -f1-3 /proc/loadavg)"
$SWARM train plot "$RUN"
