#!/usr/bin/env bash
# The whole CPU experiment, low priority, for each seed (default 0 1 2): warm start (SFT on the training
# files), then the PARL run and the λ = 0 ablation (same code, same warm start, same seed), then the
# held-out evaluation of every warm start and final policy, and the report with intervals over seeds.
# Usage: nohup experiments/run_parl_fetch.sh 0 1 2 > experiments/runs/log.txt 2>&1 &
# Re-running resumes: finished warm starts are kept, `swarm train` resumes from its checkpoints.
set -euo pipefail
cd "$(dirname "$0")"
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
PY=../.venv/bin/python
SWARM=../.venv/bin/swarm
SEEDS=("${@:-0 1 2}")
for seed in ${SEEDS[@]}; do
    $PY parl_fetch.py configs "$seed" > /dev/null
    [ -f "runs/s$seed/warmstart/sft_done" ] || {
        nice -n 10 $PY parl_fetch.py warmstart "$seed" && touch "runs/s$seed/warmstart/sft_done"; }
    for variant in parl ablation; do
        nice -n 10 $SWARM train --config "runs/s$seed/$variant.toml" --no-progress > "runs/s$seed/$variant.log" 2>&1
    done
done
nice -n 10 $PY parl_fetch.py eval
$PY parl_fetch.py report
for variant in parl ablation; do
    $SWARM train plot "runs/s${SEEDS[0]%% *}/$variant"
    cp "runs/s${SEEDS[0]%% *}/$variant/plots/summary.png" "parl_fetch_${variant}_summary.png"
done
