#!/usr/bin/env bash
# The four workloads on the embedded local model (Qwen2.5-Coder-0.5B Q4_K_M in llama.cpp), swarm and
# single-agent mode on the same tasks, one workload after another. Results go to
# traces/eval/<RUN_PREFIX>-<workload>/ (episodes.jsonl.gz grows as episodes finish, so a cut-off run keeps
# its data and reruns with --resume; report.json and the printed table come at the end of each workload).
#
#     nohup nice -n 19 bash bench/run_local_eval.sh > traces/eval/local.log 2>&1 &
#
# Settings (override through the environment): TASKS=10 per workload; MAX_TOKENS=128 completion tokens
# per turn; each workload's own budgets unless MAX_CRITICAL (critical steps per episode) or MAX_SUB_STEPS
# (steps per sub-agent) are set (swarm eval refuses budgets below what the workload's gold policy needs);
# EPISODE_TIMEOUT=600 s as a safety net only; greedy decoding,
# seed 0. Smaller knobs than the gold table for the two widest workloads (tau2-batch k=4,
# wide-lookup entities=8) keep the run near 100 minutes on 2 shared cores. SWARM_LOCAL_CTX=8192
# tokens per llama.cpp slot: tau2's retail policy and 16 tool schemas do not fit in the default 4096.
# SWARM_LOCAL_THREADS=1: on 2 cores that other jobs keep busy, a niced 2-thread llama.cpp decode
# stalls on its thread barrier (measured 0.2 tok/s against 2.2 tok/s with 1 thread at load ~7);
# set it to 2 on an idle machine.
# WORKLOADS picks a subset, e.g. WORKLOADS="bfcl-parallel deep-lookup". CONFIG=FILE adds --config FILE,
# e.g. CONFIG=bench/local_free_decoding.toml turns off the grammar-constrained actions.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
TASKS=${TASKS:-10}
MAX_TOKENS=${MAX_TOKENS:-128}
MAX_CRITICAL=${MAX_CRITICAL:-}
MAX_SUB_STEPS=${MAX_SUB_STEPS:-}
EPISODE_TIMEOUT=${EPISODE_TIMEOUT:-600}
RUN_PREFIX=${RUN_PREFIX:-local-$(date -u +%Y%m%d-%H%M)}
OUT=${OUT:-traces/eval}
WORKLOADS=${WORKLOADS:-bfcl-parallel deep-lookup wide-lookup tau2-batch}
export SWARM_LOCAL_CTX=${SWARM_LOCAL_CTX:-8192}
export SWARM_LOCAL_THREADS=${SWARM_LOCAL_THREADS:-1}
# Run this checkout's code even when the venv's editable install points at another one.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

knobs_for() {
  case "$1" in
    tau2-batch) echo "-k k=4" ;;
    wide-lookup) echo "-k entities=8" ;;
    *) echo "" ;;
  esac
}

"$PY" -c 'import xllamacpp, agent_swarm.swarm.backends.local as m; print("model", m.QWEN_FILE, "sha256", m.QWEN_SHA256, "xllamacpp", getattr(xllamacpp, "__version__", "?"))'
echo "SWARM_LOCAL_CTX=$SWARM_LOCAL_CTX SWARM_LOCAL_THREADS=$SWARM_LOCAL_THREADS"
echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' (dirty tree)')"
for wl in $WORKLOADS; do
  echo "== $wl  start $(date -u +%FT%TZ)  $(uptime)"
  # shellcheck disable=SC2046
  "$PY" -m orchestrator eval -w "$wl" -b local -n "$TASKS" --seed 0 --mode both --temperature 0 \
    --max-tokens "$MAX_TOKENS" ${MAX_CRITICAL:+--max-critical-steps "$MAX_CRITICAL"} \
    ${MAX_SUB_STEPS:+--max-subagent-steps "$MAX_SUB_STEPS"} \
    --episode-timeout "$EPISODE_TIMEOUT" $(knobs_for "$wl") ${CONFIG:+-c "$CONFIG"} --out "$OUT" --run-id "$RUN_PREFIX-$wl"
  rc=$?
  echo "== $wl  end $(date -u +%FT%TZ)  exit $rc  $(uptime)"
done
