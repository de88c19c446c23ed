"""The ``swarm`` command line (typer). The only place that may install OpenTelemetry's SDK.

Machine output goes to stdout (``--json``); progress, the live view and errors go to stderr.
Exit codes: 0 answered (or forced to answer by the budget), 1 the episode failed or timed out,
2 bad input (missing task file, invalid config, unknown backend), 130 interrupted.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.live import Live
from rich.markup import escape

from orchestrator.cli_eval import ADAPTER_OPTION, eval_command
from orchestrator.cli_mcp import mcp_app
from orchestrator.cli_models import models
from orchestrator.cli_rollout import rollout
from orchestrator.cli_traces import traces_app
from orchestrator.cli_train import train_app
from orchestrator.config import SwarmConfig
from orchestrator.engine import Orchestrator
from orchestrator.live import LiveState, summary_table
from orchestrator.store import DEFAULT_ROOT, write_episode
from orchestrator.tasks import large_task_warning, load_config, load_tasks
from orchestrator.telemetry_setup import TracingOptions, claim_global_provider, resolve_otlp, start_tracing
from swarm import __version__
from swarm.backend import ModelBackend, SamplingParams
from swarm.errors import LargeInputWarning, UserError
from swarm.events import EpisodeFinished, Event
from swarm.records import EpisodeRecord, EpisodeStatus, Task
from swarm.rewards import PARLReward, RewardConfig
from tools.mcp import MCPConfig, load_mcp_config
from tools.registry import Tool, ToolRegistry, Toolset

__all__ = ["app", "main"]

app = typer.Typer(
    name="swarm",
    help="Run parallel agent swarms, inspect their traces, collect rollouts and train the orchestrator.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)
app.add_typer(traces_app, name="traces")
app.add_typer(mcp_app, name="mcp")
app.add_typer(train_app, name="train")
app.command("rollout")(rollout)
app.command("eval")(eval_command)
app.command("models")(models)


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
    tools: tuple[Tool, ...]
    extras: dict[str, Any]
    reward: RewardConfig | None = None
    """Scores each episode when set: the config's ``[reward]`` table, or defaults for tasks with verifiers."""


BackendBuilder = Callable[..., tuple[ModelBackend, ModelBackend | None]]


def _build_backends(kind: str, **options: Any) -> tuple[ModelBackend, ModelBackend | None]:
    """Resolve non-scripted backends through the backend factory."""
    try:
        from orchestrator.backend_factory import build_backends
    except ImportError:  # pragma: no cover - only before the backends module exists
        raise UserError(f"backend {kind!r} is not available in this installation; use --demo") from None
    result: tuple[ModelBackend, ModelBackend | None] = build_backends(kind=kind, **options)
    return result


def _config_from(base: SwarmConfig, overrides: dict[str, Any]) -> SwarmConfig:
    data = base.model_dump()
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return SwarmConfig.model_validate(data)
    except Exception as exc:
        raise UserError(f"invalid option value: {exc}") from None


@app.command()
def run(
    task: Annotated[str | None, typer.Argument(help="the task text (or use --task-file / --demo)")] = None,
    task_file: Annotated[Path | None, typer.Option("--task-file", "-f", help=".jsonl, .json or text file")] = None,
    demo: Annotated[
        str | None, typer.Option("--demo", help="run a built-in SCRIPTED demo task (no model): capitals, budget")
    ] = None,
    backend: Annotated[
        str,
        typer.Option("--backend", "-b", envvar="SWARM_BACKEND", help="local, openai, vllm, transformers or scripted"),
    ] = "local",
    model: Annotated[str | None, typer.Option("--model", "-m", envvar="SWARM_MODEL")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", envvar="SWARM_BASE_URL")] = None,
    subagent_backend: Annotated[str | None, typer.Option("--subagent-backend", envvar="SWARM_SUBAGENT_BACKEND")] = None,
    subagent_model: Annotated[str | None, typer.Option("--subagent-model", envvar="SWARM_SUBAGENT_MODEL")] = None,
    config_file: Annotated[Path | None, typer.Option("--config", "-c", help="TOML/JSON config")] = None,
    max_critical_steps: Annotated[int | None, typer.Option("--max-critical-steps", min=1)] = None,
    max_subagents: Annotated[
        int | None, typer.Option("--max-subagents", "-n", min=1, help="max sub-agents per stage")
    ] = None,
    max_concurrency: Annotated[int | None, typer.Option("--max-concurrency", min=1)] = None,
    max_subagent_steps: Annotated[int | None, typer.Option("--max-subagent-steps", min=1)] = None,
    subagent_timeout: Annotated[float | None, typer.Option("--subagent-timeout", min=0.001)] = None,
    episode_timeout: Annotated[float | None, typer.Option("--episode-timeout", min=0.001)] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="records go to OUT/<episode-id>/")] = DEFAULT_ROOT,
    json_out: Annotated[bool, typer.Option("--json", help="print the episode record as JSON on stdout")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no live view")] = False,
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
    workload: Annotated[
        str | None, typer.Option("--workload", "-w", help="run a workload task (swarm eval --list)")
    ] = None,
    mode: Annotated[str, typer.Option("--mode", help="workload runs: swarm or single")] = "swarm",
    events: Annotated[
        Path | None, typer.Option("--events", help="stream runtime events to this JSONL file as they happen")
    ] = None,
    mcp_config: Annotated[
        Path | None, typer.Option("--mcp-config", help="MCP servers (mcpServers JSON) whose tools agents may use")
    ] = None,
    temperature: Annotated[
        float | None,
        typer.Option(
            "--temperature", min=0.0, help="sampling temperature (default: the model family's, or --config's)"
        ),
    ] = None,
    max_tokens: Annotated[
        int | None, typer.Option("--max-tokens", min=1, help="completion tokens per turn (default: as --temperature)")
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="sampling seed (reproducible runs)")] = None,
    orchestrator_adapter: Annotated[str | None, ADAPTER_OPTION] = None,
) -> None:
    """Run one task (or every task of a task file) through the orchestrator."""
    if workload is not None:
        from orchestrator.cli_eval import run_workload

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
        otlp_endpoint=otlp_endpoint, otlp_protocol=otlp_protocol, capture_content=trace_content, trace_file=trace_file
    )
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
            orchestrator_adapter=orchestrator_adapter,
        )
    except UserError as exc:
        raise _fail(str(exc)) from None
    try:
        mcp = load_mcp_config(mcp_config) if mcp_config is not None else None
    except UserError as exc:
        raise _fail(str(exc)) from None
    code = _execute(plan, out=out, json_out=json_out, quiet=quiet, tracing=tracing, events=events, mcp=mcp)
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
    orchestrator_adapter: str | None = None,
) -> RunPlan:
    sources = [x for x in (task, task_file, demo) if x is not None]
    if len(sources) != 1:
        raise UserError("give exactly one of: a TASK argument, --task-file FILE, or --demo NAME")
    base, extras = load_config(config_file, command="swarm run") if config_file else (None, {})
    reward = _reward_config(extras.get("reward"))
    if demo is not None or backend == "scripted":
        from orchestrator.demo import DEMO_TASKS
        from orchestrator.demo import demo as make_demo

        name = demo if demo is not None else (task or "")
        if name not in DEMO_TASKS:
            raise UserError(
                f"the scripted backend only plays the built-in demo tasks ({', '.join(sorted(DEMO_TASKS))}); "
                f"got {name!r}. Use --demo NAME, or a real backend for your own task"
            )
        d = make_demo(name, latency_s=float(os.environ.get("SWARM_DEMO_LATENCY", "0.05")))
        return RunPlan(
            [d.task],
            _config_from(base or d.config, overrides),
            d.orchestrator_backend,
            d.subagent_backend,
            d.tools,
            extras,
            reward,
        )
    tasks = load_tasks(task_file) if task_file is not None else [Task(id="cli", prompt=task or "")]
    if reward is None and any(t.verifier for t in tasks):
        reward = RewardConfig()  # tasks that name a verifier get scored
    backend_opts = dict(extras.get("backend", {}))
    if orchestrator_adapter is not None:
        backend_opts["orchestrator_adapter"] = orchestrator_adapter
    named = {k: backend_opts.pop(k, None) for k in ("kind", "model", "base_url", "subagent_backend", "subagent_model")}
    config = _config_from(base or SwarmConfig(), overrides)
    backend_opts.setdefault("fanout", config.max_subagents_per_stage)  # local engine: a slot per sub-agent
    orch, sub = _build_backends(
        kind=named["kind"] or backend,
        model=model or named["model"],
        base_url=base_url or named["base_url"],
        subagent_kind=subagent_backend or named["subagent_backend"],
        subagent_model=subagent_model or named["subagent_model"],
        **backend_opts,
    )
    return RunPlan(tasks, _with_sampling(config, base, orch, sampling or {}), orch, sub, (), extras, reward)


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
    """An observer appending each event as one JSON line, flushed at once (for tail -f / dashboards)."""

    def __init__(self, path: Path) -> None:
        self._f = path.open("a", encoding="utf-8")

    def __call__(self, event: Event) -> None:
        f = self._f
        if isinstance(event, EpisodeFinished):  # the full record is in episode.json; keep lines small
            line = {"type": event.type, "episode_id": event.record.episode_id, "status": event.record.status.value}
            f.write(json.dumps(line) + "\n")
        else:
            f.write(event.model_dump_json(exclude={"result"}) + "\n")
        f.flush()

    def close(self) -> None:
        self._f.close()


def _execute(
    plan: RunPlan,
    *,
    out: Path,
    json_out: bool,
    quiet: bool,
    tracing: TracingOptions | None = None,
    events: Path | None = None,
    mcp: MCPConfig | None = None,
) -> int:
    live_enabled = not quiet and err.is_terminal and not os.environ.get("CI")
    records: list[EpisodeRecord] = []
    paths: dict[str, Path] = {}

    def persist(event: Event) -> None:
        # Runs for every ending, cancellation included, so an interrupted run keeps its record.
        if isinstance(event, EpisodeFinished):
            records.append(event.record)
            paths[event.record.episode_id] = write_episode(event.record, out)

    state = LiveState()
    observers: list[Callable[[Event], None]] = [persist]
    if live_enabled:
        observers.append(state)
    writer = _EventWriter(events) if events is not None else None
    if writer is not None:
        observers.append(writer)
    telemetry = start_tracing(
        tracing or TracingOptions(), out=out, note=None if quiet else lambda n: err.print(f"[dim]{escape(n)}[/dim]")
    )

    def orchestrator(extra: Sequence[Tool | Toolset] = ()) -> Orchestrator:
        return Orchestrator(
            plan.backend,
            plan.config,
            tools=ToolRegistry([*plan.tools, *extra]),
            subagent_backend=plan.subagent_backend,
            observers=observers,
            tracer_provider=telemetry.provider,
            capture_content=telemetry.capture_content,
            reward_fn=PARLReward(plan.reward) if plan.reward is not None else None,
        )

    async def main() -> None:
        if mcp is None:
            orch = orchestrator()
            for t in plan.tasks:
                await orch.run(t)
            return
        from tools.mcp import MCPServers

        # MCP connections live for the whole run, owned by this task, closed on exit or Ctrl-C.
        async with MCPServers(mcp, server_stderr=mcp_log) as servers:
            for st in servers.status:
                if not st.connected:
                    err.print(f"[yellow]warning:[/yellow] MCP server {st.name!r} unavailable: {escape(st.error or '')}")
            orch = orchestrator(servers.toolsets())
            for t in plan.tasks:
                await orch.run(t)

    mcp_log = None
    if mcp is not None:  # servers' own logs go to a file so they never garble the live view
        out.mkdir(parents=True, exist_ok=True)
        mcp_log = (out / "mcp-servers.log").open("a", encoding="utf-8")
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
        if json_out:
            sys.stdout.write(r.model_dump_json() + "\n")
        else:
            Console().print(summary_table(r, str(paths.get(r.episode_id, ""))))
    if interrupted:
        where = f"; record written to {paths[records[-1].episode_id]}" if records else ""
        err.print(f"[yellow]interrupted[/yellow]{escape(where)}")
        return 130
    bad = {EpisodeStatus.FAILED, EpisodeStatus.TIMEOUT, EpisodeStatus.CANCELLED}
    for r in records:  # the tables above go to stdout; what went wrong belongs on stderr too
        if r.status in bad:
            why = r.error or "no error message was recorded"
            err.print(f"[red]error:[/red] episode {r.episode_id} {r.status.value}: {escape(why)}", soft_wrap=True)
    return 1 if any(r.status in bad for r in records) else 0


@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(f"agent-swarm {__version__}")


@app.command("demo-list")
def demo_list(json_out: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List the built-in scripted demo tasks."""
    from orchestrator.demo import DEMO_TASKS

    if json_out:
        typer.echo(json.dumps({k: v.prompt for k, v in DEMO_TASKS.items()}))
        return
    for name, t in DEMO_TASKS.items():
        typer.echo(f"{name}\t{t.prompt}")


# A wide fan-out allocates hundreds of thousands of short-lived objects per stage; with CPython's
# default gen-0 threshold (700) the cyclic GC runs thousands of times per stage and costs ~20% of
# the runtime's CPU per sub-agent step (bench/bench_runtime.py --gc-threshold). Like the tracing SDK,
# process-wide settings belong to the CLI, never to library code.
# gc.freeze() then moves everything imported so far (tens of thousands of module, class and
# pydantic-schema objects) out of the collector's reach: full collections stop re-scanning them,
# which cuts another ~15% of the CPU per step at a 1,000-way fan-out.
GC_THRESHOLD = (50_000, 20, 20)


def tune_gc() -> None:
    """The CLI's process-wide GC settings (the benchmark's ``--cli-gc`` applies the same)."""
    gc.collect()
    gc.set_threshold(*GC_THRESHOLD)
    gc.freeze()


def optional_value(argv: list[str], command: str, option: str, value: str) -> list[str]:
    """``swarm COMMAND ... OPTION`` with no value after it means ``OPTION value`` (click cannot say
    "this option's value is optional"): ``swarm rollout --ray`` is ``--ray local``."""
    if len(argv) < 2 or argv[1] != command:
        return argv
    out = list(argv)
    for i, arg in enumerate(argv):
        if arg == option and (i + 1 == len(argv) or argv[i + 1].startswith("-")):
            out.insert(i + 1 + (len(out) - len(argv)), value)
    return out


def main() -> None:
    """Console-script entry point."""
    sys.argv = optional_value(sys.argv, "rollout", "--ray", "local")
    # Ctrl-C must stop a run even when the CLI was started with SIGINT ignored (a non-interactive
    # shell starts `swarm … &` that way, and Python then keeps SIG_IGN): install the handler that
    # raises KeyboardInterrupt ourselves, which is also what asyncio's runner needs to see to cancel
    # the main task on Ctrl-C.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    tune_gc()
    claim_global_provider()
    app()
