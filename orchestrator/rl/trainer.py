"""The orchestrator-only RL trainer: rollout → rewards → update → push weights → repeat.

PARL's update (Kimi K2.5 report §4.4.2, https://arxiv.org/abs/2602.02276): only the orchestrator's
tokens are trained; the sub-agents stay frozen.

One iteration (a *step*):

1. **rollout** — K episodes per task (:func:`agent_swarm.orchestrator.rollout.collection.collect_rollouts`, written
under
   ``run_dir/rollouts/step-NNNNNN``): the orchestrator samples from the current policy (the
   colocated :class:`~agent_swarm.swarm.backends.transformers_backend.TransformersBackend`), sub-agents run on
   their own *frozen* backend, every episode is scored with the PARL reward at this step's λs;
2. **rewards** — optionally Toggle (budget-limited / free phases), then group advantages
   ``r − r̄`` (:data:`~agent_swarm.swarm.rl.rewards.ADVANTAGES`, the same registry rollout collection uses);
3. **update** — with the engine paused, the policy loss (:data:`~agent_swarm.swarm.rl.losses.LOSSES`,
   K2.5's by default) plus an optional PTX loss is minimised over ``minibatches × epochs`` optimizer
   steps, gradients clipped. π_old is the engine's sampling (behaviour) logprobs by default, so the
   K2.5 log-ratio mask and τ penalty act on the engine/trainer mismatch they exist for
   (``old_logprobs = "recompute"`` uses the trainer's own pre-update logprobs instead); the
   mismatch and the fraction of masked tokens are logged;
4. **push** — the colocated engine already holds the new weights; its ``weight_version`` is bumped
   so every later completion (and trajectory) names the policy that sampled it. A separate serving
   engine gets the weights through :class:`WeightSync`.

The seams, one module each: the config (:mod:`.config`), what episodes run in (:mod:`.environment`),
the policy and frozen sub-agents (:mod:`.policy`), training sequences (:mod:`.sequences`), the pure
update (:func:`.update.update_policy`), checkpoints (:mod:`.checkpoint`), metrics (:mod:`.metrics`) and
serving, chosen by name from :data:`.serving.SERVING`. :class:`Trainer` composes them.

Only the orchestrator's parameters are given to the optimizer; the sub-agent model is a separate
module with ``requires_grad=False``. Checkpoints (policy weights, optimizer, trainer state) are
written atomically every ``checkpoint_every`` steps; :meth:`Trainer.run` resumes from the newest
one, re-running an interrupted step's rollout from what is already on disk. Metrics go to
``run_dir/metrics.jsonl``, one line per step.
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import torch

from agent_swarm.orchestrator.rl.checkpoint import (
    CheckpointState,
    latest_checkpoint,
    load_optimizer_states,
    load_policy_weights,
    read_checkpoint_state,
    rng_from_json,
    rng_to_json,
    save_checkpoint,
)
from agent_swarm.orchestrator.rl.config import TrainConfig
from agent_swarm.orchestrator.rl.environment import Environment, training_environment
from agent_swarm.orchestrator.rl.metrics import METRICS, StepMetrics, append_jsonl, step_metrics, truncate_metrics
from agent_swarm.orchestrator.rl.policy import build_policy, frozen_copy
from agent_swarm.orchestrator.rl.sequences import TrainingSequence, sft_example, training_sequences
from agent_swarm.orchestrator.rl.serving import SERVING, ServingInputs, WeightSync
from agent_swarm.orchestrator.rl.update import UpdateSpec, build_optimizers, update_policy
from agent_swarm.orchestrator.rollout.collection import collect_rollouts
from agent_swarm.orchestrator.rollout.episodes import EpisodeEntry, orchestrator_factory
from agent_swarm.swarm.backend import ModelBackend
from agent_swarm.swarm.backends.transformers_backend import TransformersBackend
from agent_swarm.swarm.errors import ConfigError, UserError
from agent_swarm.swarm.records import EpisodeRecord
from agent_swarm.swarm.rl.export import read_jsonl
from agent_swarm.swarm.rl.rewards import ADVANTAGES, PARLReward
from agent_swarm.swarm.rl.toggle import toggle_phase, toggle_rewards, update_budgets

__all__ = ["Trainer"]


class Trainer:
    """``Trainer(config, policy, env).run()``; or :meth:`from_config` to build everything from a file.

    ``policy`` holds the trained module. By default it is also the colocated engine: rollouts sample
    from it and updates change its module in place. With ``engine`` (e.g. a
    :class:`~agent_swarm.swarm.backends.vllm_engine.VLLMEngineBackend`), rollouts sample from that separate
    serving engine instead, and ``sync`` (required then, e.g.
    :class:`~agent_swarm.orchestrator.rl.vllm_sync.VLLMWeightSync`) pushes the new weights into it after each
    update; the engine's logprobs are the behaviour policy and their gap to the trainer's
    recomputation is logged as ``ratio_mismatch``.
    """

    def __init__(
        self,
        config: TrainConfig,
        policy: TransformersBackend,
        env: Environment,
        *,
        engine: ModelBackend | None = None,
        sync: WeightSync | None = None,
        on_step: Callable[[StepMetrics], None] | None = None,
        base_gguf: Path | None = None,
    ) -> None:
        config.check_names()
        if engine is not None and engine is not policy and sync is None:
            raise ConfigError("a separate serving engine needs a WeightSync to receive the new weights (sync=...)")
        if not env.tasks:
            raise ConfigError("the training environment has no tasks")
        if len({t.id for t in env.tasks}) != len(env.tasks) or not all(t.id for t in env.tasks):
            raise ConfigError("training tasks need unique, non-empty ids (they name the groups)")
        self.config = config
        self.policy = policy
        self.env = env
        self.sync = sync
        self.base_gguf = base_gguf
        """The GGUF base of a LoRA policy: checkpoints then also hold the adapter in llama.cpp's format."""
        self.engine: ModelBackend = engine or policy
        self.on_step = on_step
        self.model: Any = policy.hf_model  # a transformers PreTrainedModel
        if env.subagent_backend is None:
            env.subagent_backend = frozen_copy(policy, name=f"{policy.model}-frozen")
        sub_model = getattr(env.subagent_backend, "hf_model", None)
        if sub_model is not None and any(p is q for p in sub_model.parameters() for q in self.model.parameters()):
            raise ConfigError("the sub-agent backend shares parameters with the policy; give it a frozen copy")
        self.reward = env.reward or PARLReward(config.reward)
        self.run_dir = config.run_dir
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.optimizers = build_optimizers(self.model, config.optim)
        self.step = 0
        self.budgets: dict[str, float] | None = None
        self.rng = random.Random(config.seed)
        self._sft = [sft_example(policy.tokenizer, conv, env.tool_specs) for conv in env.sft] if config.ptx else []
        if config.ptx and not self._sft:
            raise ConfigError("ptx is configured but the environment has no SFT conversations")

    # -- construction from a config ----------------------------------------------------------------

    @classmethod
    def from_config(cls, config: TrainConfig, *, config_dir: Path | None = None, **kwargs: Any) -> Trainer:
        """Build the policy, the environment and the serving kind ``config.engine`` names, then the trainer
        (``engine`` / ``sync`` in ``kwargs`` take the place of the serving kind's)."""
        policy, policy_dir, gguf = build_policy(config)
        search = [p for p in (config_dir, Path.cwd()) if p is not None]
        env = training_environment(config, policy.tokenizer, search)
        serving = SERVING.get(config.engine)(
            ServingInputs(
                policy=policy,
                run_dir=config.run_dir,
                dtype=config.dtype,
                policy_dir=policy_dir,
                policy_gguf=config.policy_gguf,
                gguf=gguf,
                llamacpp=config.llamacpp,
                vllm_engine_args=config.vllm_engine_args,
            )
        )
        if serving.engine is not None:
            kwargs.setdefault("engine", serving.engine)
        if serving.sync is not None:
            kwargs.setdefault("sync", serving.sync)
        sub_base = serving.subagents  # the engine's frozen base: the only sub-agents the cache can pin
        if sub_base is not None and env.subagent_backend is None:
            env.subagent_backend = sub_base
        if config.subagent_cache is not None:
            # only the engine's own base model: a subagent_model or an environment's backend is not pinned
            pinned = sub_base if sub_base is not None and env.subagent_backend is sub_base else None
            env.subagent_backend = _cached_subagents(config, pinned)
        return cls(config, policy, env, base_gguf=gguf, **kwargs)

    # -- the loop ----------------------------------------------------------------------------------

    def run(self, steps: int | None = None) -> list[StepMetrics]:
        """Blocking :meth:`arun` (one event loop for the whole run)."""
        return anyio.run(self.arun, steps)

    async def arun(self, steps: int | None = None) -> list[StepMetrics]:
        """Run until ``config.steps`` (or ``steps`` more), resuming from the newest checkpoint."""
        await self.aresume()
        target = self.config.steps if steps is None else self.step + steps
        out = []
        while self.step < target:
            out.append(await self.atrain_step())
        return out

    def train_step(self) -> StepMetrics:
        """Blocking :meth:`atrain_step`."""
        return anyio.run(self.atrain_step)

    async def atrain_step(self) -> StepMetrics:
        """One iteration: rollout → rewards (Toggle) → advantages → update → push → log/checkpoint."""
        cfg = self.config
        step = self.step
        torch.manual_seed(cfg.seed * 1_000_003 + step)
        temperature = cfg.temperature.value(step)
        t0 = time.perf_counter()
        records = await self._rollout(step, temperature)
        rollout_s = time.perf_counter() - t0

        rewards, phase, zeroed = self.shape_rewards(step, records)
        advantages = ADVANTAGES.get(cfg.advantage)(rewards, [r.task.id for r in records])
        seqs, dropped, split = training_sequences(records, advantages, temperature)

        t1 = time.perf_counter()
        upd = await anyio.to_thread.run_sync(self._paused_update, seqs)
        if self.sync is not None:
            await self.sync.push(self.model, self.policy.weight_version)
        update_s = time.perf_counter() - t1
        self.step = step + 1
        metrics = step_metrics(
            step,
            records,
            rewards,
            upd,
            lambdas=self.reward.lambdas(step),
            weight_version=self.policy.weight_version,
            temperature=temperature,
            phase=phase,
            zeroed=zeroed,
            sequences=len(seqs),
            dropped=dropped,
            split=split,
            rollout_s=rollout_s,
            update_s=update_s,
        )
        append_jsonl(self.run_dir / METRICS, metrics.model_dump(mode="json"))
        if self.step % cfg.checkpoint_every == 0 or self.step == cfg.steps:
            self.save_checkpoint()
        if not cfg.keep_rollouts:
            shutil.rmtree(self._rollout_dir(step), ignore_errors=True)
        if self.on_step is not None:
            self.on_step(metrics)
        return metrics

    def shape_rewards(self, step: int, records: Sequence[EpisodeRecord]) -> tuple[list[float], int | None, int]:
        """(rewards the update uses, Toggle phase or None, responses Toggle zeroed) of a step's episodes.

        The reward is the PARL total; Toggle (when configured) judges group accuracy on ``r_perf`` and
        gives every task a length budget the first time it has a correct response (then keeps it).
        """
        cfg = self.config
        rewards = [r.reward.total if r.reward else 0.0 for r in records]
        if cfg.toggle is None:
            return rewards, None, 0
        groups = [r.task.id for r in records]
        perf = [r.reward.r_perf if r.reward else 0.0 for r in records]
        lengths = [_episode_length(r, cfg.toggle.length) for r in records]
        self.budgets = update_budgets(self.budgets, perf, lengths, groups, cfg.toggle.p, cfg.toggle.correct_at)
        toggled = toggle_rewards(rewards, perf, lengths, groups, self.budgets, step, cfg.toggle.m, cfg.toggle.lam)
        zeroed = sum(1 for a, b in zip(rewards, toggled, strict=True) if a != b)
        return toggled, toggle_phase(step, cfg.toggle.m), zeroed

    async def _disconnect(self) -> None:
        """Close the HTTP connections of the backends on the serving llama.cpp engine (they belong to this
        event loop; the next rollout, maybe in another loop, reconnects). The engine keeps running."""
        from agent_swarm.swarm.backends.local import LocalBackend

        serving = getattr(self.sync, "engine", None)
        for b in (self.engine, self.env.subagent_backend):
            if isinstance(b, LocalBackend) and serving is not None and b.engine is serving:
                await b.aclose()

    def close(self) -> None:
        """Stop a llama.cpp serving engine this trainer pushes adapters into (nothing else needs closing)."""
        engine = getattr(self.sync, "engine", None)
        if engine is not None and hasattr(engine, "close"):
            engine.close()

    def _rollout_dir(self, step: int) -> Path:
        return self.run_dir / "rollouts" / f"step-{step:06d}"

    def _paused_update(self, seqs: list[TrainingSequence]) -> dict[str, float]:
        """The update with the colocated engine paused, then the new weight version."""
        with self.policy.paused():
            upd = self.update(seqs)
            self.policy.weight_version += 1
        return upd

    async def _rollout(self, step: int, temperature: float) -> list[EpisodeRecord]:
        cfg = self.config
        tasks = list(self.env.tasks)
        r = random.Random(cfg.seed * 7919 + step)
        picked = tasks if cfg.tasks_per_step >= len(tasks) else r.sample(tasks, cfg.tasks_per_step)
        sampling = cfg.swarm.orchestrator_sampling.model_copy(update={"temperature": temperature})
        swarm_cfg = cfg.swarm.model_copy(update={"orchestrator_sampling": sampling})
        if self.env.factory is not None:
            factory = self.env.factory(self.engine, self.env.subagent_backend)
        else:
            factory = orchestrator_factory(
                self.engine, subagent_backend=self.env.subagent_backend, tools=self.env.tools, agents=self.env.agents
            )
        self.reward.step = step
        out = self._rollout_dir(step)
        # the trajectories on disk carry the advantages of the estimator the update uses
        rollout_cfg = cfg.rollout.model_copy(update={"seed": cfg.seed * 1_000_003 + step, "advantage": cfg.advantage})

        try:
            await collect_rollouts(
                picked, factory, out_dir=out, config=rollout_cfg, swarm_config=swarm_cfg, reward=self.reward
            )
        finally:
            await self._disconnect()
        entries = read_jsonl(out / "episodes.jsonl", EpisodeEntry, on_error="skip")
        wanted = {t.id for t in picked}
        records = [
            e.record for e in sorted(entries, key=lambda e: (e.group_id, e.sample_index)) if e.group_id in wanted
        ]
        if not records:
            raise UserError(f"step {step}: no episode finished (see {out / 'failures.jsonl'})")
        return records

    # -- the update, checkpoints -------------------------------------------------------------------

    def update(self, seqs: list[TrainingSequence]) -> dict[str, float]:
        """One update on a rollout's sequences (call with the engine paused); returns the step's update
        metrics (:func:`~agent_swarm.orchestrator.rl.update.update_policy` with this trainer's model, optimizers and
        rng)."""
        return update_policy(self.model, self.optimizers, seqs, UpdateSpec.of(self.config), rng=self.rng, sft=self._sft)

    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/step-NNNNNN`` atomically (tmp dir + rename) and prune old ones."""
        state = CheckpointState(
            step=self.step,
            weight_version=self.policy.weight_version,
            budgets=self.budgets,
            python_rng=rng_to_json(self.rng.getstate()),
        )
        return save_checkpoint(
            self.run_dir,
            state,
            self.model,
            self.policy.tokenizer,
            self.optimizers,
            keep=self.config.keep_checkpoints,
            base_gguf=self.base_gguf,
        )

    def latest_checkpoint(self) -> Path | None:
        return latest_checkpoint(self.run_dir)

    def resume(self) -> int:
        """Blocking :meth:`aresume`."""
        return anyio.run(self.aresume)

    async def aresume(self) -> int:
        """Load the newest complete checkpoint (if any); drop metrics lines of steps not in it."""
        ckpt = self.latest_checkpoint()
        if ckpt is None or self.step > 0:
            return self.step
        state = read_checkpoint_state(ckpt)
        with self.policy.paused():
            load_policy_weights(ckpt, self.model)
            self.policy.weight_version = state.weight_version
        load_optimizer_states(ckpt, self.optimizers)
        self.step = state.step
        self.budgets = state.budgets
        if state.python_rng is not None:
            self.rng.setstate(rng_from_json(state.python_rng))
        truncate_metrics(self.run_dir / METRICS, state.step)
        if self.sync is not None:
            await self.sync.push(self.model, self.policy.weight_version)
        return self.step


def _cached_subagents(config: TrainConfig, sub: ModelBackend | None) -> ModelBackend:
    """The frozen sub-agents behind the replay cache: only where their weights are pinned by hash."""
    from agent_swarm.orchestrator.backend_factory import model_identity, with_subagent_cache

    if config.engine != "llamacpp" or config.policy_gguf is None or sub is None:
        raise ConfigError(
            "subagent_cache needs sub-agents whose weights are pinned by hash: set engine = 'llamacpp' "
            "with policy_gguf and no other sub-agent model (sub-agents then run its frozen GGUF base), "
            "or remove subagent_cache"
        )
    assert config.subagent_cache is not None
    return with_subagent_cache(
        sub, sub, directory=config.subagent_cache, model_id=model_identity("local", config.policy_gguf)
    )


def _episode_length(record: EpisodeRecord, kind: str) -> float:
    if kind == "critical_steps":
        return float(record.dag.critical_steps)
    return float(sum(len(t.response_token_ids or ()) for t in record.turns))
