#!/usr/bin/env bash
# The whole CPU experiment, low priority: warm start (SFT), PARL run, λ = 0 ablation, report.
# Usage: nohup experiments/run_parl_fetch.sh > experiments/runs/log.txt 2>&1 &
set -euo pipefail
cd "$(dirname "$0")"
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
PY=../.venv/bin/python
SWARM=../.venv/bin/swarm
[ -f runs/warmstart/model.safetensors ] && [ -f runs/warmstart/sft_done ] || {
    nice -n 10 $PY parl_fetch.py warmstart && touch runs/warmstart/sft_done; }
nice -n 10 $SWARM train --config parl_fetch.toml --no-progress
nice -n 10 $SWARM train --config parl_fetch_ablation.toml --no-progress
$PY parl_fetch.py report
$SWARM train plot runs/parl --out plots/parl
$SWARM train plot runs/ablation --out plots/ablation
