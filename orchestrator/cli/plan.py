"""What ``swarm run`` resolves from its options before anything runs: a :class:`RunPlan`.

Three sources of tasks, one plan: the TASK argument or a task file (one backend pair and one tool set
for every task), the scripted demo, or a workload (``-w NAME``: each task brings a fresh environment,
its budgets and its scorer, as an :class:`EpisodeKit`). Everything here raises :class:`UserError` for
bad input, so a bad option is exit code 2 before a model loads or a record is written.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_origin

from pydantic import ValidationError

from agent_swarm.orchestrator.cli.options import parse_knobs
from agent_swarm.orchestrator.cli.progress import terminal_progress
from agent_swarm.orchestrator.cli.sampling import resolve_sampling, with_sampling
from agent_swarm.orchestrator.cli.settings import Settings, config_from
from agent_swarm.orchestrator.cli.tools import agent_files, builtin_tools, parse_tool_names, tools_config
from agent_swarm.orchestrator.environment import environment
from agent_swarm.orchestrator.tasks import load_task_file
from agent_swarm.swarm.backend import ModelBackend
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import UserError
from agent_swarm.swarm.records import AgentDefinition, EpisodeRecord, RewardRecord, Task
from agent_swarm.swarm.rl.rewards import PARLReward, RewardConfig
from agent_swarm.tools.registry import Tool, ToolRegistry, Toolset

__all__ = ["EpisodeKit", "RunPlan", "RunRequest", "make_plan", "workload_knobs"]

RewardFn = Callable[[EpisodeRecord], Awaitable[RewardRecord]]

MAX_GENERATED_TASKS = 100_000
"""``--index + -n`` of a workload run: a workload generates its tasks in order (about 0.1 ms each)."""


@dataclass(frozen=True)
class RunRequest:
    """The options of ``swarm run`` that decide what runs (outputs and tracing are not here); the
    config file, the episode, sampling and backend flags are its :class:`Settings`."""

    task: str | None = None
    task_file: Path | None = None
    demo: str | None = None
    workload: str | None = None
    mode: str = "swarm"
    split: str = "train"
    index: int = 0
    num_tasks: int | None = None
    knobs: Mapping[str, Any] = field(default_factory=dict)
    task_seed: int = 0
    settings: Settings = field(default_factory=lambda: Settings("run"))
    tools: Sequence[str] | None = None
    workspace: Path | None = None
    search_corpus: Path | None = None
    agents_dirs: Sequence[Path] | None = None
    out: Path = Path("traces")
    mcp: bool = False


@dataclass
class EpisodeKit:
    """What one episode runs with: config, backends, tools, ready agent types and reward."""

    config: SwarmConfig
    backend: ModelBackend
    subagent_backend: ModelBackend | None
    tools: tuple[Tool | Toolset, ...]
    agents: tuple[AgentDefinition, ...] = ()
    reward_fn: RewardFn | None = None
    subagent_backends: dict[str, ModelBackend] = field(default_factory=dict)


@dataclass
class RunPlan:
    """What ``swarm run`` resolved from its options: the tasks and what each episode runs with."""

    tasks: list[Task]
    kits: list[EpisodeKit]
    """One per task (a workload's fresh environments), or one shared by every task."""
    extras: dict[str, Any] = field(default_factory=dict)
    tools_note: str | None = None
    """The built-in tools and workspace, for the summary."""
    policy: str | None = None
    """A scripted policy's label (``SCRIPTED demo policy``, ``SCRIPTED gold policy of NAME``): no model ran."""

    def kit(self, i: int) -> EpisodeKit:
        return self.kits[i] if len(self.kits) > 1 else self.kits[0]

    @property
    def config(self) -> SwarmConfig:
        return self.kits[0].config

    def backends(self) -> list[ModelBackend | None]:
        return [b for k in self.kits for b in (k.backend, k.subagent_backend, *k.subagent_backends.values())]


@dataclass
class _Common:
    """What every source of tasks shares: the config file's tables, built-in tools and agent files."""

    base: SwarmConfig | None
    extras: dict[str, Any]
    overrides: dict[str, Any]
    builtin: tuple[Tool | Toolset, ...]
    agents: tuple[AgentDefinition, ...]
    note: str | None


def make_plan(req: RunRequest) -> RunPlan:
    """Resolve ``req`` into a plan; raises :class:`UserError` for anything a user must fix."""
    sources = [x for x in (req.task, req.task_file, req.demo) if x is not None]
    if req.workload is not None:
        if req.task is not None or req.demo is not None:
            raise UserError("--workload runs the workload's tasks; give no TASK argument or --demo with it")
    elif len(sources) != 1:
        raise UserError("give exactly one of: a TASK argument, --task-file FILE, --demo NAME or --workload NAME")
    elif req.num_tasks is not None or req.index:
        raise UserError("-n/--num-tasks and --index pick a workload's tasks; use them with --workload NAME")
    common = _common(req)
    if req.workload is not None:
        return _workload_plan(req, req.workload, common)
    if req.demo is not None or req.settings.backend.scripted:
        return _demo_plan(req, common)
    return _task_plan(req, common)


def _common(req: RunRequest) -> _Common:
    base, extras = req.settings.base, req.settings.extras
    table = tools_config(extras.get("tools"), str(req.settings.config_file))
    names = parse_tool_names(req.tools) if req.tools else table.enabled
    corpus = req.search_corpus or table.search_corpus
    if corpus is not None and "search" not in names:
        raise UserError("--search-corpus is what --tools search searches; add search to --tools")
    builtin = tuple(builtin_tools(names, search_corpus=corpus))
    overrides = dict(req.settings.overrides)
    ws_root = (req.workspace or table.workspace or req.out / "workspaces") if names else None
    if ws_root is not None:
        overrides["workspace_root"] = ws_root
    agent_defs = tuple(a.definition for a in agent_files(req.agents_dirs))
    if not req.mcp and req.workload is None:  # MCP and workload tools are checked when the episode starts
        _check_agent_tools(agent_defs, builtin, demo_tools=req.demo is not None or req.settings.backend.scripted)
    note = f"{', '.join(names)} (workspace {ws_root}/<episode-id>/)" if names else None
    return _Common(base, extras, overrides, builtin, agent_defs, note)


def _demo_plan(req: RunRequest, c: _Common) -> RunPlan:
    from agent_swarm.orchestrator.demo import DEMO_TASKS
    from agent_swarm.orchestrator.demo import demo as make_demo

    name = req.demo if req.demo is not None else task_text(req.task) if req.task is not None else ""
    if name not in DEMO_TASKS:
        raise UserError(
            f"the scripted backend only plays the built-in demo tasks ({', '.join(sorted(DEMO_TASKS))}); "
            f"got {name!r}. Use --demo NAME, or a real backend for your own task"
        )
    d = make_demo(name, latency_s=environment().demo_latency_s(0.05))
    if any(a.model for a in c.agents):
        raise UserError("agent files that name a model need a model backend; the scripted demo has none")
    reward = _reward_config(c.extras.get("reward"))
    # The demo keeps its own budgets; a config file changes only what it sets (a found swarm.toml
    # whose tables are all commented out changes nothing).
    given = c.base.model_dump(include=c.base.model_fields_set) if c.base is not None else {}
    kit = EpisodeKit(
        _flags_only(
            config_from(d.config, {**given, **{k: v for k, v in c.overrides.items() if v is not None}}), req.settings
        ),
        d.orchestrator_backend,
        d.subagent_backend,
        (*d.tools, *c.builtin),
        c.agents,
        PARLReward(reward) if reward is not None else None,
    )
    return RunPlan([d.task], [kit], c.extras, c.note, policy="SCRIPTED demo policy (no model)")


def _task_plan(req: RunRequest, c: _Common) -> RunPlan:
    if req.task_file is not None:
        tasks, _ = load_task_file(req.task_file, on_malformed="fail")
    else:
        tasks = [Task(id="cli", prompt=task_text(req.task or ""))]  # make_plan: exactly one source
    reward = _reward_config(c.extras.get("reward"))
    if reward is None and any(t.verifier for t in tasks):
        reward = RewardConfig()  # tasks that name a verifier get scored
    config = config_from(c.base or SwarmConfig(), c.overrides)
    orch, sub, by_model = _model_backends(req, c.extras, config.max_subagents_per_stage, c.agents)
    kit = EpisodeKit(
        req.settings.with_sampling(config, orch.model),
        orch,
        sub,
        c.builtin,
        c.agents,
        PARLReward(reward) if reward is not None else None,
        by_model,
    )
    return RunPlan(tasks, [kit], c.extras, c.note)


def _workload_plan(req: RunRequest, name: str, c: _Common) -> RunPlan:
    """``-w NAME``: the workload's tasks, each with a fresh environment, its budgets and its scorer;
    ``-b gold`` plays each task's gold policy (no model). Every episode is built here, so a malformed
    task is exit code 2 before anything runs."""
    from agent_swarm.orchestrator.eval import episode_config
    from agent_swarm.workloads import MODES, Mode, get_workload

    mode: Mode = "swarm" if req.mode == "swarm" else "single"
    if req.mode not in MODES:
        raise UserError(f"--mode must be swarm or single for a workload run; got {req.mode!r}")
    tasks = _workload_tasks(req, name)
    scripted = req.settings.backend.scripted
    kits: list[EpisodeKit] = []
    shared: tuple[ModelBackend, ModelBackend | None, dict[str, ModelBackend]] | None = None
    for t in tasks:
        owner = get_workload(str(t.metadata["workload"]))
        ep = owner.episode(t, mode)
        config = episode_config(ep, c.base, c.overrides)
        orch: ModelBackend
        sub: ModelBackend | None
        by_model: dict[str, ModelBackend]
        if scripted:
            gold = owner.gold_policy(t, mode)
            orch, sub, by_model = gold.orchestrator, gold.subagent, {}
            config = _flags_only(config, req.settings)
        else:
            shared = shared or _model_backends(req, c.extras, config.max_subagents_per_stage, c.agents)
            orch, sub, by_model = shared
            config = req.settings.with_sampling(config, orch.model)
        agents = (*ep.agents, *c.agents) if mode == "swarm" else ()
        kits.append(EpisodeKit(config, orch, sub, (*ep.tools, *c.builtin), agents, ep.reward, by_model))
    policy = f"SCRIPTED gold policy of {name} (no model)" if scripted else None
    return RunPlan(tasks, kits, c.extras, c.note, policy=policy)


def _workload_tasks(req: RunRequest, name: str) -> list[Task]:
    """The tasks of ``-w NAME``: ``-n`` of them from ``--index`` (default: one, the first) of
    ``--split``, or those of a task file ``swarm eval --export-tasks`` wrote."""
    from agent_swarm.workloads import get_workload

    wl = get_workload(name)  # an unknown name lists the known ones
    n = req.num_tasks or 1
    if req.task_file is None and req.index + n > MAX_GENERATED_TASKS:
        raise UserError(
            f"--index {req.index} with -n {n} asks for task {req.index + n - 1}; tasks are generated in order, "
            f"so --index + -n is at most {MAX_GENERATED_TASKS} (use another --seed for other tasks)"
        )
    if req.task_file is None:
        tasks = wl.tasks(req.index + n, seed=req.task_seed, split=req.split, **req.knobs)[req.index :]
    else:
        tasks, _ = load_task_file(req.task_file, on_malformed="fail", workload=name)
        if req.num_tasks is not None or req.index:
            tasks = tasks[req.index : req.index + n]
    if not tasks:
        raise UserError(f"--index {req.index} is past the last task; lower it or give more tasks")
    return tasks


def workload_knobs(name: str, items: Sequence[str]) -> dict[str, Any]:
    """``--knob NAME=VALUE`` items for workload ``name``: JSON values, else text; a knob that takes a
    list also takes ``a,b,c`` (``--knob categories=parallel,multiple``)."""
    from agent_swarm.workloads import get_workload

    knobs = parse_knobs(list(items))
    fields = get_workload(name).knobs_model.model_fields
    for key, value in knobs.items():
        field_info = fields.get(key)
        if field_info is not None and isinstance(value, str) and get_origin(field_info.annotation) in (tuple, list):
            knobs[key] = [x.strip() for x in value.split(",") if x.strip()]
    return knobs


def _model_backends(
    req: RunRequest, extras: Mapping[str, Any], fanout: int, agents: Sequence[AgentDefinition]
) -> tuple[ModelBackend, ModelBackend | None, dict[str, ModelBackend]]:
    """(orchestrator, sub-agents or ``None`` = the same, the backends of models agent files name),
    built as the library's :func:`agent_swarm.orchestrator.backend_factory.build_backends` builds them."""
    spec = req.settings.spec()
    progress = terminal_progress()
    # Local engine: a slot per sub-agent; swarm run's stays loaded after it for the next run.
    orch, sub = spec.build(fanout=fanout, progress=progress, default_keep_alive=req.settings.keep_alive)
    default_sub = sub or orch
    by_model: dict[str, ModelBackend] = {}
    for m in sorted({a.model for a in agents if a.model and a.model != default_sub.model}):
        # An agent file's model runs on the sub-agents' backend kind (and server), with that model.
        by_model[m], _ = spec.for_subagent_model(m).build(fanout=fanout, progress=progress)
    return orch, sub, by_model


def task_text(task: str) -> str:
    """The TASK argument; ``-`` reads it from standard input (``echo task | swarm run -``)."""
    if task != "-":
        if not task.strip():
            raise UserError('the TASK argument is empty; give the task in words: swarm run "your task"')
        return task
    text = sys.stdin.read().strip()
    if not text:
        raise UserError("TASK is '-' but standard input is empty; pipe the task in (echo TASK | swarm run -)")
    return text


def _check_agent_tools(agents: Sequence[AgentDefinition], tools: Sequence[Tool | Toolset], *, demo_tools: bool) -> None:
    """Every tool an agent file grants must be one this run has (before any model loads)."""
    if demo_tools:
        from agent_swarm.orchestrator.demo import demo as make_demo

        tools = [*make_demo("capitals", latency_s=0).tools, *tools]
    registry = ToolRegistry(tools)
    have = set(registry.names) | set(registry.toolsets)
    for a in agents:
        missing = [t for t in a.tools if t not in have]
        if missing:
            raise UserError(
                f"agent {a.name!r} grants {', '.join(map(repr, missing))}, which this run does not have "
                f"(available: {', '.join(sorted(have)) or 'none'}); add built-in tools with "
                "--tools python,files,search or MCP servers with --mcp-config"
            )


def _flags_only(config: SwarmConfig, settings: Settings) -> SwarmConfig:
    """A scripted policy's sampling (``--demo`` on any backend too): the config's, flags on top (it keys
    the sub-agent replay cache)."""
    return with_sampling(config, resolve_sampling(config, file_sets=(), start="config", flags=settings.sampling_flags))


def _reward_config(table: dict[str, Any] | None) -> RewardConfig | None:
    if table is None:
        return None
    try:
        cfg = RewardConfig.model_validate(table)
    except ValidationError as exc:  # load_config checked the keys; this is a bad value
        raise UserError(f"invalid [reward] table: {exc.errors()[0]['msg']}") from None
    PARLReward(cfg)  # an unknown default_verifier fails here, before anything runs
    return cfg
