#!/usr/bin/env bash
# GRPO on the swarm's orchestrator with verl, one GPU node: the policy (FSDP actor + vLLM rollout servers,
# colocated by verl) trains; the frozen sub-agents run on their own vLLM server, started here first.
#
#   POLICY=/models/qwen2.5-coder-0.5b-instruct SUBAGENT=/models/qwen2.5-coder-0.5b-instruct \
#       bash examples/verl/run_main_ppo.sh [extra hydra overrides...]
#
# What runs where (docs/verl.md): verl's trainer drives Ray; its AgentLoopWorkers run one swarm episode
# per dataset row (agent_swarm.orchestrator.rl.verl_loop.SwarmAgentLoop); the orchestrator's turns go to verl's
# rollout servers through its server manager (token ids in, ids + logprobs out); sub-agents call the
# OpenAI-compatible server below. Scale them separately: more/larger GPUs under trainer.n_gpus_per_node
# for the policy, more `vllm serve` replicas (or a bigger SUB_GPU_FRAC) for the sub-agents.
# Resume: rerun with the same RUN_DIR (verl's trainer.resume_mode=auto picks up the last global_step_N).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
POLICY="${POLICY:?POLICY=path to the orchestrator model directory (local: no hub downloads at run time)}"
SUBAGENT="${SUBAGENT:-$POLICY}"
RUN_DIR="$(realpath -m "${RUN_DIR:-$ROOT/runs/verl-$(date +%Y%m%d-%H%M%S)}")"
WORKLOAD="${WORKLOAD:-starter}"
N_TRAIN="${N_TRAIN:-256}"
N_VAL="${N_VAL:-32}"
STEPS="${STEPS:-50}"
GROUP="${GROUP:-8}"                       # K: rollouts per task (one GRPO group)
BATCH="${BATCH:-16}"                      # tasks per step
SUB_PORT="${SUB_PORT:-8001}"
SUB_GPU_FRAC="${SUB_GPU_FRAC:-0.25}"      # the sub-agents' share of the GPU (same GPU as the policy here)
POLICY_GPU_FRAC="${POLICY_GPU_FRAC:-0.35}"  # verl's rollout servers' share; the rest is the FSDP actor's
PROMPT_LEN="${PROMPT_LEN:-4096}"          # the first orchestrator prompt (system prompt, tools, task)
RESPONSE_LEN="${RESPONSE_LEN:-4096}"      # all later turns with their observations
LR="${LR:-1e-6}"
SAVE_FREQ="${SAVE_FREQ:-10}"              # checkpoints (what a resume starts from); -1: none
TEST_FREQ="${TEST_FREQ:-10}"              # validation on the test split; -1: none
mkdir -p "$RUN_DIR/data"
cd "$ROOT"

# 1. data: Parquet from the workload's train split (and its test split for validation)
python examples/verl/build_dataset.py -w "$WORKLOAD" -n "$N_TRAIN" --split train --seed 0 -o "$RUN_DIR/data/train.parquet"
python examples/verl/build_dataset.py -w "$WORKLOAD" -n "$N_VAL" --split test --seed 1 -o "$RUN_DIR/data/val.parquet"

# 2. the loop's config and registry entry, with absolute paths (Ray workers run elsewhere)
sed "s#^base_url = .*#base_url = \"http://127.0.0.1:$SUB_PORT/v1\"#" examples/verl/agent_loop.toml > "$RUN_DIR/agent_loop.toml"
sed "s#swarm_config: .*#swarm_config: $RUN_DIR/agent_loop.toml#" examples/verl/agent_loop.yaml > "$RUN_DIR/agent_loop.yaml"
export SWARM_VERL_CONFIG="$RUN_DIR/agent_loop.toml"

# 3. the frozen sub-agents' server: its own vLLM engine, never the policy's rollout servers
if ! curl -sf "http://127.0.0.1:$SUB_PORT/v1/models" >/dev/null; then
    python -m vllm.entrypoints.openai.api_server --model "$SUBAGENT" --served-model-name subagent \
        --port "$SUB_PORT" --gpu-memory-utilization "$SUB_GPU_FRAC" --max-model-len 16384 \
        --enable-auto-tool-choice --tool-call-parser hermes > "$RUN_DIR/subagent-server.log" 2>&1 &
    SUB_PID=$!
    trap 'kill $SUB_PID 2>/dev/null || true' EXIT INT TERM
    for _ in $(seq 1 180); do
        curl -sf "http://127.0.0.1:$SUB_PORT/v1/models" >/dev/null && break
        kill -0 "$SUB_PID" 2>/dev/null || { tail -20 "$RUN_DIR/subagent-server.log"; exit 1; }
        sleep 2
    done
fi

# 4. verl: GRPO (r − group mean, PARL's advantage), the K2.5 loss, the swarm agent loop.
# swarm_k25's π_old is the rollout servers' logprobs: verl recomputes old_log_prob (decoupled mode) and
# hands the loss untruncated token IS weights exp(old − rollout) (rollout_is=token, threshold 1e9 > e^20,
# no batch normalisation, no rejection sampling), from which it recovers them; the loss and the agent loop
# refuse other settings (agent_swarm.orchestrator.rl.verl_loop.K25_VERL_OVERRIDES). trainer.use_v1=False: verl 0.9.1's
# legacy trainer, the one SwarmAgentLoopManager (the swarm's step metrics) plugs into.
python -m verl.trainer.main_ppo \
    trainer.use_v1=False \
    algorithm.adv_estimator=grpo \
    algorithm.norm_adv_by_std_in_grpo=False \
    algorithm.use_kl_in_reward=False \
    critic.enable=False \
    data.train_files="$RUN_DIR/data/train.parquet" \
    data.val_files="$RUN_DIR/data/val.parquet" \
    data.train_batch_size="$BATCH" \
    data.max_prompt_length="$PROMPT_LEN" \
    data.max_response_length="$RESPONSE_LEN" \
    data.filter_overlong_prompts=False \
    actor_rollout_ref.model.path="$POLICY" \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.actor.optim.lr="$LR" \
    actor_rollout_ref.actor.ppo_mini_batch_size="$BATCH" \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.actor.policy_loss.loss_mode=swarm_k25 \
    actor_rollout_ref.actor.loss_agg_mode=token-mean \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.n="$GROUP" \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.calculate_log_probs=True \
    actor_rollout_ref.rollout.gpu_memory_utilization="$POLICY_GPU_FRAC" \
    actor_rollout_ref.rollout.max_model_len=$((PROMPT_LEN + RESPONSE_LEN)) \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.rollout.agent.default_agent_loop=swarm_agent \
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$RUN_DIR/agent_loop.yaml" \
    +actor_rollout_ref.rollout.agent.agent_loop_manager_class=agent_swarm.orchestrator.rl.verl_loop.SwarmAgentLoopManager \
    actor_rollout_ref.rollout.agent.num_workers=4 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4 \
    algorithm.rollout_correction.rollout_is=token \
    algorithm.rollout_correction.rollout_is_threshold=1e9 \
    algorithm.rollout_correction.bypass_mode=False \
    algorithm.rollout_correction.rollout_is_batch_normalize=False \
    algorithm.rollout_correction.rollout_rs=null \
    trainer.logger='["console"]' \
    trainer.project_name=swarm-verl \
    trainer.experiment_name="$(basename "$RUN_DIR")" \
    trainer.default_local_dir="$RUN_DIR/checkpoints" \
    trainer.rollout_data_dir="$RUN_DIR/rollouts" \
    trainer.resume_mode=auto \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.save_freq="$SAVE_FREQ" \
    trainer.test_freq="$TEST_FREQ" \
    trainer.total_training_steps="$STEPS" \
    "$@" 2>&1 | tee -a "$RUN_DIR/train.log"
