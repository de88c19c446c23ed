"""``swarm run``: one task, or every task of a task file, through the orchestrator.

What it resolves from its options (:class:`RunPlan`: tasks, config, backends, built-in tools, agent
files) and how it runs them (:func:`execute`): the live tree of stages on a terminal, one line per
event without one, records written for every ending, then the outputs (tree and summary, ``--json``,
``--json-summary`` or ``-p``).
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TextIO

import anyio
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.text import Text

from orchestrator.backend_factory import build_backends
from orchestrator.cli.eval import ADAPTER_OPTION, run_workload
from orchestrator.cli.live import (
    NO_ANSWER,
    EventLines,
    LiveState,
    given_answer,
    stage_tree,
    stages_from_record,
    summary_table,
)
from orchestrator.cli.options import (
    BackendOpt,
    BaseUrlOpt,
    ConfigOpt,
    EpisodeTimeoutOpt,
    MaxConcurrencyOpt,
    MaxCriticalStepsOpt,
    MaxSubagentStepsOpt,
    MaxTokensOpt,
    ModelOpt,
    SubagentBackendOpt,
    SubagentModelOpt,
    SubagentTimeoutOpt,
    TemperatureOpt,
    WorkloadOpt,
    is_scripted,
)
from orchestrator.cli.preflight import unreachable_servers
from orchestrator.cli.progress import terminal_progress
from orchestrator.cli.telemetry_setup import DEFAULT_TRACED_SUBAGENTS, TracingOptions, resolve_otlp, start_tracing
from orchestrator.cli.tools import agent_files, builtin_tools, parse_tool_names, tools_config
from orchestrator.config import SwarmConfig
from orchestrator.engine import Orchestrator
from orchestrator.store import DEFAULT_ROOT, write_episode
from orchestrator.tasks import large_task_warning, load_config, load_tasks
from swarm.backend import ModelBackend, SamplingParams
from swarm.errors import LargeInputWarning, UserError
from swarm.events import EpisodeFinished, Event
from swarm.records import AgentDefinition, EpisodeRecord, Task
from swarm.rl.rewards import PARLReward, RewardConfig
from tools.mcp import MCPConfig, load_mcp_config
from tools.registry import Tool, ToolRegistry, Toolset

__all__ = ["Output", "RunPlan", "execute", "json_summary", "run"]

err = Console(stderr=True)


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


@dataclass
class RunPlan:
    """What ``swarm run`` resolved from its options: tasks, config, backends and tools."""

    tasks: list[Task]
    config: SwarmConfig
    backend: ModelBackend
    subagent_backend: ModelBackend | None
    tools: tuple[Tool | Toolset, ...]
    extras: dict[str, Any]
    reward: RewardConfig | None = None
    """Scores each episode when set: the config's ``[reward]`` table, or defaults for tasks with verifiers."""
    agents: tuple[AgentDefinition, ...] = ()
    """Ready sub-agent types (agent files)."""
    subagent_backends: dict[str, ModelBackend] = field(default_factory=dict)
    """Backends of the models agent files name."""
    tools_note: str | None = None
    """The built-in tools and workspace, for the summary."""


def _config_from(base: SwarmConfig, overrides: dict[str, Any]) -> SwarmConfig:
    data = base.model_dump()
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return SwarmConfig.model_validate(data)
    except Exception as exc:
        raise UserError(f"invalid option value: {exc}") from None


def run(
    task: Annotated[
        str | None, typer.Argument(help="the task text; - reads it from stdin (or use --tasks FILE / --demo NAME)")
    ] = None,
    task_file: Annotated[
        Path | None,
        typer.Option(
            "--tasks",
            "-t",
            "--task-file",
            "-f",
            help="task file: .jsonl (one task per line), .json or text; - reads stdin",
        ),
    ] = None,
    demo: Annotated[
        str | None, typer.Option("--demo", help="run a built-in SCRIPTED demo task (no model): capitals, budget")
    ] = None,
    backend: BackendOpt = "local",
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    subagent_backend: SubagentBackendOpt = None,
    subagent_model: SubagentModelOpt = None,
    config_file: ConfigOpt = None,
    max_critical_steps: MaxCriticalStepsOpt = None,
    max_subagents: Annotated[
        int | None,
        typer.Option("--max-subagents", min=1, help="sub-agents admitted per stage [default: 16, or the config's]"),
    ] = None,
    max_concurrency: MaxConcurrencyOpt = None,
    max_subagent_steps: MaxSubagentStepsOpt = None,
    subagent_timeout: SubagentTimeoutOpt = None,
    episode_timeout: EpisodeTimeoutOpt = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="records go to OUT/<episode-id>/")] = DEFAULT_ROOT,
    json_out: Annotated[bool, typer.Option("--json", help="print the full episode record as JSON on stdout")] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="no live view on a terminal, no event lines without one")
    ] = False,
    otlp_endpoint: Annotated[
        str | None,
        typer.Option(
            "--otlp-endpoint", help="OTLP receiver URL (default: OTEL_EXPORTER_OTLP_* or a local Jaeger on :4318)"
        ),
    ] = None,
    otlp_protocol: Annotated[str | None, typer.Option("--otlp-protocol", help="http/protobuf or grpc")] = None,
    trace_content: Annotated[
        bool,
        typer.Option("--trace-content/--no-trace-content", help="put prompts and completions on spans (size-capped)"),
    ] = False,
    trace_file: Annotated[
        bool,
        typer.Option("--trace-file/--no-trace-file", help="write OUT/<episode-id>/trace.jsonl (OTLP JSON for Jaeger)"),
    ] = True,
    trace_subagents: Annotated[
        int,
        typer.Option(
            "--trace-subagents",
            min=0,
            help="trace at most this many sub-agents of a wider stage, spread over it (0: all; the record has all)",
        ),
    ] = DEFAULT_TRACED_SUBAGENTS,
    workload: WorkloadOpt = None,
    mode: Annotated[str, typer.Option("--mode", help="workload runs: swarm or single")] = "swarm",
    events: Annotated[
        Path | None,
        typer.Option("--events", help="stream runtime events to this JSONL file as they happen (-: stdout)"),
    ] = None,
    mcp_config: Annotated[
        Path | None, typer.Option("--mcp-config", help="MCP servers (mcpServers JSON) whose tools agents may use")
    ] = None,
    temperature: TemperatureOpt = None,
    max_tokens: MaxTokensOpt = None,
    seed: Annotated[int | None, typer.Option("--seed", help="sampling seed (reproducible runs)")] = None,
    tools: Annotated[
        list[str] | None,
        typer.Option(
            "--tools",
            help="built-in tools the orchestrator may call and grant to sub-agents, comma-separated: "
            "python, files, search (default: none, or the config's [tools] enabled)",
        ),
    ] = None,
    workspace: Annotated[
        Path | None,
        typer.Option("--workspace", help="python/files work in WORKSPACE/<episode-id>/ (default: OUT/workspaces)"),
    ] = None,
    search_corpus: Annotated[
        Path | None,
        typer.Option(
            "--search-corpus", help="what --tools search searches: a directory of .md/.txt/.jsonl or a .jsonl"
        ),
    ] = None,
    agents_dirs: Annotated[
        list[Path] | None,
        typer.Option(
            "--agents",
            help="agent files (*.md with name/description/tools/model front matter; the body is the system "
            "prompt) offered as ready sub-agent types; repeatable (default: ./.swarm/agents/ if it exists)",
        ),
    ] = None,
    print_answer: Annotated[
        bool, typer.Option("--print", "-p", help="print only the final answer on stdout (for scripts and pipes)")
    ] = False,
    json_summary: Annotated[
        bool,
        typer.Option(
            "--json-summary",
            help="print one small JSON object per episode: answer, status, critical/total steps, wall time, record",
        ),
    ] = False,
    orchestrator_adapter: Annotated[str | None, ADAPTER_OPTION] = None,
) -> None:
    """Run one task (or every task of a task file) through the orchestrator.

    A terminal shows a live tree of stages while the swarm works and keeps the final tree and a
    summary; without one, each event is a line on stderr. Records go to OUT/<episode-id>/.
    Exit codes: 0 answered, 1 failed or timed out, 2 bad input, 130 interrupted.

    Examples:

    \b
      swarm run --demo capitals              # scripted: no model needed
      swarm run "Compare the capitals of France and Japan"
      swarm run -m path/to/model.gguf --tools python,files "Plot x^2 to x2.png"
      swarm run -b openai --base-url http://localhost:8000/v1 -m MODEL -p "2+2?"
      swarm run --tasks tasks.jsonl --json-summary --agents ./my-agents
    """
    if workload is not None:
        raise typer.Exit(
            run_workload(
                workload,
                task_file=task_file,
                config_file=config_file,
                mode=mode,
                backend=backend,
                model=model,
                base_url=base_url,
                subagent_backend=subagent_backend,
                subagent_model=subagent_model,
                out=out,
                json_out=json_out,
                orchestrator_adapter=orchestrator_adapter,
                overrides={
                    "max_critical_steps": max_critical_steps,
                    "max_subagent_steps": max_subagent_steps,
                    "episode_timeout_s": episode_timeout,
                },
            )
        )
    tracing = TracingOptions(
        otlp_endpoint=otlp_endpoint,
        otlp_protocol=otlp_protocol,
        capture_content=trace_content,
        trace_file=trace_file,
        traced_subagents=trace_subagents or None,
    )
    if sum((json_out, json_summary, print_answer)) > 1:
        raise _fail("choose one output: --json (the record), --json-summary or -p/--print (the answer)")
    output: Output = "json" if json_out else "summary" if json_summary else "print" if print_answer else "human"
    try:
        resolve_otlp(otlp_endpoint, otlp_protocol)  # a bad endpoint is exit code 2 before anything runs
        plan = _plan(
            task=task,
            task_file=task_file,
            demo=demo,
            backend=backend,
            model=model,
            base_url=base_url,
            subagent_backend=subagent_backend,
            subagent_model=subagent_model,
            config_file=config_file,
            overrides={
                "max_critical_steps": max_critical_steps,
                "max_subagents_per_stage": max_subagents,
                "max_concurrency": max_concurrency,
                "max_subagent_steps": max_subagent_steps,
                "subagent_timeout_s": subagent_timeout,
                "episode_timeout_s": episode_timeout,
            },
            sampling={"temperature": temperature, "max_tokens": max_tokens, "seed": seed},
            tools=tools,
            workspace=workspace,
            search_corpus=search_corpus,
            agents_dirs=agents_dirs,
            out=out,
            mcp=mcp_config is not None,
            orchestrator_adapter=orchestrator_adapter,
        )
    except UserError as exc:
        raise _fail(str(exc)) from None
    try:
        mcp = load_mcp_config(mcp_config) if mcp_config is not None else None
    except UserError as exc:
        raise _fail(str(exc)) from None
    code = execute(plan, out=out, output=output, quiet=quiet, tracing=tracing, events=events, mcp=mcp)
    raise typer.Exit(code)


def _plan(
    *,
    task: str | None,
    task_file: Path | None,
    demo: str | None,
    backend: str,
    model: str | None,
    base_url: str | None,
    subagent_backend: str | None,
    subagent_model: str | None,
    config_file: Path | None,
    overrides: dict[str, Any],
    sampling: dict[str, Any] | None = None,
    tools: Sequence[str] | None = None,
    workspace: Path | None = None,
    search_corpus: Path | None = None,
    agents_dirs: Sequence[Path] | None = None,
    out: Path = DEFAULT_ROOT,
    mcp: bool = False,
    orchestrator_adapter: str | None = None,
) -> RunPlan:
    sources = [x for x in (task, task_file, demo) if x is not None]
    if len(sources) != 1:
        raise UserError("give exactly one of: a TASK argument, --task-file FILE, or --demo NAME")
    base, extras = load_config(config_file, command="swarm run") if config_file else (None, {})
    reward = _reward_config(extras.get("reward"))
    table = tools_config(extras.get("tools"), str(config_file))
    names = parse_tool_names(tools) if tools else table.enabled
    corpus = search_corpus or table.search_corpus
    if corpus is not None and "search" not in names:
        raise UserError("--search-corpus is what --tools search searches; add search to --tools")
    builtin = tuple(builtin_tools(names, search_corpus=corpus))
    ws_root = (workspace or table.workspace or out / "workspaces") if names else None
    if ws_root is not None:
        overrides = {**overrides, "workspace_root": ws_root}
    agent_defs = tuple(a.definition for a in agent_files(agents_dirs))
    if not mcp:  # MCP servers' tools are known once they connect; the orchestrator checks them then
        _check_agent_tools(agent_defs, builtin, demo_tools=demo is not None or backend == "scripted")
    notes = f"{', '.join(names)} (workspace {ws_root}/<episode-id>/)" if names else None
    if demo is not None or is_scripted(backend):
        from orchestrator.demo import DEMO_TASKS
        from orchestrator.demo import demo as make_demo

        name = demo if demo is not None else _task_text(task or "")
        if name not in DEMO_TASKS:
            raise UserError(
                f"the scripted backend only plays the built-in demo tasks ({', '.join(sorted(DEMO_TASKS))}); "
                f"got {name!r}. Use --demo NAME, or a real backend for your own task"
            )
        d = make_demo(name, latency_s=float(os.environ.get("SWARM_DEMO_LATENCY", "0.05")))
        if any(a.model for a in agent_defs):
            raise UserError("agent files that name a model need a model backend; the scripted demo has none")
        return RunPlan(
            [d.task],
            _config_from(base or d.config, overrides),
            d.orchestrator_backend,
            d.subagent_backend,
            (*d.tools, *builtin),
            extras,
            reward,
            agents=agent_defs,
            tools_note=notes,
        )
    tasks = load_tasks(task_file) if task_file is not None else [Task(id="cli", prompt=_task_text(task or ""))]
    if reward is None and any(t.verifier for t in tasks):
        reward = RewardConfig()  # tasks that name a verifier get scored
    backend_opts = dict(extras.get("backend", {}))
    if orchestrator_adapter is not None:
        backend_opts["orchestrator_adapter"] = orchestrator_adapter
    named = {k: backend_opts.pop(k, None) for k in ("kind", "model", "base_url", "subagent_backend", "subagent_model")}
    config = _config_from(base or SwarmConfig(), overrides)
    backend_opts.setdefault("fanout", config.max_subagents_per_stage)  # local engine: a slot per sub-agent
    backend_opts.setdefault("progress", terminal_progress())
    orch, sub = build_backends(
        kind=named["kind"] or backend,
        model=model or named["model"],
        base_url=base_url or named["base_url"],
        subagent_kind=subagent_backend or named["subagent_backend"],
        subagent_model=subagent_model or named["subagent_model"],
        **backend_opts,
    )
    default_sub = sub or orch
    by_model: dict[str, ModelBackend] = {}
    for m in sorted({a.model for a in agent_defs if a.model and a.model != default_sub.model}):
        # An agent file's model runs on the sub-agents' backend kind (and server), with that model.
        by_model[m], _ = build_backends(
            kind=subagent_backend or named["subagent_backend"] or named["kind"] or backend,
            model=m,
            base_url=os.environ.get("SWARM_SUBAGENT_BASE_URL") or base_url or named["base_url"],
            **backend_opts,
        )
    return RunPlan(
        tasks,
        _with_sampling(config, base, orch, sampling or {}),
        orch,
        sub,
        builtin,
        extras,
        reward,
        agents=agent_defs,
        subagent_backends=by_model,
        tools_note=notes,
    )


def _task_text(task: str) -> str:
    """The TASK argument; ``-`` reads it from standard input (``echo task | swarm run -``)."""
    if task != "-":
        return task
    text = sys.stdin.read().strip()
    if not text:
        raise UserError("TASK is '-' but standard input is empty; pipe the task in (echo TASK | swarm run -)")
    return text


def _check_agent_tools(agents: Sequence[AgentDefinition], tools: Sequence[Tool | Toolset], *, demo_tools: bool) -> None:
    """Every tool an agent file grants must be one this run has (before any model loads)."""
    if demo_tools:
        from orchestrator.demo import demo as make_demo

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


def _with_sampling(
    config: SwarmConfig, base: SwarmConfig | None, orch: ModelBackend, flags: dict[str, Any]
) -> SwarmConfig:
    """Sampling of a model run: the config file's where it sets it, else the model family's
    (:class:`orchestrator.prompts.PromptProfile`), with ``--temperature/--max-tokens/--seed`` on top."""
    from orchestrator.prompts import profile_for

    try:
        profile = profile_for(orch.model, config.prompt_profile)
    except UserError as exc:
        raise UserError(f"prompt_profile in the config: {exc}") from None
    given = base.model_fields_set if base is not None else set()
    change = {k: v for k, v in flags.items() if v is not None}
    data = config.model_dump()
    for name, family in (
        ("orchestrator_sampling", profile.orchestrator_sampling),
        ("subagent_sampling", profile.subagent_sampling),
    ):
        current: SamplingParams = getattr(config, name) if name in given else family
        data[name] = {**current.model_dump(), **change}
    try:
        return SwarmConfig.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"invalid sampling option: {exc}") from None


def _reward_config(table: dict[str, Any] | None) -> RewardConfig | None:
    if table is None:
        return None
    try:
        cfg = RewardConfig.model_validate(table)
    except ValidationError as exc:  # load_config checked the keys; this is a bad value
        raise UserError(f"invalid [reward] table: {exc.errors()[0]['msg']}") from None
    PARLReward(cfg)  # an unknown default_verifier fails here, before anything runs
    return cfg


class _EventWriter:
    """An observer appending each event as one JSON line, flushed at once (for tail -f / dashboards);
    the path ``-`` is standard output."""

    def __init__(self, path: Path) -> None:
        self._own = str(path) != "-"
        self._f: TextIO = path.open("a", encoding="utf-8") if self._own else sys.stdout

    def __call__(self, event: Event) -> None:
        f = self._f
        if isinstance(event, EpisodeFinished):  # the full record is in episode.json; keep lines small
            line = {"type": event.type, "episode_id": event.record.episode_id, "status": event.record.status.value}
            f.write(json.dumps(line) + "\n")
        else:
            f.write(event.model_dump_json(exclude={"result"}) + "\n")
        f.flush()

    def close(self) -> None:
        if self._own:
            self._f.close()


Output = Literal["human", "json", "summary", "print"]


def json_summary(record: EpisodeRecord, path: str) -> dict[str, Any]:
    """The small object ``--json-summary`` prints: what most scripts want from a run."""
    return {
        "episode_id": record.episode_id,
        "task_id": record.task.id,
        "status": record.status.value,
        "answer": given_answer(record),
        "error": record.error,
        "critical_steps": record.dag.critical_steps,
        "total_steps": record.dag.total_steps,
        "wall_time_s": round(record.wall_time_s, 3),
        "record": path,
    }


def _stderr_line(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _budget(record: EpisodeRecord) -> int | None:
    budget = record.config.get("max_critical_steps")
    return budget if isinstance(budget, int) else None


def _tree_title(record: EpisodeRecord) -> Text:
    d = record.dag
    budget = _budget(record)
    left = f" · {budget - d.critical_steps} of {budget} left" if budget is not None else ""
    return Text.assemble(("stages ", "bold"), f"({len(record.stages)}) · critical steps {d.critical_steps}{left}")


def execute(
    plan: RunPlan,
    *,
    out: Path,
    output: Output = "human",
    quiet: bool = False,
    tracing: TracingOptions | None = None,
    events: Path | None = None,
    mcp: MCPConfig | None = None,
) -> int:
    if not _servers_reachable(plan):
        return 1
    live_enabled = not quiet and err.is_terminal and not os.environ.get("CI")
    records: list[EpisodeRecord] = []
    paths: dict[str, Path] = {}

    def persist(event: Event) -> None:
        # Runs for every ending, cancellation included, so an interrupted run keeps its record.
        if isinstance(event, EpisodeFinished):
            record = event.record
            if telemetry.otlp is not None and record.trace_id is not None:  # `swarm traces show` links to Jaeger
                record = record.model_copy(
                    update={"metadata": {**record.metadata, "otlp_endpoint": telemetry.otlp.endpoint}}
                )
            records.append(record)
            paths[record.episode_id] = write_episode(record, out)

    state = LiveState(budget=plan.config.max_critical_steps)
    observers, writer = _observers(
        persist, state if live_enabled else None, quiet, plan.config.max_critical_steps, events
    )
    telemetry = start_tracing(
        tracing or TracingOptions(), out=out, note=None if quiet else lambda n: err.print(f"[dim]{escape(n)}[/dim]")
    )

    runtime_telemetry = telemetry.telemetry()

    def orchestrator(extra: Sequence[Tool | Toolset] = ()) -> Orchestrator:
        return Orchestrator(
            plan.backend,
            plan.config,
            tools=ToolRegistry([*plan.tools, *extra]),
            subagent_backend=plan.subagent_backend,
            subagent_backends=plan.subagent_backends,
            agents=plan.agents,
            observers=observers,
            telemetry=runtime_telemetry,
            reward_fn=PARLReward(plan.reward) if plan.reward is not None else None,
        )

    async def main() -> None:
        await _run_tasks(plan.tasks, orchestrator, mcp, mcp_log)

    mcp_log = _mcp_log(out) if mcp is not None else None
    interrupted = False
    for note in filter(None, map(large_task_warning, plan.tasks)):
        err.print(f"[yellow]warning:[/yellow] {escape(note)}", soft_wrap=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LargeInputWarning)  # said above, once per task
            if live_enabled:
                with Live(state, console=err, refresh_per_second=8, transient=True):
                    anyio.run(main)
            else:
                anyio.run(main)
    except UserError as exc:  # e.g. an agent file granting an MCP tool no server offers
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        interrupted = True
    finally:  # flush spans on every exit: normal, error and Ctrl-C (bounded, never hangs)
        if writer is not None:
            writer.close()
        if mcp_log is not None:
            mcp_log.close()
        for warning in telemetry.shutdown():
            err.print(f"[yellow]warning:[/yellow] {escape(warning)}", soft_wrap=True)
    for r in records:
        _print_record(r, str(paths.get(r.episode_id, "")), output, plan.tools_note)
    return _exit_code(records, paths, interrupted)


def _mcp_log(out: Path) -> TextIO:
    """MCP servers' own logs go to a file so they never garble the live view."""
    out.mkdir(parents=True, exist_ok=True)
    return (out / "mcp-servers.log").open("a", encoding="utf-8")


def _servers_reachable(plan: RunPlan) -> bool:
    """Probe each model server once, before the first task (every episode would otherwise fail the
    same way, after the backend's retries); say which cannot be reached."""
    problems = anyio.run(unreachable_servers, [plan.backend, plan.subagent_backend, *plan.subagent_backends.values()])
    for p in problems:
        err.print(
            f"[red]error:[/red] model server {escape(p)}; check --base-url and that the server is up", soft_wrap=True
        )
    return not problems


def _observers(
    persist: Callable[[Event], None], live: LiveState | None, quiet: bool, budget: int, events: Path | None
) -> tuple[list[Callable[[Event], None]], _EventWriter | None]:
    """The run's event observers: the record writer, the live view or one line per event, the events file."""
    observers: list[Callable[[Event], None]] = [persist]
    if live is not None:
        observers.append(live)
    elif not quiet:  # no terminal (a pipe, a log file, CI): one line per event as it happens
        observers.append(EventLines(_stderr_line, budget=budget))
    writer = _EventWriter(events) if events is not None else None
    if writer is not None:
        observers.append(writer)
    return observers, writer


async def _run_tasks(
    tasks: Sequence[Task],
    orchestrator: Callable[[Sequence[Tool | Toolset]], Orchestrator],
    mcp: MCPConfig | None,
    mcp_log: TextIO | None,
) -> None:
    """Run the tasks one after another; with MCP servers connected for the whole run."""
    if mcp is None:
        orch = orchestrator(())
        for t in tasks:
            await orch.run(t)
        return
    from tools.mcp import MCPServers

    # MCP connections live for the whole run, owned by this task, closed on exit or Ctrl-C.
    async with MCPServers(mcp, server_stderr=mcp_log) as servers:
        for st in servers.status:
            if not st.connected:
                err.print(f"[yellow]warning:[/yellow] MCP server {st.name!r} unavailable: {escape(st.error or '')}")
        orch = orchestrator(servers.toolsets())
        for t in tasks:
            await orch.run(t)


def _print_record(r: EpisodeRecord, path: str, output: Output, tools_note: str | None) -> None:
    """One finished episode on stdout, in the chosen output form."""
    if output == "json":
        sys.stdout.write(r.model_dump_json() + "\n")
    elif output == "summary":
        sys.stdout.write(json.dumps(json_summary(r, path), ensure_ascii=False) + "\n")
    elif output == "print":
        answer = given_answer(r)
        if answer is not None:
            sys.stdout.write(answer + ("" if answer.endswith("\n") else "\n"))
    else:
        console = Console()
        console.print(stage_tree(stages_from_record(r), title=_tree_title(r), budget=_budget(r)))
        tools = tools_note.replace("<episode-id>", r.episode_id) if tools_note else None
        console.print(summary_table(r, path, tools=tools))
    sys.stdout.flush()


def _exit_code(records: list[EpisodeRecord], paths: dict[str, Path], interrupted: bool) -> int:
    """130 interrupted, 1 when an episode failed (said on stderr too), else 0."""
    if interrupted:
        where = f"; record written to {paths[records[-1].episode_id]}" if records else ""
        err.print(f"[yellow]interrupted[/yellow]{escape(where)}")
        return 130
    bad = NO_ANSWER
    for r in records:  # the tables go to stdout; what went wrong belongs on stderr too
        if r.status in bad:
            why = r.error or "no error message was recorded"
            err.print(f"[red]error:[/red] episode {r.episode_id} {r.status.value}: {escape(why)}", soft_wrap=True)
    return 1 if any(r.status in bad for r in records) else 0
