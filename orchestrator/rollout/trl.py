"""The TRL adapter: :func:`trl_rollout_func`, a ``rollout_func`` for TRL's ``GRPOTrainer`` that runs swarm
episodes (TRL itself is not imported: the trainer hands the function its prompts and itself)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from agent_swarm.orchestrator.engine import RewardFn
from agent_swarm.orchestrator.rollout.episodes import EpisodeFactory, EpisodeJob, episode_seed
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.limits import CapacityLimit
from agent_swarm.swarm.records import EpisodeRecord, Task
from agent_swarm.swarm.rl.export import to_trl_rollout
from agent_swarm.swarm.rl.rewards import ADVANTAGES, PARLReward
from agent_swarm.swarm.rl.trajectory import Trajectory, build_trajectory

__all__ = ["trl_rollout_func"]

_Groups = list[tuple[Task, int]]
"""Runs of identical prompts, in order: each run's task (its id made unique by its index) and length."""


def _prompt_text(prompt: Any) -> str:
    """A TRL prompt: plain text, or a conversation whose last user message is the task."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if users and isinstance(users[-1], str):
            return users[-1]
    raise ConfigError(f"cannot read a task from TRL prompt {prompt!r}: give text or chat messages with a user turn")


def _groups(prompts: list[Any], by_prompt: dict[str, Task]) -> _Groups:
    """Every run of identical prompts becomes one group; a prompt equal to a given task's uses that task."""
    groups: _Groups = []
    for text in (_prompt_text(p) for p in prompts):
        if groups and groups[-1][0].prompt == text:
            groups[-1] = (groups[-1][0], groups[-1][1] + 1)
        else:
            n = len(groups)
            task = by_prompt.get(text) or Task(id=f"trl-{n}-{hashlib.sha1(text.encode()).hexdigest()[:8]}", prompt=text)
            groups.append((task.model_copy(update={"id": f"{task.id}@{n}"}), 1))
    return groups


def _run_groups(
    groups: _Groups,
    factory: EpisodeFactory,
    base: SwarmConfig,
    reward_fn: RewardFn,
    *,
    seed: int,
    max_concurrent_episodes: int,
) -> dict[tuple[int, int], EpisodeRecord]:
    """Every group's episodes, ``max_concurrent_episodes`` at a time, by (group, sample)."""
    records: dict[tuple[int, int], EpisodeRecord] = {}
    limiter = anyio.CapacityLimiter(max_concurrent_episodes)
    subagents = CapacityLimit()  # one sub-agent cap for the call's concurrent episodes

    async def one(g: int, task: Task, j: int) -> None:
        job = EpisodeJob(task, j, episode_seed(seed, task.id, j))
        orch = factory(job, job.seeded(base), reward_fn)
        async with limiter:
            records[(g, j)] = await orch.run(task, episode_id=job.episode_id, subagent_limit=subagents)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for g, (task, k) in enumerate(groups):
                for j in range(k):
                    tg.start_soon(one, g, task, j)

    anyio.run(main)
    return records


def trl_rollout_func(
    factory: EpisodeFactory,
    *,
    tasks: Sequence[Task] = (),
    swarm_config: SwarmConfig | None = None,
    reward: RewardFn | None = None,
    advantage: str = "group_mean",
    seed: int = 0,
    max_concurrent_episodes: int = 8,
) -> Callable[[list[Any], Any], dict[str, list[Any]]]:
    """A ``rollout_func`` for TRL's ``GRPOTrainer`` that runs swarm episodes.

    TRL hands the function each prompt ``num_generations`` times in a row; every run of identical
    prompts becomes one group: one episode per copy (distinct seeds), PARL rewards, advantages, then
    :func:`~agent_swarm.swarm.rl.export.to_trl_rollout` (``env_mask`` marks the orchestrator's own tokens, ``reward``
    and ``advantage`` reach the reward functions). A prompt equal to a given task's prompt uses that
    task (and its verifier). A :class:`~agent_swarm.swarm.rl.rewards.PARLReward` follows the trainer's
    ``state.global_step`` so the λ schedules anneal with training. An episode that cannot become a
    trajectory raises :class:`~agent_swarm.swarm.rl.trajectory.TrajectoryError` (TRL needs one completion per prompt).
    """
    advantage_fn = ADVANTAGES.get(advantage)  # an unknown name fails here, before any episode runs
    by_prompt = {t.prompt: t for t in tasks}
    base = swarm_config or SwarmConfig()
    reward_fn: RewardFn = reward or PARLReward()

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        if isinstance(reward_fn, PARLReward):
            reward_fn.step = int(getattr(getattr(trainer, "state", None), "global_step", 0) or 0)
        groups = _groups(prompts, by_prompt)
        records = _run_groups(
            groups, factory, base, reward_fn, seed=seed, max_concurrent_episodes=max_concurrent_episodes
        )
        trajectories: list[Trajectory] = []
        for g, (task, k) in enumerate(groups):
            recs = [records[(g, j)] for j in range(k)]
            advs = advantage_fn([r.reward.total if r.reward else 0.0 for r in recs], [task.id] * k)
            trajectories += [
                build_trajectory(r, group_id=task.id, sample_index=j, advantage=a)
                for j, (r, a) in enumerate(zip(recs, advs, strict=True))
            ]
        return to_trl_rollout(trajectories)

    return rollout_func
