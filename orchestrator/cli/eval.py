"""``swarm eval``: a workload's tasks in swarm and single-agent mode, side by side.

Registered on the main app in :mod:`orchestrator.cli`. ``--backend gold`` plays the workload's gold
scripted policy (no model); any other backend name is resolved like ``swarm run`` does. Exit codes:
0 done, 1 some episodes crashed, 2 bad input, 130 interrupted (finished episodes stay on disk).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from orchestrator.backend_factory import build_backends
from orchestrator.cli.options import (
    BackendOpt,
    BaseUrlOpt,
    EpisodeTimeoutOpt,
    MaxConcurrencyOpt,
    MaxCriticalStepsOpt,
    MaxSubagentStepsOpt,
    ModelOpt,
    SubagentBackendOpt,
    SubagentModelOpt,
    is_scripted,
)
from orchestrator.cli.progress import terminal_progress
from orchestrator.config import SwarmConfig
from orchestrator.eval import BackendPair, BackendResolver, EpisodeRow, EvalReport, run_eval, write_tasks
from orchestrator.prompts import profile_for
from orchestrator.tasks import load_config
from swarm.backend import SamplingParams
from swarm.errors import UserError
from swarm.records import Task
from workloads import MODES, Mode, get_workload, workload_names

__all__ = ["backend_resolver", "eval_command", "parse_knobs", "report_table"]

err = Console(stderr=True)
EVAL_TABLES = ("swarm", "backend")
"""Config tables swarm eval (and swarm run --workload) read: a workload's own verifier scores its episodes."""
DEFAULT_EVAL_ROOT = Path("traces") / "eval"

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
    ("finish_rate", "{:.3f}"),
)


def parse_knobs(items: list[str]) -> dict[str, Any]:
    """``["k=8", "categories=[\\"parallel\\"]"]`` → ``{"k": 8, "categories": ["parallel"]}`` (JSON values,
    else plain strings)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--knob takes NAME=VALUE, got {item!r}")
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
    return out


def report_table(report: EvalReport) -> Table:
    """The human table: one row per measure, one column per mode, and single/swarm."""
    modes = list(report.summaries)
    t = Table(
        title=Text(
            f"swarm eval · {report.workload} · {report.backend} · {len(report.rows) // max(1, len(modes))} "
            f"task(s) · run {report.run_id}"
        )
    )
    t.add_column("measure")
    for m in modes:
        t.add_column(m, justify="right")
    both = len(modes) == 2
    if both:
        t.add_column("single/swarm", justify="right")
    scripted = is_scripted(report.backend)
    for name, fmt in _FIELDS:
        label = report.metric_name if name == "metric" else name
        if name == "tokens" and scripted:  # a scripted policy's counts come from a stand-in tokenizer
            t.add_row(label, *(["not measured (scripted)"] * len(modes)), *(["—"] if both else []))
            continue
        cells = []
        for m in modes:
            v = getattr(report.summaries[m], name)
            cells.append("—" if v is None else fmt.format(v))
        if both:
            r = report.ratios.get(name)
            cells.append("—" if r is None else f"{r:.2f}×")
        t.add_row(label, *cells)
    errors = sum(s.errors for s in report.summaries.values())
    if errors:
        t.caption = f"{errors} episode(s) ended with an error; see rows.jsonl"
    return t


ADAPTER_OPTION = typer.Option(
    "--orchestrator-adapter",
    envvar="SWARM_ORCHESTRATOR_ADAPTER",
    help="local backend: the orchestrator's LoRA adapter: default (the shipped trained adapter where it is the "
    "default for the model), none (the base model), shipped, or a .gguf path; sub-agents run the base model",
)


def with_adapter(extras: dict[str, Any], choice: str | None) -> dict[str, Any]:
    """``extras`` with ``[backend] orchestrator_adapter`` set to ``choice`` (unchanged when ``None``)."""
    if choice is None:
        return extras
    return {**extras, "backend": {**extras.get("backend", {}), "orchestrator_adapter": choice}}


def eval_command(
    workload: Annotated[str, typer.Option("--workload", "-w", help="workload name (see --list)")] = "",
    mode: Annotated[str, typer.Option("--mode", help="swarm, single or both")] = "both",
    backend: BackendOpt = "local",
    n: Annotated[int, typer.Option("-n", "--num-tasks", min=1, help="number of tasks")] = 10,
    seed: Annotated[int, typer.Option("--seed", help="task-generation seed (and the sampling seed)")] = 0,
    split: Annotated[str, typer.Option("--split", help="train (development) or test (held out)")] = "train",
    knob: Annotated[list[str] | None, typer.Option("--knob", help="workload knob NAME=VALUE (repeatable)")] = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    subagent_backend: SubagentBackendOpt = None,
    subagent_model: SubagentModelOpt = None,
    config_file: Annotated[
        Path | None, typer.Option("--config", "-c", help="TOML/JSON config: [swarm] and [backend] tables")
    ] = None,
    max_critical_steps: MaxCriticalStepsOpt = None,
    max_subagent_steps: MaxSubagentStepsOpt = None,
    max_concurrency: MaxConcurrencyOpt = None,
    episode_timeout: EpisodeTimeoutOpt = None,
    temperature: Annotated[
        float | None,
        typer.Option("--temperature", min=0.0, help="model backends (0: greedy) [default: 0, or --config's]"),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-tokens", min=1, help="model backends: tokens per turn [default: as swarm run, or --config's]"
        ),
    ] = None,
    latency: Annotated[
        float, typer.Option("--latency", min=0.0, help="scripted: simulated seconds per model call")
    ] = 0.0,
    out: Annotated[Path, typer.Option("--out", "-o", help="results go to OUT/<run-id>/")] = DEFAULT_EVAL_ROOT,
    run_id: Annotated[str | None, typer.Option("--run-id", help="[default: a timestamp]")] = None,
    export_tasks: Annotated[Path | None, typer.Option("--export-tasks", help="write tasks as JSONL, exit")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the report as JSON on stdout")] = False,
    list_workloads: Annotated[bool, typer.Option("--list", help="list workloads and their knobs")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no line per finished episode on stderr")] = False,
    orchestrator_adapter: Annotated[str | None, ADAPTER_OPTION] = None,
) -> None:
    """Run a workload in swarm and single-agent mode on the same tasks and compare them.

    Examples:

    \b
      swarm eval --list
      swarm eval -w wide-lookup -b scripted -n 5    # gold policy, no model
      swarm eval -w tau2-batch -n 20 --mode swarm   # the packaged model
      swarm eval -w bfcl-parallel -n 3 --export-tasks tasks.jsonl
    """
    if list_workloads:
        for name in workload_names():
            wl = get_workload(name)
            known = ", ".join(f"{k}={f.default!r}" for k, f in wl.knobs_model.model_fields.items())
            typer.echo(f"{name}\t{wl.metric}\t{wl.description}\tknobs: {known or '(none)'}")
        raise typer.Exit(0)
    try:
        if not workload:
            raise UserError(f"--workload is required; known: {', '.join(workload_names())}")
        wl = get_workload(workload)
        modes: tuple[Mode, ...] = MODES if mode == "both" else (mode,)  # type: ignore[assignment]
        if mode != "both" and mode not in MODES:
            raise UserError(f"--mode must be swarm, single or both; got {mode!r}")
        knobs = parse_knobs(knob or [])
        tasks = wl.tasks(n, seed=seed, split=split, **knobs)
        if export_tasks is not None:
            write_tasks(tasks, export_tasks)
            err.print(f"wrote {len(tasks)} {escape(workload)} task(s) to {escape(str(export_tasks))}")
            raise typer.Exit(0)
        base, extras = (
            load_config(config_file, tables=EVAL_TABLES, command="swarm eval") if config_file else (SwarmConfig(), {})
        )
        backends = backend_resolver(
            wl_name=workload,
            backend=backend,
            latency=latency,
            model=model,
            base_url=base_url,
            subagent_backend=subagent_backend,
            subagent_model=subagent_model,
            extras=with_adapter(extras, orchestrator_adapter),
        )
        overrides: dict[str, Any] = {
            "max_critical_steps": max_critical_steps,
            "max_subagent_steps": max_subagent_steps,
            "max_concurrency": max_concurrency,
            "episode_timeout_s": episode_timeout,
        }
        if not is_scripted(backend):
            orch_model = backends(tasks[0], modes[0])[0].model if tasks else None
            overrides |= _model_sampling(base if config_file else None, orch_model, temperature, max_tokens, seed)
    except UserError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None

    def progress(row: EpisodeRow) -> None:
        if quiet:
            return
        err.print(
            f"  {escape(row.task_id)} {escape(f'[{row.mode}]')} {row.status}: {wl.metric}={row.metric:.3f} "
            f"critical={row.critical_steps} total={row.total_steps} {row.wall_time_s:.1f}s"
            + (f" [yellow]{escape(row.error)}[/yellow]" if row.error else ""),
            highlight=False,
        )

    async def main() -> EvalReport:
        return await run_eval(
            wl,
            tasks,
            backends,
            modes=modes,
            base_config=base,
            overrides=overrides,
            out_dir=out,
            run_id=run_id,
            backend_name=backend,
            split=split,
            seed=seed,
            knobs=knobs,
            on_row=progress,
        )

    try:
        report = anyio.run(main)
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/yellow]; finished episodes are under " + escape(str(out)))
        raise typer.Exit(130) from None
    except UserError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    if json_out:
        sys.stdout.write(report.model_dump_json() + "\n")
    else:
        Console().print(report_table(report))
        err.print(f"results: {escape(str(report.out_dir))}")
    raise typer.Exit(1 if any(r.status == "crashed" for r in report.rows) else 0)


def _model_sampling(
    base: SwarmConfig | None, model: str | None, temperature: float | None, max_tokens: int | None, seed: int
) -> dict[str, SamplingParams]:
    """Both roles' sampling for a model backend, with ``--temperature``/``--max-tokens`` on top: a role
    the config file sets samples as it says; any other is greedy (reproducible), with the eval seed as
    the sampling seed and the token cap ``swarm run`` gives the model's family
    (:func:`orchestrator.prompts.profile_for`, or the config's ``prompt_profile``: 384 for a small
    model's orchestrator, 256 for its sub-agents)."""
    change = {k: v for k, v in (("temperature", temperature), ("max_tokens", max_tokens)) if v is not None}
    override = base.prompt_profile if base is not None else None
    profile = profile_for(model, override) if model else None
    given = base.model_fields_set if base is not None else set()
    out = {}
    for name in ("orchestrator_sampling", "subagent_sampling"):
        if base is not None and name in given:
            start = getattr(base, name).model_dump()
        else:
            cap = getattr(profile, name).max_tokens if profile else None
            start = {"temperature": 0.0, "max_tokens": cap or 512, "seed": seed}
        out[name] = SamplingParams.model_validate({**start, **change})
    return out


def backend_resolver(
    *,
    wl_name: str,
    backend: str,
    latency: float,
    model: str | None,
    base_url: str | None,
    subagent_backend: str | None,
    subagent_model: str | None,
    extras: dict[str, Any],
) -> BackendResolver:
    """The backends of each episode: ``gold``/``scripted`` build the workload's gold policy per task;
    any other name builds one backend pair (like ``swarm run``) that every episode shares."""
    wl = get_workload(wl_name)
    if is_scripted(backend):

        def gold(task: Task, mode: Mode) -> BackendPair:
            policy = wl.gold_policy(task, mode, latency_s=latency)
            return policy.orchestrator, policy.subagent

        return gold
    opts = dict(extras.get("backend", {}))
    opts.setdefault("progress", terminal_progress())
    orch, sub = build_backends(
        kind=opts.pop("kind", None) or backend,
        model=model or opts.pop("model", None),
        base_url=base_url or opts.pop("base_url", None),
        subagent_kind=subagent_backend or opts.pop("subagent_backend", None),
        subagent_model=subagent_model or opts.pop("subagent_model", None),
        **opts,
    )

    def real(task: Task, mode: Mode) -> BackendPair:
        return orch, sub

    return real
