"""``swarm run``: one task, every task of a task file, or a workload's tasks, through the orchestrator.

What it resolves from its options (:class:`~agent_swarm.orchestrator.cli.plan.RunPlan`, in :mod:`.plan`: tasks
and, per episode, config, backends, tools, agent files and reward) and how it runs them
(:func:`execute`): the live tree of stages on a terminal, one line per event without one, records
written for every ending (:class:`~agent_swarm.orchestrator.recorder.RecordWriter`), then the outputs (tree and
summary, ``--json``, ``--json-summary`` or ``-p``).
"""

from __future__ import annotations

import contextlib
import json
import sys
import warnings
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TextIO

import anyio
import typer
from pydantic import BaseModel, ConfigDict
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.text import Text

from agent_swarm.orchestrator.cli.engines import engine_notes
from agent_swarm.orchestrator.cli.live import (
    NO_ANSWER,
    EventLines,
    LiveState,
    critical_text,
    given_answer,
    stage_tree,
    stages_from_record,
    summary_table,
)
from agent_swarm.orchestrator.cli.options import (
    AdapterOpt,
    BackendChoiceOptions,
    BudgetOpt,
    ConfigOpt,
    EpisodeTimeoutOpt,
    KnobOpt,
    MaxConcurrencyOpt,
    MaxCriticalStepsOpt,
    MaxSubagentStepsOpt,
    MaxTokensOpt,
    SubagentTimeoutOpt,
    TemperatureOpt,
    WorkloadOpt,
    parse_knobs,
)
from agent_swarm.orchestrator.cli.plan import RunPlan, RunRequest, make_plan, workload_knobs
from agent_swarm.orchestrator.cli.preflight import unreachable_servers, writable_dir
from agent_swarm.orchestrator.cli.settings import Settings, command_options
from agent_swarm.orchestrator.cli.telemetry_setup import (
    DEFAULT_TRACED_SUBAGENTS,
    Tracing,
    TracingOptions,
    resolve_otlp,
    start_tracing,
)
from agent_swarm.orchestrator.engine import Orchestrator
from agent_swarm.orchestrator.environment import environment
from agent_swarm.orchestrator.recorder import RecordWriter
from agent_swarm.orchestrator.store import records_dir
from agent_swarm.orchestrator.tasks import large_task_warning
from agent_swarm.swarm.errors import LargeInputWarning, UserError
from agent_swarm.swarm.events import EpisodeFinished, Event
from agent_swarm.swarm.records import EpisodeRecord, Task
from agent_swarm.swarm.tracing import Telemetry
from agent_swarm.tools.registry import Tool, ToolRegistry, Toolset

if TYPE_CHECKING:
    from agent_swarm.tools.mcp import MCPConfig

__all__ = ["Output", "RunPlan", "engine_header", "execute", "json_summary", "run"]

err = Console(stderr=True)


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


class _RunTask(BaseModel):
    """``swarm run``'s first options: the task (text, file or demo)."""

    model_config = ConfigDict(frozen=True)

    task: Annotated[
        str | None, typer.Argument(help="the task text; - reads it from stdin (or use --tasks FILE / --demo NAME)")
    ] = None
    task_file: Annotated[
        Path | None,
        typer.Option(
            "--tasks",
            "-t",
            "--task-file",
            "-f",
            help="task file: .jsonl (one task per line), .json or text; - reads stdin",
        ),
    ] = None
    demo: Annotated[
        str | None,
        typer.Option("--demo", metavar="NAME", help="run a built-in SCRIPTED demo task (no model): capitals, budget"),
    ] = None


class RunOptions(BackendChoiceOptions, _RunTask):
    """``swarm run``'s options as parsed: one field per option, in ``--help`` order (:class:`_RunTask`'s, the
    backends, then these)."""

    config_file: ConfigOpt = None
    max_critical_steps: MaxCriticalStepsOpt = None
    budget: BudgetOpt = None
    max_subagents: Annotated[
        int | None,
        typer.Option(
            "--max-subagents", metavar="N", min=1, help="sub-agents admitted per stage [default: 16, or the config's]"
        ),
    ] = None
    max_concurrency: MaxConcurrencyOpt = None
    max_subagent_steps: MaxSubagentStepsOpt = None
    subagent_timeout: SubagentTimeoutOpt = None
    episode_timeout: EpisodeTimeoutOpt = None
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="records go to OUT/<episode-id>/ [default: $SWARM_RECORDS_DIR, else ~/.local/share/swarm/records]",
        ),
    ] = None
    json_out: Annotated[bool, typer.Option("--json", help="print the full episode record as JSON on stdout")] = False
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="no live view on a terminal, no event lines without one")
    ] = False
    otlp_endpoint: Annotated[
        str | None,
        typer.Option(
            "--otlp-endpoint",
            metavar="URL",
            help="OTLP receiver URL (default: OTEL_EXPORTER_OTLP_* or a local Jaeger on :4318)",
        ),
    ] = None
    otlp_protocol: Annotated[
        str | None, typer.Option("--otlp-protocol", metavar="PROTOCOL", help="http/protobuf or grpc")
    ] = None
    trace_content: Annotated[
        bool,
        typer.Option("--trace-content/--no-trace-content", help="put prompts and completions on spans (size-capped)"),
    ] = False
    trace_file: Annotated[
        bool,
        typer.Option("--trace-file/--no-trace-file", help="write OUT/<episode-id>/trace.jsonl (OTLP JSON for Jaeger)"),
    ] = True
    trace_subagents: Annotated[
        int,
        typer.Option(
            "--trace-subagents",
            metavar="N",
            min=0,
            help="trace at most this many sub-agents of a wider stage, spread over it (0: all; the record has all)",
        ),
    ] = DEFAULT_TRACED_SUBAGENTS
    workload: WorkloadOpt = None
    mode: Annotated[str, typer.Option("--mode", metavar="MODE", help="workload runs: swarm or single")] = "swarm"
    split: Annotated[
        str, typer.Option("--split", help="workload runs: train, dev or test (held out)", metavar="SPLIT")
    ] = "train"
    index: Annotated[
        int,
        typer.Option(
            "--index", metavar="I", min=0, help="workload runs: the first task's index in the split [default: 0]"
        ),
    ] = 0
    num_tasks: Annotated[
        int | None,
        typer.Option(
            "-n", "--num-tasks", metavar="N", min=1, help="workload runs: how many tasks, from --index [default: 1]"
        ),
    ] = None
    knob: KnobOpt = None
    events: Annotated[
        Path | None,
        typer.Option("--events", help="stream runtime events to this JSONL file as they happen (-: stdout)"),
    ] = None
    mcp_config: Annotated[
        Path | None, typer.Option("--mcp-config", help="MCP servers (mcpServers JSON) whose tools agents may use")
    ] = None
    temperature: TemperatureOpt = None
    max_tokens: MaxTokensOpt = None
    seed: Annotated[
        int | None,
        typer.Option("--seed", help="sampling seed (reproducible runs); workload runs: the task seed too [default: 0]"),
    ] = None
    tools: Annotated[
        list[str] | None,
        typer.Option(
            "--tools",
            metavar="NAMES",
            help="built-in tools the orchestrator may call and grant to sub-agents, comma-separated: "
            "python, files, search (default: none, or the config's [tools] enabled)",
        ),
    ] = None
    workspace: Annotated[
        Path | None,
        typer.Option("--workspace", help="python/files work in WORKSPACE/<episode-id>/ (default: OUT/workspaces)"),
    ] = None
    search_corpus: Annotated[
        Path | None,
        typer.Option(
            "--search-corpus", help="what --tools search searches: a directory of .md/.txt/.jsonl or a .jsonl"
        ),
    ] = None
    agents_dirs: Annotated[
        list[Path] | None,
        typer.Option(
            "--agents",
            metavar="DIR",
            help="agent files (*.md with name/description/tools/model front matter; the body is the system "
            "prompt) offered as ready sub-agent types; repeatable (default: .swarm/agents/ from here up to the "
            "repository root, then the user config directory's agents/)",
        ),
    ] = None
    print_answer: Annotated[
        bool, typer.Option("--print", "-p", help="print only the final answer on stdout (for scripts and pipes)")
    ] = False
    json_summary: Annotated[
        bool,
        typer.Option(
            "--json-summary",
            help="print one small JSON object per episode: answer, status, critical/total steps, wall time, record",
        ),
    ] = False
    orchestrator_adapter: AdapterOpt = None

    def output(self) -> Output:
        """The one output form asked for (two is a :class:`UserError`)."""
        if sum((self.json_out, self.json_summary, self.print_answer)) > 1:
            raise UserError("choose one output: --json (the record), --json-summary or -p/--print (the answer)")
        chosen: tuple[tuple[Output, bool], ...] = (
            ("json", self.json_out),
            ("summary", self.json_summary),
            ("print", self.print_answer),
        )
        return next((name for name, given in chosen if given), "human")

    def tracing(self) -> TracingOptions:
        resolve_otlp(self.otlp_endpoint, self.otlp_protocol)  # a bad endpoint is exit code 2 before anything runs
        return TracingOptions(
            otlp_endpoint=self.otlp_endpoint,
            otlp_protocol=self.otlp_protocol,
            capture_content=self.trace_content,
            trace_file=self.trace_file,
            traced_subagents=self.trace_subagents or None,
        )

    def settings(self) -> Settings:
        """The config file, flags and environment resolved once (a found config file is named on stderr
        unless ``--quiet``); ``--seed`` is the sampling seed."""
        return Settings.resolve(
            self,
            "run -w" if self.workload else "run",
            quiet=self.quiet,
            seed=self.seed,
            adapter=self.orchestrator_adapter,
            max_subagents_per_stage=self.max_subagents,
            subagent_timeout_s=self.subagent_timeout,
        )

    def request(self, out: Path) -> RunRequest:
        """What runs: the tasks' source and :meth:`settings`."""
        settings = self.settings()
        return RunRequest(
            task=self.task,
            task_file=self.task_file,
            demo=self.demo,
            workload=self.workload,
            mode=self.mode,
            split=self.split,
            index=self.index,
            num_tasks=self.num_tasks,
            knobs=workload_knobs(self.workload, self.knob or []) if self.workload else parse_knobs(self.knob or []),
            task_seed=self.seed or 0,
            settings=settings,
            tools=self.tools,
            workspace=self.workspace,
            search_corpus=self.search_corpus,
            agents_dirs=self.agents_dirs,
            out=out,
            mcp=self.mcp_config is not None,
        )


@command_options(RunOptions)
def run(**given: Any) -> None:
    """Run one task, every task of a task file, or a workload's tasks through the orchestrator.

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
      echo "2+2?" | swarm run -p -
      swarm run -w deep-lookup -b gold --split test --index 3

    Config: -c FILE, else ./swarm.toml, else the user config directory's swarm.toml (swarm init writes one).
    """
    options = RunOptions(**given)
    out = options.out if options.out is not None else records_dir()
    try:
        output = options.output()
        tracing = options.tracing()
        plan = make_plan(options.request(out))
        mcp = _mcp_config(options.mcp_config)
    except UserError as exc:
        raise _fail(str(exc)) from None
    code = execute(plan, out=out, output=output, quiet=options.quiet, tracing=tracing, events=options.events, mcp=mcp)
    raise typer.Exit(code)


def _mcp_config(path: Path | None) -> MCPConfig | None:
    if path is None:
        return None
    from agent_swarm.tools.mcp import load_mcp_config  # the MCP client, only for runs that connect servers

    return load_mcp_config(path)


class _EventWriter:
    """An observer appending each event as one JSON line, flushed at once (for tail -f / dashboards);
    the path ``-`` is standard output. A write that fails (a full disk) stops the file, never the run:
    ``failure`` says why, and the CLI warns once the run is over."""

    def __init__(self, path: Path) -> None:
        self._own = str(path) != "-"
        self._path = path
        self._f: TextIO = path.open("a", encoding="utf-8") if self._own else sys.stdout
        self.failure: str | None = None

    def __call__(self, event: Event) -> None:
        if self.failure is not None:
            return
        if isinstance(event, EpisodeFinished):  # the full record is in episode.json; keep lines small
            line = json.dumps(
                {"type": event.type, "episode_id": event.record.episode_id, "status": event.record.status.value}
            )
        else:
            line = event.model_dump_json(exclude={"result"})
        try:
            self._f.write(line + "\n")
            self._f.flush()
        except OSError as exc:
            self.failure = f"events to {self._path} stopped at event {event.type}: {exc.strerror or exc}"

    def close(self) -> None:
        if self._own:
            with contextlib.suppress(OSError):  # what could not be flushed was said in ``failure``
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
    budget = critical_text(record.dag.critical_steps, _budget(record))
    return Text.assemble(("stages ", "bold"), f"({len(record.stages)}) · {budget}")


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
    """Run the plan's tasks one after another and print each record in ``output`` form; the exit code."""
    if (code := _preflight(plan, out)) is not None:
        return code
    live_enabled = not quiet and err.is_terminal and not environment().ci
    telemetry = start_tracing(
        tracing or TracingOptions(), out=out, note=None if quiet else lambda n: err.print(f"[dim]{escape(n)}[/dim]")
    )
    writer = RecordWriter(out, annotate=_annotations(plan, telemetry))
    state = LiveState(budget=plan.config.max_critical_steps, model=None if plan.policy else plan.kit(0).backend.model)
    observers, events_out = _observers(
        writer, state if live_enabled else None, quiet, plan.config.max_critical_steps, events
    )
    orchestrator = _orchestrators(plan, observers, telemetry.telemetry())
    mcp_log = _mcp_log(out) if mcp is not None else None

    async def main() -> None:
        await _run_tasks(plan.tasks, orchestrator, mcp, mcp_log)

    if not quiet:
        for line in engine_header(plan):
            err.print(f"[dim]{escape(line)}[/dim]", soft_wrap=True)
    for note in filter(None, map(large_task_warning, plan.tasks)):
        err.print(f"[yellow]warning:[/yellow] {escape(note)}", soft_wrap=True)
    interrupted = False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LargeInputWarning)  # said above, once per task
            with Live(state, console=err, refresh_per_second=8, transient=True) if live_enabled else nullcontext():
                anyio.run(main)
    except UserError as exc:  # e.g. an agent file granting an MCP tool no server offers
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        interrupted = True
    finally:  # flush spans on every exit: normal, error and Ctrl-C (bounded, never hangs)
        for f in (events_out, mcp_log):
            if f is not None:
                f.close()
        if events_out is not None and events_out.failure is not None:
            err.print(f"[yellow]warning:[/yellow] {escape(events_out.failure)}", soft_wrap=True)
        for warning in telemetry.shutdown():
            err.print(f"[yellow]warning:[/yellow] {escape(warning)}", soft_wrap=True)
    for r in writer.records:
        _print_record(r, str(writer.paths.get(r.episode_id, "")), output, plan.tools_note)
    for episode_id, why in writer.failures.items():
        err.print(f"[yellow]warning:[/yellow] the record of episode {episode_id} was not written: {escape(why)}")
    return _exit_code(writer.records, writer.paths, interrupted)


def engine_header(plan: RunPlan) -> list[str]:
    """The run header's lines on the local engines the plan runs (:func:`engine_notes`)."""
    return engine_notes(plan.backends())


def _annotations(plan: RunPlan, telemetry: Tracing) -> Callable[[EpisodeRecord], dict[str, Any]]:
    """What the CLI adds to each record's metadata: where its spans went (``swarm traces show`` links
    to Jaeger) and, for a scripted policy, that no model ran (the summary then shows no token counts)."""

    def annotate(record: EpisodeRecord) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if telemetry.otlp is not None and record.trace_id is not None:
            extra["otlp_endpoint"] = telemetry.otlp.endpoint
        if plan.policy is not None:
            extra |= {"scripted": True, "policy": plan.policy}
        return extra

    return annotate


def _orchestrators(
    plan: RunPlan, observers: Sequence[Callable[[Event], None]], telemetry: Telemetry
) -> Callable[[int, Sequence[Tool | Toolset]], Orchestrator]:
    """Task index → its orchestrator: one per episode kit (a workload task has its own; others share one)."""
    built: dict[int, Orchestrator] = {}

    def orchestrator(i: int, extra: Sequence[Tool | Toolset] = ()) -> Orchestrator:
        kit = plan.kit(i)
        if id(kit) not in built:
            built[id(kit)] = Orchestrator(
                kit.backend,
                kit.config,
                tools=ToolRegistry([*kit.tools, *extra]),
                subagent_backend=kit.subagent_backend,
                subagent_backends=kit.subagent_backends,
                agents=kit.agents,
                observers=list(observers),
                telemetry=telemetry,
                reward_fn=kit.reward_fn,
            )
        return built[id(kit)]

    return orchestrator


def _mcp_log(out: Path) -> TextIO:
    """MCP servers' own logs go to a file so they never garble the live view."""
    out.mkdir(parents=True, exist_ok=True)
    return (out / "mcp-servers.log").open("a", encoding="utf-8")


def _preflight(plan: RunPlan, out: Path) -> int | None:
    """The exit code when the run cannot start (1: a model server unreachable, 2: ``out`` not writable),
    said on stderr; ``None`` when it can."""
    if not _servers_reachable(plan):
        return 1
    try:
        writable_dir(out, "--out")
    except UserError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 2
    return None


def _servers_reachable(plan: RunPlan) -> bool:
    """Probe each model server once, before the first task (every episode would otherwise fail the
    same way, after the backend's retries); say which cannot be reached."""
    problems = anyio.run(unreachable_servers, plan.backends())
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
    orchestrator: Callable[[int, Sequence[Tool | Toolset]], Orchestrator],
    mcp: MCPConfig | None,
    mcp_log: TextIO | None,
) -> None:
    """Run the tasks one after another; with MCP servers connected for the whole run."""
    if mcp is None:
        await _each_task(tasks, orchestrator, ())
        return
    from agent_swarm.tools.mcp import MCPServers

    # MCP connections live for the whole run, owned by this task, closed on exit or Ctrl-C.
    async with MCPServers(mcp, server_stderr=mcp_log) as servers:
        for st in servers.status:
            if not st.connected:
                err.print(f"[yellow]warning:[/yellow] MCP server {st.name!r} unavailable: {escape(st.error or '')}")
        await _each_task(tasks, orchestrator, servers.toolsets())


async def _each_task(
    tasks: Sequence[Task],
    orchestrator: Callable[[int, Sequence[Tool | Toolset]], Orchestrator],
    extra: Sequence[Tool | Toolset],
) -> None:
    for i, t in enumerate(tasks):
        await orchestrator(i, extra).run(t)


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
        path = paths.get(records[-1].episode_id) if records else None
        where = f"; record written to {path}" if path is not None else ""
        err.print(f"[yellow]interrupted[/yellow]{escape(where)}")
        return 130
    bad = NO_ANSWER
    for r in records:  # the tables go to stdout; what went wrong belongs on stderr too
        if r.status in bad:
            why = r.error or "no error message was recorded"
            err.print(f"[red]error:[/red] episode {r.episode_id} {r.status.value}: {escape(why)}", soft_wrap=True)
    return 1 if any(r.status in bad for r in records) else 0
