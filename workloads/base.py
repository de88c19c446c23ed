"""The workload interface and the registry of workloads by name.

A workload is a task generator plus, per task, a fresh environment (tools over shared state), the
predefined sub-agent types, a scorer, and a *gold scripted* policy for both modes:

* ``swarm`` — the orchestrator delegates to sub-agents (one stage of parallel sub-agents, then an answer);
* ``single`` — one agent does everything itself with the same tools, one step after another.

Tasks are plain :class:`~agent_swarm.swarm.records.Task` objects whose ``metadata`` holds everything needed to
rebuild the episode (``metadata["workload"]`` names the workload), so they can be written to a
JSONL task file and read back by ``swarm run``/``swarm rollout``; :func:`episode_for` is the hook
those commands call to get the tools, agents and reward function of a task::

    wl = get_workload("tau2-batch")
    task = wl.tasks(1, seed=0, k=8)[0]
    ep = wl.episode(task, "swarm")           # fresh DB, tools, agents, scorer
    gold = wl.gold_policy(task, "swarm")     # FunctionBackend policies that solve it
    ...Orchestrator(gold.orchestrator, cfg, tools=ep.tools, agents=ep.agents,
                    subagent_backend=gold.subagent, reward_fn=ep.reward)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_swarm.swarm.backend import ModelBackend, ModelRequest
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import ConfigError, validation_problems
from agent_swarm.swarm.messages import ToolMessage, UserMessage
from agent_swarm.swarm.records import AgentDefinition, AgentStatus, EpisodeRecord, RewardRecord, Task
from agent_swarm.swarm.registry import Registry
from agent_swarm.swarm.rl.rewards import RewardFn, parl_total
from agent_swarm.tools.registry import Tool
from agent_swarm.workloads.splits import check_split

__all__ = [
    "MODES",
    "WORKLOADS",
    "Episode",
    "GoldPolicy",
    "Knobs",
    "Mode",
    "Score",
    "Workload",
    "episode_for",
    "finish_rate",
    "get_workload",
    "register_workload",
    "workload_names",
]
"""What :mod:`agent_swarm.workloads` exports from here; the gold policies' helpers (:func:`user_text`,
:func:`tool_messages`) are for the workloads in this package and stay out."""

Mode = Literal["swarm", "single"]
MODES: tuple[Mode, ...] = get_args(Mode)


class Knobs(BaseModel):
    """Base of a workload's difficulty knobs; unknown knobs are an error."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_knobs: ClassVar[frozenset[str]] = frozenset()
    """Knobs that change the tools an episode gets, never its tasks (names, facts, gold)."""

    def task_scope(self) -> dict[str, Any]:
        """The knobs that make the tasks (JSON values): what a burnt test seed is recorded and checked
        against, so a tool knob cannot make a used seed's tasks look fresh."""
        return {k: v for k, v in self.model_dump(mode="json").items() if k not in self.tool_knobs}


K = TypeVar("K", bound=Knobs)


class Score(BaseModel):
    """A workload's verdict on one episode: the primary metric in [0, 1], success, and the details.

    ``items`` holds the per-item scores behind the metric (item id → score in [0, 1], one per gold
    item: a fact, a looked-up cell, a gold call, a ticket), so raw data can be re-aggregated and
    paired per item; aggregates (precision, F1, counts) stay in ``details``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    metric: float = Field(ge=0.0, le=1.0)
    success: bool
    details: dict[str, Any] = Field(default_factory=dict)
    items: dict[str, Annotated[float, Field(ge=0.0, le=1.0)]] = Field(default_factory=dict)

    def reward_details(self) -> dict[str, Any]:
        """What a reward record's ``details`` holds: success, the details and the per-item scores."""
        return {"success": self.success, **self.details, "items": dict(self.items)}


@dataclass(frozen=True)
class Episode:
    """What one episode of a workload task needs. Build a new one per episode (fresh state).

    ``instructions`` is the workload's system-prompt text for this mode (the caller appends it to the
    orchestrator's default prompt in swarm mode, and uses it alone in single mode). ``config`` sets
    the :class:`~agent_swarm.swarm.config.SwarmConfig` fields the workload needs (budgets); only the fields it
    sets override the run's config (``config.model_fields_set``).
    """

    task: Task
    mode: Mode
    tools: tuple[Tool, ...]
    agents: tuple[AgentDefinition, ...]
    instructions: str
    scorer: Callable[[EpisodeRecord], Score]
    config: SwarmConfig = field(default_factory=SwarmConfig)

    @classmethod
    def one_agent(
        cls,
        task: Task,
        mode: Mode,
        *,
        tools: tuple[Tool, ...],
        agent: str,
        system_prompt: str,
        instructions: Mapping[Mode, str],
        scorer: Callable[[EpisodeRecord], Score],
        config: SwarmConfig,
    ) -> Episode:
        """The episode of a task whose sub-agents are of one predefined type, ``agent``, with every tool of the
        episode (its system prompt ``system_prompt``): the instructions of ``mode``, the scorer and the budgets."""
        definition = AgentDefinition(name=agent, tools=tuple(t.name for t in tools), system_prompt=system_prompt)
        return cls(task, mode, tools, (definition,), instructions[mode], scorer, config)

    def score(self, record: EpisodeRecord) -> Score:
        """Score a finished episode against this episode's environment."""
        return self.scorer(record)

    async def reward(self, record: EpisodeRecord) -> RewardRecord:
        """``Orchestrator(reward_fn=ep.reward)``: ``r_perf`` is the workload metric (PARL terms are 0 here)."""
        s = self.score(record)
        return RewardRecord(
            total=s.metric,
            r_perf=s.metric,
            verifier=f"workload:{self.task.metadata.get('workload', '?')}",
            details=s.reward_details(),
        )

    def reward_with(self, parl: RewardFn) -> RewardFn:
        """``parl``'s reward (PARL terms and λs, e.g. a :class:`~agent_swarm.swarm.rl.rewards.PARLReward`) with
        ``r_perf`` replaced by this episode's workload score: what rollouts and training optimise."""

        async def reward(record: EpisodeRecord) -> RewardRecord:
            base = await parl(record)
            score = self.score(record)
            total = parl_total(score.metric, base.r_parallel, base.r_finish, base.lambda1, base.lambda2)
            return base.model_copy(
                update={
                    "total": total,
                    "r_perf": score.metric,
                    "verifier": f"workload:{self.task.metadata['workload']}",
                    "details": {**base.details, **score.reward_details()},
                    "error": None,
                }
            )

        return reward


@dataclass(frozen=True)
class GoldPolicy:
    """Scripted policies that react to real tool results: orchestrator and sub-agent backends."""

    orchestrator: ModelBackend
    subagent: ModelBackend


class Workload(ABC):
    """A named task set with its environment, scorer and gold policies."""

    name: ClassVar[str]
    metric: ClassVar[str]
    description: ClassVar[str]
    knobs_model: ClassVar[type[Knobs]] = Knobs

    def knobs(self, values: Mapping[str, Any]) -> Knobs:
        """Validate difficulty knobs; unknown or bad values raise :class:`ConfigError`."""
        try:
            return self.knobs_model.model_validate(dict(values))
        except ValidationError as exc:
            known = ", ".join(f"{k} (default {f.default!r})" for k, f in self.knobs_model.model_fields.items())
            problems = validation_problems(exc, "knobs")
            raise ConfigError(f"invalid knobs for workload {self.name!r}: {problems}. Known knobs: {known}") from None

    def request(self, n: int, split: str, knobs: Mapping[str, Any], model: type[K]) -> K:
        """The knobs of a request for ``n`` tasks of ``split``, validated as ``model`` (this workload's
        :attr:`knobs_model`). Bad knobs, ``n < 1`` or a split not in :data:`~agent_swarm.workloads.splits.SPLITS`
        raise a ConfigError naming the fix."""
        kn = self.knobs(knobs)
        if not isinstance(kn, model):
            raise TypeError(
                f"workload {self.name!r} validates knobs as {self.knobs_model.__name__}, not {model.__name__}"
            )
        check_split(split, self.name)
        if n < 1:
            raise ConfigError(f"n must be at least 1, got {n}")
        return kn

    @abstractmethod
    def tasks(self, n: int, *, seed: int = 0, split: str = "train", **knobs: Any) -> list[Task]:
        """``n`` tasks of ``split`` (``train``, ``dev`` or ``test``), deterministic for a given seed, split
        and knobs; no task of one split appears in another (:mod:`agent_swarm.workloads.splits`)."""

    @abstractmethod
    def episode(self, task: Task, mode: Mode) -> Episode:
        """A fresh environment for one episode of ``task`` (built from ``task.metadata`` only)."""

    @abstractmethod
    def gold_policy(self, task: Task, mode: Mode, *, latency_s: float = 0.0) -> GoldPolicy:
        """The gold scripted policy for ``task`` in ``mode`` (``latency_s`` simulates model latency)."""

    def check_task(self, task: Task) -> None:
        """Raise ConfigError when ``task`` was not generated by this workload."""
        if task.metadata.get("workload") != self.name:
            raise ConfigError(
                f"task {task.id!r} belongs to workload {task.metadata.get('workload')!r}, not {self.name!r}"
            )


WORKLOADS: Registry[Callable[[], Workload]] = Registry("workload")
"""Workload factories by name (``swarm rollout --workload NAME``, a task's ``metadata["workload"]``)."""


def register_workload(name: str, factory: Callable[[], Workload], *, replace: bool = False) -> None:
    """Register a workload factory under ``name``."""
    WORKLOADS.add(name, factory, replace=replace)


def workload_names() -> list[str]:
    """Names of the registered workloads, sorted."""
    return list(WORKLOADS.names)


def get_workload(name: str) -> Workload:
    """The workload called ``name``; an unknown name raises :class:`UnknownNameError` listing the known ones."""
    return WORKLOADS.get(name)()


def episode_for(task: Task, mode: Mode = "swarm") -> Episode:
    """The hook for task files: rebuild the episode of a workload task from its metadata."""
    name = task.metadata.get("workload")
    if not isinstance(name, str):
        raise ConfigError(f"task {task.id!r} has no metadata['workload']; it was not made by a workload")
    if mode not in MODES:
        raise ConfigError(f"mode must be one of {list(MODES)}, got {mode!r}")
    return get_workload(name).episode(task, mode)


# -- helpers for scripted policies ----------------------------------------------------------------------


def _task_start(request: ModelRequest) -> int:
    """Index of the agent's task: the last user message that follows no tool result or user message
    (those are a coach's notices: "If the results above answer ..."). Earlier turns are context the
    prompt carries (a small-model profile's worked example), not this episode's conversation."""
    msgs = request.messages
    users = [i for i, m in enumerate(msgs) if isinstance(m, UserMessage)]
    for i in reversed(users):
        if i == 0 or not isinstance(msgs[i - 1], ToolMessage | UserMessage):
            return i
    return users[-1] if users else len(msgs)


def user_text(request: ModelRequest) -> str:
    """The agent's task: the last user message of the request (empty when there is none)."""
    start = _task_start(request)
    msg = request.messages[start] if start < len(request.messages) else None
    return msg.content if isinstance(msg, UserMessage) else ""


def tool_messages(request: ModelRequest, name: str | None = None) -> list[ToolMessage]:
    """The tool results the agent has seen since its task (optionally only those of tool ``name``)."""
    return [
        m
        for m in request.messages[_task_start(request) :]
        if isinstance(m, ToolMessage) and (name is None or m.name == name)
    ]


def finish_rate(record: EpisodeRecord) -> float | None:
    """Completed / assigned sub-agents (None when the episode ran none)."""
    subs = record.subagent_results
    if not subs:
        return None
    return sum(r.status is AgentStatus.COMPLETED for r in subs) / len(subs)
