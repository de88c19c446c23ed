"""What training episodes run in: the :class:`Environment` (tasks, tools, sub-agents, reward, SFT set)
and the three ways a training config names one (``workloads``, ``environment``, ``tasks_file``)."""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_swarm.orchestrator.rl.config import TrainConfig
from agent_swarm.orchestrator.rl.policy import frozen_model
from agent_swarm.orchestrator.rollout.episodes import EpisodeFactory
from agent_swarm.swarm.backend import ModelBackend, ToolSpec
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.messages import Message
from agent_swarm.swarm.records import AgentDefinition, Task
from agent_swarm.swarm.rl.rewards import PARLReward
from agent_swarm.tools.registry import Tool, ToolRegistry

__all__ = ["Environment", "load_environment", "training_environment", "workload_environment"]


@dataclass
class Environment:
    """What episodes run in: tasks, tools, predefined sub-agents, the frozen sub-agent backend,
    the reward (a :class:`~agent_swarm.swarm.rl.rewards.PARLReward`, whose ``step`` the trainer sets) and an
    optional SFT set (conversations) for the PTX loss."""

    tasks: Sequence[Task]
    tools: ToolRegistry | Iterable[Tool] = ()
    agents: Sequence[AgentDefinition] = ()
    subagent_backend: ModelBackend | None = None
    reward: PARLReward | None = None
    sft: Sequence[Sequence[Message]] = ()
    tool_specs: Sequence[ToolSpec] = field(default_factory=tuple)
    factory: Callable[[ModelBackend, ModelBackend | None], EpisodeFactory] | None = None
    """``(engine, sub-agent backend) -> EpisodeFactory`` when episodes need more than tools and
    agents (a workload task's job builds its own fresh environment); default: a plain orchestrator."""


def workload_environment(config: TrainConfig) -> Environment:
    """Tasks of ``config.workloads``; each episode gets its task's fresh workload environment and is
    scored by the workload (``r_perf``) with the PARL terms of ``config.reward`` on top."""
    from agent_swarm.orchestrator.eval import workload_orchestrator_factory

    modes = {w.mode for w in config.workloads}
    if len(modes) != 1:
        raise ConfigError(f"training workloads must share one mode, got {sorted(modes)}")
    mode = modes.pop()
    tasks = [t for w in config.workloads for t in w.tasks()]

    def factory(engine: ModelBackend, sub: ModelBackend | None) -> EpisodeFactory:
        return workload_orchestrator_factory(engine, sub, mode=mode)

    return Environment(tasks=tasks, reward=PARLReward(config.reward), factory=factory)


def load_environment(spec: str, config: TrainConfig, tokenizer: Any, search: Sequence[Path] = ()) -> Environment:
    """Import ``"module:attr"`` (a callable returning an :class:`Environment`) and call it."""
    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise ConfigError(f"environment must look like 'package.module:function', got {spec!r}")
    for p in search:
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))
    try:
        factory = getattr(importlib.import_module(_our_module(mod_name, attr)), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load environment {spec!r}: {exc}") from None
    env = factory(config, tokenizer)
    if not isinstance(env, Environment):
        raise ConfigError(f"environment {spec!r} returned {type(env).__name__}, not an Environment")
    return env


OLD_TOP_LEVEL = ("swarm", "orchestrator", "subagents", "tools", "workloads")
"""The top-level names our packages had before they moved under ``agent_swarm`` (0.1)."""


def _our_module(mod_name: str, attr: str) -> str:
    """``mod_name``, or ``agent_swarm.<mod_name>`` when it is one of our modules spelt the old way (without
    the ``agent_swarm.`` prefix): that still loads, with a :class:`DeprecationWarning` naming the new
    spelling. A user's own module of such a name (a ``tools.py`` beside the config) is imported as named."""
    if mod_name.split(".")[0] not in OLD_TOP_LEVEL:
        return mod_name
    try:
        if not hasattr(importlib.import_module(f"agent_swarm.{mod_name}"), attr):
            return mod_name
    except ImportError:
        return mod_name
    warnings.warn(
        f"environment {mod_name}:{attr} uses the old import path; write agent_swarm.{mod_name}:{attr}",
        DeprecationWarning,
        stacklevel=3,
    )
    return f"agent_swarm.{mod_name}"


def _tasks_environment(config: TrainConfig) -> Environment:
    from agent_swarm.orchestrator.tasks import load_task_file

    if config.tasks_file is None:
        raise ConfigError("set environment ('module:function') or tasks_file (a task file) in the training config")
    tasks, _problems = load_task_file(config.tasks_file, on_malformed="fail")
    return Environment(tasks=tasks, reward=PARLReward(config.reward))


def training_environment(config: TrainConfig, tokenizer: Any, search: Sequence[Path] = ()) -> Environment:
    """The environment a training config names (``environment``, else ``workloads``, else ``tasks_file``),
    with its sub-agents on ``subagent_model`` when the config sets one."""
    if config.environment:
        env = load_environment(config.environment, config, tokenizer, search)
    elif config.workloads:
        env = workload_environment(config)
    else:
        env = _tasks_environment(config)
    if config.subagent_model is not None:
        env.subagent_backend = frozen_model(
            config.subagent_model, name="subagent", device=config.device, dtype=config.dtype
        )
    return env
