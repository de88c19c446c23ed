"""``swarm eval``: a workload's tasks in swarm and single-agent mode, side by side.

Registered on the main app in :mod:`agent_swarm.orchestrator.cli`. ``--backend gold`` plays the workload's gold
scripted policy (no model); any other backend name is resolved like ``swarm run`` does. Exit codes:
0 done, 1 some episodes crashed or a model server cannot be reached, 2 bad input, 130 interrupted
(finished episodes stay on disk).
"""

from __future__ import annotations

import functools
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from pydantic import BaseModel, ConfigDict
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from agent_swarm.orchestrator.adapters import resolve_orchestrator_adapter
from agent_swarm.orchestrator.cli.engines import engine_notes
from agent_swarm.orchestrator.cli.interrupt import run_until_stopped
from agent_swarm.orchestrator.cli.options import (
    AdapterOpt,
    BackendOpt,
    EpisodeLimitOptions,
    KnobOpt,
    LatencyOpt,
    ModelChoiceOptions,
    SubagentCacheOptions,
    is_scripted,
    parse_knobs,
    warn_cache_bypass,
)
from agent_swarm.orchestrator.cli.preflight import unreachable_servers, writable_dir
from agent_swarm.orchestrator.cli.progress import terminal_progress
from agent_swarm.orchestrator.cli.settings import Settings, command_options
from agent_swarm.orchestrator.cli.telemetry_setup import Tracing, TracingOptions, start_tracing
from agent_swarm.orchestrator.eval import (
    BackendPair,
    BackendResolver,
    Configs,
    EvalReport,
    Progress,
    arm_mode,
    parse_arms,
    run_eval,
    write_tasks,
)
from agent_swarm.orchestrator.eval_raw import RAW_FILE, Provenance, code_state, file_sha256, read_raw
from agent_swarm.orchestrator.eval_report import comparisons, load_runs, render_curve, render_report, render_summary
from agent_swarm.swarm.backend import SamplingParams
from agent_swarm.swarm.backends.replay_cache import CachedBackend, ReplayCache
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import UserError
from agent_swarm.swarm.records import Task
from agent_swarm.swarm.tracing import Telemetry
from agent_swarm.workloads import Mode, Workload, get_workload, workload_names
from agent_swarm.workloads.splits import check_fresh_test_seed, record_test_seed, used_test_seeds

__all__ = ["backend_resolver", "eval_command", "provenance", "report_table"]

err = Console(stderr=True)
EVAL_TABLES = ("swarm", "backend")
"""Config tables swarm eval (and swarm run --workload) read: a workload's own verifier scores its episodes."""
DEFAULT_EVAL_ROOT = Path("traces") / "eval"
DEFAULT_SPLIT = "dev"
SPLIT_HELP = "task split: dev (tuning), train (training) or test (final tables, a fresh seed: docs/splits.md)"

_FIELDS = (
    ("metric", "{:.3f}"),
    ("success_rate", "{:.3f}"),
    ("critical_steps", "{:.1f}"),
    ("total_steps", "{:.1f}"),
    ("wall_time_s", "{:.2f}"),
    ("median_wall_time_s", "{:.2f}"),
    ("tokens", "{:.0f}"),
    ("mean_width", "{:.2f}"),
    ("fanout_rate", "{:.2f}"),
    ("delegation_rate", "{:.2f}"),
    ("finish_rate", "{:.3f}"),
)


def report_table(report: EvalReport) -> Table:
    """The human table: one row per measure, one column per arm, and single/swarm when both ran."""
    arms = list(report.summaries)
    t = Table(
        title=Text(
            f"swarm eval · {report.workload} · {report.split} split · seed {report.seed} · {report.backend} · "
            f"{len({r.task_id for r in report.rows})} task(s) · run {report.run_id}"
        )
    )
    t.add_column("measure")
    for m in arms:
        t.add_column(m, justify="right")
    both = "single" in arms and "swarm" in arms
    if both:
        t.add_column("single/swarm", justify="right")
    scripted = is_scripted(report.backend)
    for name, fmt in _FIELDS:
        label = report.metric_name if name == "metric" else name
        if name == "tokens" and scripted:  # a scripted policy's counts come from a stand-in tokenizer
            t.add_row(label, *(["not measured (scripted)"] * len(arms)), *(["—"] if both else []))
            continue
        cells = []
        for m in arms:
            v = getattr(report.summaries[m], name)
            cells.append("—" if v is None else fmt.format(v))
        if both:
            r = report.ratios.get(name)
            cells.append("—" if r is None else f"{r:.2f}×")
        t.add_row(label, *cells)
    if any(s.subagent_cache for s in report.summaries.values()):
        t.add_row("sub-agent cache", *(_cache_cell(report.summaries[m].subagent_cache) for m in arms), *([""] * both))
    errors = sum(s.errors for s in report.summaries.values())
    if errors:
        t.caption = f"{errors} episode(s) ended with an error; see episodes.jsonl.gz"
    return t


def _cache_cell(counts: dict[str, int]) -> str:
    """``hits/misses`` of the sub-agent replay cache (wall times of hits are not model time)."""
    if not counts:
        return "off"
    bypassed = counts.get("bypassed", 0)
    return f"{counts.get('hits', 0)} hits / {counts.get('misses', 0)} misses" + (
        f" / {bypassed} bypassed" if bypassed else ""
    )


class _EvalTasks(BaseModel):
    """``swarm eval``'s first options: the workload, arms, backend kind and tasks."""

    model_config = ConfigDict(frozen=True)

    workload: Annotated[str, typer.Option("--workload", "-w", metavar="NAME", help="workload name (see --list)")] = ""
    mode: Annotated[
        str,
        typer.Option(
            "--mode",
            metavar="ARMS",
            help="arms, comma-separated: swarm, single, single-parallel; both (swarm,single) or all",
        ),
    ] = "both"
    backend: BackendOpt = "local"
    n: Annotated[int, typer.Option("-n", "--num-tasks", min=1, metavar="N", help="number of tasks")] = 10
    seed: Annotated[int, typer.Option("--seed", metavar="N", help="task-generation seed (and the sampling seed)")] = 0
    split: Annotated[str, typer.Option("--split", metavar="SPLIT", help=SPLIT_HELP)] = DEFAULT_SPLIT
    knob: KnobOpt = None


class _EvalChoice(ModelChoiceOptions, _EvalTasks):
    """``swarm eval``'s options up to ``--config``: :class:`_EvalTasks`', the models, the config file."""

    config_file: Annotated[
        Path | None,
        typer.Option("--config", "-c", metavar="FILE", help="TOML/JSON config: [swarm] and [backend] tables"),
    ] = None


class _EvalRun(EpisodeLimitOptions, _EvalChoice):
    """``swarm eval``'s options up to ``--orchestrator-adapter``: :class:`_EvalChoice`'s, the episode limits,
    then how the episodes run and report."""

    temperature: Annotated[
        float | None,
        typer.Option(
            "--temperature", min=0.0, metavar="T", help="model backends (0: greedy) [default: 0, or --config's]"
        ),
    ] = None
    max_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-tokens",
            min=1,
            metavar="N",
            help="model backends: tokens per turn [default: as swarm run, or --config's]",
        ),
    ] = None
    latency: LatencyOpt = 0.0
    concurrent_episodes: Annotated[
        int,
        typer.Option(
            "--concurrent-episodes",
            min=1,
            metavar="N",
            help="episodes running at once (1: wall times comparable) [default: 1]",
        ),
    ] = 1
    samples: Annotated[
        int,
        typer.Option(
            "--samples",
            min=1,
            metavar="K",
            help="episodes per task and arm (sampling seed +i; greedy: run-to-run variance)",
        ),
    ] = 1
    out: Annotated[Path, typer.Option("--out", "-o", metavar="DIR", help="results go to OUT/<run-id>/")] = (
        DEFAULT_EVAL_ROOT
    )
    run_id: Annotated[str | None, typer.Option("--run-id", metavar="ID", help="[default: a timestamp]")] = None
    resume: Annotated[
        bool, typer.Option("--resume", help="continue run --run-id: skip its finished episodes (same settings)")
    ] = False
    ledger: Annotated[
        Path | None,
        typer.Option(
            "--test-seed-ledger",
            metavar="FILE",
            help="with --split test: refuse a seed this JSONL ledger lists as used, and record it when the run ends",
        ),
    ] = None
    report_only: Annotated[
        bool, typer.Option("--report", help="print the markdown report of the RUN_DIRs' raw files; run nothing")
    ] = False
    report_dirs: Annotated[
        list[Path] | None,
        typer.Argument(metavar="[RUN_DIR]...", help="with --report: run directories", show_default=False),
    ] = None
    curve_knob: Annotated[
        str | None,
        typer.Option("--curve", metavar="KNOB", help="with --report: the curve over this knob (e.g. entities) instead"),
    ] = None
    summary: Annotated[
        bool,
        typer.Option("--summary", help="with --report: one row per run (each arm's quality, swarm vs each single arm)"),
    ] = False
    export_tasks: Annotated[
        Path | None, typer.Option("--export-tasks", metavar="FILE", help="write tasks as JSONL, exit")
    ] = None
    json_out: Annotated[bool, typer.Option("--json", help="print the report as JSON on stdout")] = False
    list_workloads: Annotated[bool, typer.Option("--list", help="list workloads and their knobs")] = False
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no line per finished episode on stderr")] = False
    orchestrator_adapter: AdapterOpt = None


class EvalOptions(SubagentCacheOptions, _EvalRun):
    """``swarm eval``'s options as parsed: one field per option, in ``--help`` order (:class:`_EvalRun`'s,
    then the sub-agent cache's)."""

    def settings(self, *, seed_typed: bool) -> Settings:
        """The config file, flags and environment resolved once: ``--seed`` is the task seed and the greedy
        start's sampling seed, and (``seed_typed``) the sampling seed over the config file's too."""
        return Settings.resolve(
            self,
            "eval",
            quiet=self.quiet or self.json_out,
            seed=self.seed if seed_typed else None,
            greedy_seed=self.seed,
            adapter=self.orchestrator_adapter,
            cache=self,
        )


@command_options(EvalOptions)
def eval_command(ctx: typer.Context, **given: Any) -> None:
    """Run a workload's tasks in several arms (swarm, single agent, single agent with parallel calls)
    and compare them on the same tasks.

    Examples:

    \b
      swarm eval --list
      swarm eval -w wide-lookup -b scripted -n 5    # gold policy, no model
      swarm eval -w tau2-batch -n 30 --mode all --run-id t1
      swarm eval -w tau2-batch -n 30 --mode all --run-id t1 --resume
      swarm eval --report traces/eval/t1            # the tables again
      swarm eval -w bfcl-parallel -n 3 --export-tasks tasks.jsonl
    """
    o = EvalOptions(**given)
    if o.list_workloads:
        raise typer.Exit(_list_workloads())
    if o.report_only or o.report_dirs:
        if not (o.report_only and o.report_dirs):
            raise _fail(UserError("--report reads run directories: swarm eval --report RUN_DIR [RUN_DIR ...]"))
        raise typer.Exit(_print_report(o.report_dirs, o.curve_knob, summary=o.summary))
    try:
        job, backends = _resolve(o, seed_typed=_typed(ctx, "seed"))
    except UserError as exc:
        raise _fail(exc) from None
    if problems := anyio.run(unreachable_servers, backends(job.tasks[0], arm_mode(job.arms[0]))):
        for p in problems:  # every episode would fail the same way, after the backend's retries
            err.print(f"[red]error:[/red] model server {escape(p)}; check --base-url and that the server is up")
        raise typer.Exit(1)
    try:
        writable_dir(o.out, "--out")
    except UserError as exc:
        raise _fail(exc) from None
    rid = o.run_id or f"{job.wl.name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    code = _run_job(job, backends, out=o.out, run_id=rid, resume=o.resume, ledger=o.ledger, json_out=o.json_out)
    raise typer.Exit(code)


def _resolve(o: EvalOptions, *, seed_typed: bool) -> tuple[_EvalJob, BackendResolver]:
    """The evaluation the options ask for, with its :class:`Settings` resolved once (``--export-tasks``
    writes the tasks and exits here); a typed ``--seed`` is also the sampling seed over the config's."""
    if not o.workload:
        raise UserError(f"--workload is required; known: {', '.join(workload_names())}")
    wl = get_workload(o.workload)
    arms = parse_arms(o.mode)
    knobs = parse_knobs(o.knob or [])
    tasks = wl.tasks(o.n, seed=o.seed, split=o.split, **knobs)
    if o.export_tasks is not None:
        raise typer.Exit(_export(tasks, o.export_tasks, o.workload))
    settings = o.settings(seed_typed=seed_typed)
    backends = backend_resolver(settings, o.workload, latency=o.latency)
    prov = provenance(o.backend, backends(tasks[0], arm_mode(arms[0])), settings.extras)
    base = settings.base or SwarmConfig()
    overrides = settings.overrides | _sampling(settings, base, prov.model)
    warn_cache_bypass(err, settings.extras, overrides.get("subagent_sampling") or base.subagent_sampling)
    job = _EvalJob(
        wl=wl,
        tasks=tasks,
        arms=arms,
        base=base,
        overrides=overrides,
        split=o.split,
        seed=o.seed,
        backend=o.backend,
        provenance=prov,
        concurrent=o.concurrent_episodes,
        samples=o.samples,
        quiet=o.quiet,
        knobs=knobs,
    )
    return job, backends


def _fail(exc: Exception) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


@dataclass(frozen=True, slots=True)
class _EvalJob:
    """One ``swarm eval`` invocation, resolved."""

    wl: Workload
    tasks: list[Task]
    arms: tuple[str, ...]
    base: SwarmConfig
    overrides: dict[str, Any]
    split: str
    seed: int
    backend: str
    provenance: Provenance
    concurrent: int
    samples: int
    quiet: bool
    knobs: dict[str, Any]


def _list_workloads() -> int:
    """``swarm eval --list``: one line per workload, with its metric, description and knobs."""
    for name in workload_names():
        wl = get_workload(name)
        known = ", ".join(f"{k}={f.default!r}" for k, f in wl.knobs_model.model_fields.items())
        typer.echo(f"{name}\t{wl.metric}\t{wl.description}\tknobs: {known or '(none)'}")
    return 0


def _export(tasks: list[Task], path: Path, workload: str) -> int:
    """``--export-tasks FILE``: write the tasks as JSONL and say so."""
    write_tasks(tasks, path)
    err.print(f"wrote {len(tasks)} {escape(workload)} task(s) to {escape(str(path))}")
    return 0


def _run_job(
    job: _EvalJob,
    backends: BackendResolver,
    *,
    out: Path,
    run_id: str,
    resume: bool,
    ledger: Path | None,
    json_out: bool,
) -> int:
    """Run the evaluation (checking and recording a test seed in ``ledger``), print the report; the exit code."""
    wl, split, seed, knobs, rid = job.wl, job.split, job.seed, job.knobs, run_id
    scope = wl.knobs(knobs).task_scope()  # a test seed is burnt for these tasks' knobs only
    burn: Callable[[], None] | None = None
    try:
        if ledger is not None and split == "test" and not (resume and (out / rid / "manifest.json").is_file()):
            check_fresh_test_seed(ledger, wl.name, seed, scope)
            # burnt when its episodes start, not when it ends: a run stopped half-way has used its tasks too
            burn = functools.partial(record_test_seed, ledger, wl.name, seed, report=str(out / rid), knobs=scope)
        report = _execute(job, backends, out=out, run_id=rid, resume=resume, started=burn)
    except KeyboardInterrupt:
        err.print(
            f"[yellow]interrupted[/yellow]; finished episodes are in {escape(str(out / rid))}; continue with "
            f"the same command and --run-id {escape(rid)} --resume",
            soft_wrap=True,
        )
        raise typer.Exit(130) from None
    except UserError as exc:
        raise _fail(exc) from None
    if ledger is not None and split == "test" and seed not in used_test_seeds(ledger, wl.name, scope):
        record_test_seed(ledger, wl.name, seed, report=str(report.out_dir), knobs=scope)
    if json_out:
        sys.stdout.write(report.model_dump_json() + "\n")
    else:
        Console().print(report_table(report))
        if report.out_dir is not None and (paired := comparisons(read_raw(Path(report.out_dir) / RAW_FILE)[0])):
            sys.stdout.write("\n" + paired + "\n")
        err.print(f"results: {escape(str(report.out_dir))} (tables again: swarm eval --report DIR)")
    return 1 if any(r.status == "crashed" for r in report.rows) else 0


def _budget_text(job: _EvalJob, configs: Configs) -> str:
    """Each arm's budgets over the tasks: ``swarm: critical 12–16, sub-agent steps 8``."""
    parts = []
    for arm in job.arms:
        cfgs = [cfg for (_, a), (_, cfg) in configs.items() if a == arm]

        def span(name: str, cs: list[SwarmConfig] = cfgs) -> str:
            lo, hi = min(getattr(c, name) for c in cs), max(getattr(c, name) for c in cs)
            return str(lo) if lo == hi else f"{lo}–{hi}"

        sub = f", sub-agent steps {span('max_subagent_steps')}" if arm_mode(arm) == "swarm" else ""
        parts.append(f"{arm}: critical {span('max_critical_steps')}{sub}")
    return "; ".join(parts)


def _banner(job: _EvalJob, run_id: str | None, resumed: int, todo: int, configs: Configs) -> None:
    p = job.provenance
    model = p.model + (f" + adapter {p.adapter}" if p.adapter else "")
    if p.subagent_model and p.subagent_model != p.model:
        model += f" (sub-agents {p.subagent_model})"
    commit = f"{(p.commit or 'unknown')[:10]}{' (dirty)' if p.dirty else ''}"
    err.print(
        f"swarm eval · {job.wl.name} · split {job.split} · seed {job.seed} · n {len(job.tasks)} · "
        f"arms {','.join(job.arms)}" + (f" · {job.samples} samples per task" if job.samples > 1 else "") + "\n"
        f"  model {model} · backend {job.backend} · commit {commit}\n"
        + "".join(f"  {escape(line)}\n" for line in (p.engine or "").splitlines())
        + f"  budgets {_budget_text(job, configs)}\n"
        f"  run {run_id}: {todo} episode(s) to run, {job.concurrent} at once"
        + (f"; {resumed} already done (resumed)" if resumed else ""),
        highlight=False,
        soft_wrap=True,
    )


def _eta(seconds: float) -> str:
    s = int(seconds + 0.5)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _progress_line(job: _EvalJob) -> Callable[[Progress], None]:
    """The k/N line per finished episode, with an ETA (nothing with ``--quiet``)."""
    started = time.monotonic()

    def progress(p: Progress) -> None:
        if job.quiet:
            return
        row = p.row
        eta = (time.monotonic() - started) / p.done * (p.total - p.done)
        err.print(
            f"  [{p.done + p.resumed}/{p.total + p.resumed}] {escape(row.task_id)} {escape(f'[{row.arm}]')} "
            f"{row.status}: {job.wl.metric}={row.metric:.3f} critical={row.critical_steps} total={row.total_steps} "
            f"{row.wall_time_s:.1f}s · ETA {_eta(eta)}"
            + (f" [yellow]{escape(row.error)}[/yellow]" if row.error else ""),
            highlight=False,
            soft_wrap=True,
        )

    return progress


class _ArmTraces:
    """Each arm's tracer, writing ``episodes/<arm>/<episode-id>/trace.jsonl`` (started with the arm's first
    episode, once the run directory exists)."""

    def __init__(self, run_dir: Path) -> None:
        self._run_dir = run_dir
        self._tracings: dict[str, Tracing] = {}
        self._tracers: dict[str, Telemetry] = {}

    def __call__(self, arm: str) -> Telemetry:
        if arm not in self._tracers:
            self._tracings[arm] = start_tracing(TracingOptions(), out=self._run_dir / "episodes" / arm)
            self._tracers[arm] = self._tracings[arm].telemetry()
        return self._tracers[arm]

    def shutdown(self) -> None:
        for t in self._tracings.values():
            for warning in t.shutdown():
                err.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False)


def _execute(
    job: _EvalJob,
    backends: BackendResolver,
    *,
    out: Path,
    run_id: str,
    resume: bool,
    started: Callable[[], None] | None = None,
) -> EvalReport:
    """Run the evaluation with a banner, a k/N line per episode with an ETA, and a trace per episode;
    ``started`` is called once the run directory is open, before the first episode."""

    def on_start(resumed: int, todo: int, configs: Configs) -> None:
        if started is not None:
            started()
        _banner(job, run_id, resumed, todo, configs)

    telemetry = _ArmTraces(out / run_id)

    async def main() -> EvalReport:
        return await run_eval(
            job.wl,
            job.tasks,
            backends,
            arms=job.arms,
            base_config=job.base,
            overrides=job.overrides,
            out_dir=out,
            run_id=run_id,
            resume=resume,
            backend_name=job.backend,
            split=job.split,
            seed=job.seed,
            knobs=job.knobs,
            on_row=_progress_line(job),
            on_start=on_start,
            concurrent_episodes=job.concurrent,
            samples=job.samples,
            provenance=job.provenance,
            telemetry=telemetry,
            argv=tuple(sys.argv),
        )

    try:
        return run_until_stopped(main)
    finally:
        telemetry.shutdown()


def _print_report(dirs: list[Path], knob: str | None = None, *, summary: bool = False) -> int:
    """``swarm eval --report DIR... [--curve KNOB | --summary]``: the markdown report (or curve, or one row
    per run) regenerated from raw files (exit 2 on bad input)."""
    if knob and summary:
        raise _fail(UserError("--curve and --summary are two views of a report: give one"))
    try:
        runs = load_runs(dirs)
        text = render_curve(runs, knob) if knob else render_summary(runs) if summary else render_report(runs)
    except UserError as exc:
        raise _fail(exc) from None
    sys.stdout.write(text)
    return 0


def provenance(backend: str, pair: BackendPair, extras: dict[str, Any]) -> Provenance:
    """Where the numbers come from: the code commit, the model files' sha256 and the adapter."""
    commit, dirty = code_state()
    orch, sub = pair
    name, sub_name = orch.model, (sub or orch).model
    if is_scripted(backend):
        return Provenance(commit=commit, dirty=dirty, backend=backend, model=name, subagent_model=sub_name)
    adapter = None
    if backend == "local" or extras.get("backend", {}).get("kind") == "local":
        choice = extras.get("backend", {}).get("orchestrator_adapter")
        adapter = resolve_orchestrator_adapter(choice, name)
    return Provenance(
        commit=commit,
        dirty=dirty,
        backend=backend,
        model=name,
        model_sha256=_model_sha256(name),
        subagent_model=sub_name,
        subagent_model_sha256=_model_sha256(sub_name),
        adapter=str(adapter.path) if adapter else None,
        adapter_sha256=file_sha256(adapter.path) if adapter else None,
        engine="\n".join(engine_notes(pair)) or None,
    )


def _model_sha256(name: str) -> str | None:
    """A local model's pinned sha256 (verified when it was installed), a .gguf file's own; else None."""
    from agent_swarm.swarm.backends.local.catalogue import LOCAL_MODELS

    known = LOCAL_MODELS.get(name)
    if known is not None:
        return known.sha256
    path = Path(name)
    return file_sha256(path) if path.suffix == ".gguf" and path.is_file() else None


def _typed(ctx: typer.Context, param: str) -> bool:
    """Whether the command's ``param`` was typed on the command line (not its default)."""
    source = ctx.get_parameter_source(param)
    return source is not None and source.name == "COMMANDLINE"


def _sampling(settings: Settings, base: SwarmConfig, model: str | None) -> dict[str, SamplingParams]:
    """Both roles' sampling overrides (:meth:`Settings.sampling`): a model starts ``greedy`` (the eval seed
    as the sampling seed, the family's token cap: 384 for a small model's orchestrator, 256 for its
    sub-agents) where the config file sets no sampling; a scripted policy keeps the config's (no model
    samples, but the sampling keys the sub-agent replay cache), and without sampling flags the workload's
    own. ``--temperature``/``--max-tokens`` go on top, and ``--seed`` where it was typed."""
    if settings.backend.scripted and all(v is None for v in settings.sampling_flags.values()):
        return {}
    return settings.sampling(base, model)


def _gold_resolver(wl: Workload, latency: float, cache_dir: str | None) -> BackendResolver:
    """The workload's gold policy per task; with ``cache_dir``, its sub-agents behind the replay cache
    (keyed by the workload and, in the namespace, the task: each task's gold worker knows its own answers)."""
    cache = ReplayCache(cache_dir) if cache_dir is not None else None

    def gold(task: Task, mode: Mode) -> BackendPair:
        policy = wl.gold_policy(task, mode, latency_s=latency)
        if cache is None:
            return policy.orchestrator, policy.subagent
        sub = CachedBackend(policy.subagent, cache, model_id=f"gold:{wl.name}", namespace=task.id)
        return policy.orchestrator, sub

    return gold


def backend_resolver(settings: Settings, workload: str, *, latency: float = 0.0) -> BackendResolver:
    """The backends of each episode: ``gold``/``scripted`` build the workload's gold policy per task
    (``latency`` seconds per call); any other name builds one backend pair (like ``swarm run``) that
    every episode shares."""
    wl = get_workload(workload)
    if settings.backend.scripted:
        return _gold_resolver(wl, latency, settings.extras.get("backend", {}).get("subagent_cache"))
    orch, sub = settings.spec().build(progress=terminal_progress())

    def real(task: Task, mode: Mode) -> BackendPair:
        return orch, sub

    return real
