#!/usr/bin/env bash
# The whole CPU experiment, low priority: warm start (SFT), then the PARL run and the λ = 0 ablation side
# by side (same code, same warm start, same seeds), then the report.
# Usage: nohup experiments/run_parl_fetch.sh > experiments/runs/log.txt 2>&1 &
set -euo pipefail
cd "$(dirname "$0")"
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
PY=../.venv/bin/python
SWARM=../.venv/bin/swarm
[ -f runs/warmstart/model.safetensors ] && [ -f runs/warmstart/sft_done ] || {
    nice -n 10 $PY parl_fetch.py warmstart && touch runs/warmstart/sft_done; }
nice -n 10 $SWARM train --config parl_fetch.toml --no-progress > runs/parl.log 2>&1 &
parl=$!
nice -n 10 $SWARM train --config parl_fetch_ablation.toml --no-progress > runs/ablation.log 2>&1 &
ablation=$!
wait $parl
wait $ablation
$PY parl_fetch.py report
for run in parl ablation; do
    $SWARM train plot runs/$run    # all curves in runs/$run/plots/
    cp runs/$run/plots/summary.png parl_fetch_${run}_summary.png
done
