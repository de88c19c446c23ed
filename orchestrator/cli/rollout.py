"""``swarm rollout``: K episodes per task with PARL rewards, group advantages and trajectories.

Registered on the main app in :mod:`agent_swarm.orchestrator.cli`. Tasks come from a task file (``--tasks``) or
from a workload (``--workload NAME``, with ``-n``/``--seed``/``--split``/``--knob`` as in ``swarm
eval``): then every episode gets its task's fresh environment, tools, agents and budgets, and its
``r_perf`` is the workload's score (``--backend gold`` plays the workload's gold policy). Exit codes:
0 every group complete, 1 some episodes crashed or failed from infrastructure (a model server down,
erroring or timing out: what failed is printed on stderr; re-run the same command to run them
again), or no episode succeeded, 2 bad input, 130 interrupted (re-run to resume).
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from pydantic import BaseModel, ConfigDict, ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from agent_swarm.orchestrator.backend_factory import build_backends, with_subagent_cache
from agent_swarm.orchestrator.cli.eval import backend_resolver
from agent_swarm.orchestrator.cli.interrupt import run_until_stopped
from agent_swarm.orchestrator.cli.options import (
    BackendChoiceOptions,
    EpisodeLimitOptions,
    KnobOpt,
    LatencyOpt,
    SubagentCacheOptions,
    warn_cache_bypass,
)
from agent_swarm.orchestrator.cli.plan import workload_knobs
from agent_swarm.orchestrator.cli.preflight import writable_dir
from agent_swarm.orchestrator.cli.progress import terminal_progress
from agent_swarm.orchestrator.cli.settings import Settings, command_options
from agent_swarm.orchestrator.environment import environment
from agent_swarm.orchestrator.eval import workload_orchestrator_factory
from agent_swarm.orchestrator.rollout.collection import TRAJECTORIES, RolloutProgress, RolloutSummary, collect_rollouts
from agent_swarm.orchestrator.rollout.config import RolloutConfig
from agent_swarm.orchestrator.rollout.episodes import EpisodeFactory, orchestrator_factory
from agent_swarm.orchestrator.rollout.executors import RolloutExecutor
from agent_swarm.orchestrator.tasks import large_task_warning, load_task_file
from agent_swarm.swarm.backend import ModelBackend
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import LargeInputWarning, UserError, validation_problems
from agent_swarm.swarm.records import Task
from agent_swarm.swarm.rl.rewards import ParallelReward, PARLReward, RewardConfig, Schedule
from agent_swarm.workloads import MODES, Mode, get_workload

__all__ = ["rollout"]

err = Console(stderr=True)


def _backends(kind: str, **options: Any) -> tuple[ModelBackend, ModelBackend | None]:
    # One backend resolver for every subcommand: the one `swarm run` uses.
    return build_backends(kind, progress=terminal_progress(), **options)


def _reward_config(extras: dict[str, Any], overrides: dict[str, Any]) -> RewardConfig:
    data = dict(extras.get("reward", {}))
    kind, steps = overrides.get("schedule"), overrides.get("lambda_steps")
    for name in ("lambda1", "lambda2"):
        start = overrides.get(name)
        if kind is None and start is None and steps is None:
            continue
        old = data.get(name) or RewardConfig().model_dump()[name]
        spec = {k: v for k, v in old.items() if k in ("start", "steps")}
        spec.update({k: v for k, v in (("start", start), ("steps", steps)) if v is not None})
        try:
            data[name] = Schedule(kind=kind or old.get("kind", "linear"), **spec).model_dump()
        except ValidationError as exc:
            raise UserError(f"invalid {name} schedule: {exc.errors()[0]['msg']}") from None
    if overrides.get("parallel_form") or overrides.get("parallel_target"):
        base = ParallelReward.model_validate(data.get("parallel", {}))
        data["parallel"] = base.model_copy(
            update={
                k: v
                for k, v in (("form", overrides.get("parallel_form")), ("target", overrides.get("parallel_target")))
                if v is not None
            }
        ).model_dump()
    try:
        return RewardConfig.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"invalid reward config: {validation_problems(exc, 'reward', prefix='reward.')}") from None


def _summary_table(s: RolloutSummary, out: Path) -> Table:
    t = Table(title=Text(f"rollout → {out}"), show_header=False, title_justify="left")
    t.add_row("tasks × K", f"{s.tasks} × {s.group_size}  ({s.groups_complete} groups complete)")
    t.add_row("episodes", f"{s.episodes} ({s.episodes_run} run now, {s.episodes_resumed} resumed)")
    t.add_row("trajectories", str(s.trajectories))
    t.add_row("mean reward", f"{s.mean_reward:.4f}")
    t.add_row(
        "  r_perf / r_parallel / r_finish", f"{s.mean_r_perf:.4f} / {s.mean_r_parallel:.4f} / {s.mean_r_finish:.4f}"
    )
    t.add_row("critical / total steps", f"{s.mean_critical_steps:.2f} / {s.mean_total_steps:.2f}")
    t.add_row("parallel width", f"{s.mean_parallel_width:.2f}")
    t.add_row("sub-agent finish rate", f"{s.finish_rate:.3f}")
    if s.subagent_cache:
        c = s.subagent_cache
        t.add_row(
            "sub-agent cache", f"{c.get('hits', 0)} hits, {c.get('misses', 0)} misses, {c.get('bypassed', 0)} bypassed"
        )
    t.add_row("statuses", ", ".join(f"{k} {v}" for k, v in sorted(s.statuses.items())) or "-")
    t.add_row(
        "failures",
        f"{s.crashed_episodes} crashed, {s.trajectory_failures} not trainable, {s.reward_errors} reward errors",
    )
    if s.skipped_lines:
        lines = [str(p.line) for p in s.skipped_lines]
        where = f"line{'s' if len(lines) > 1 else ''} {', '.join(lines[:20])}" + (" …" if len(lines) > 20 else "")
        t.add_row("skipped task lines", f"{len(lines)} ({where} of the task file)")
    return t


def _workload_tasks(
    name: str,
    *,
    task_file: Path | None,
    n: int | None,
    seed: int,
    split: str | None,
    knobs: dict[str, Any],
    mode: Mode,
    on_malformed: Literal["skip", "fail"],
) -> tuple[list[Task], list[Any]]:
    """The workload's tasks: generated (``-n``, ``--seed``, ``--split``, knobs) or read from a task file
    written by ``swarm eval`` (each line must be one of this workload's tasks)."""
    wl = get_workload(name)
    if task_file is None:
        return wl.tasks(10 if n is None else n, seed=seed, split=split or "train", **knobs), []
    if n is not None or split is not None or knobs:
        raise UserError("-n, --split and --knob generate workload tasks; leave them out with --tasks FILE")
    task_list, problems = load_task_file(task_file, on_malformed=on_malformed, workload=name)
    for t in task_list:
        wl.episode(t, mode)  # a malformed workload task is bad input, before anything runs
    return task_list, problems


def demo_tasks(tasks: list[Task]) -> list[Task]:
    """The tasks a scripted rollout plays: each must be one of the built-in demo tasks, named by its
    prompt (``"capitals"``), its full demo prompt, or ``metadata.demo``; a name becomes the demo's prompt.
    Anything else is refused, as ``swarm run -b scripted`` refuses it: the script answers its own
    tasks, not yours."""
    from agent_swarm.orchestrator.demo import DEMO_TASKS

    by_prompt = {t.prompt: name for name, t in DEMO_TASKS.items()}
    out: list[Task] = []
    for t in tasks:
        named = t.metadata.get("demo")
        name = named if isinstance(named, str) else by_prompt.get(t.prompt) or t.prompt.strip()
        if not isinstance(name, str) or name not in DEMO_TASKS:
            shown = t.prompt if len(t.prompt) <= 60 else t.prompt[:59] + "…"
            raise UserError(
                f"the scripted backend only plays the built-in demo tasks ({', '.join(sorted(DEMO_TASKS))}); "
                f"task {t.id!r} ({shown!r}) is not one. Write a demo's name as the prompt (or metadata.demo), "
                "or use a model backend for your own tasks"
            )
        demo_prompt = DEMO_TASKS[name].prompt
        keep = t.prompt == demo_prompt or isinstance(named, str)  # metadata.demo keeps the prompt as written
        out.append(t if keep else t.model_copy(update={"prompt": demo_prompt}))
    return out


def _demo_factory(latency: float, subagent_cache: str | None = None) -> EpisodeFactory:
    from agent_swarm.orchestrator.demo import demo

    d = demo("capitals", latency_s=latency)
    sub: ModelBackend = d.subagent_backend
    if subagent_cache is not None:  # the demo's scripted workers stand in for frozen sub-agents
        sub = with_subagent_cache(d.orchestrator_backend, sub, directory=subagent_cache, model_id="scripted:capitals")
    return orchestrator_factory(d.orchestrator_backend, subagent_backend=sub, tools=d.tools)


def _backend_factory(kind: str, **options: Any) -> EpisodeFactory:
    orch, sub = _backends(kind=kind, **options)
    return orchestrator_factory(orch, subagent_backend=sub)


def _workload_factory(settings: Settings, workload: str, latency: float, mode: Mode) -> EpisodeFactory:
    # The workload's budgets win over the config file's; the flags win over both.
    resolver = backend_resolver(settings, workload, latency=latency)
    return workload_orchestrator_factory(resolver, mode=mode, overrides=settings.overrides)


def _factory_and_executor(
    build: Callable[..., EpisodeFactory], build_args: dict[str, Any], ray: str | None, ray_actors: int | None
) -> tuple[EpisodeFactory, RolloutExecutor | None]:
    """(orchestrator factory, executor): in this process, or on Ray actors (``None``: in-process)."""
    if ray is None:
        return build(**build_args), None
    # Each Ray actor builds its own backends (clients, engines) from the same options.
    from agent_swarm.orchestrator.cluster import RayExecutor, remote_factory

    return remote_factory(build, **build_args), RayExecutor(None if ray == "local" else ray, actors=ray_actors)


def _read_tasks(o: RolloutOptions) -> tuple[list[Task], list[Any]]:
    """The run's tasks: from ``--tasks`` alone, or a workload's (generated, or its task file), with each
    skipped task-file line said on stderr."""
    if o.on_malformed not in ("skip", "fail"):
        raise UserError(f"--on-malformed must be 'skip' or 'fail', got {o.on_malformed!r}")
    malformed: Literal["skip", "fail"] = "fail" if o.on_malformed == "fail" else "skip"
    if o.workload is None:
        if o.n is not None or o.split is not None or o.knob or o.mode != "swarm":
            raise UserError("-n, --split, --knob and --mode choose workload tasks; give --workload NAME")
        if o.tasks is None:
            raise UserError("give --tasks FILE or --workload NAME")
        if o.backend == "gold":
            raise UserError(
                "--backend gold plays a workload's gold policy; give --workload NAME "
                "(or -b scripted for the built-in demo tasks)"
            )
        task_list, problems = load_task_file(o.tasks, on_malformed=malformed)
    elif o.mode not in MODES:
        raise UserError(f"--mode must be swarm or single for a workload rollout; got {o.mode!r}")
    else:
        task_list, problems = _workload_tasks(
            o.workload,
            task_file=o.tasks,
            n=o.n,
            seed=o.seed,
            split=o.split,
            knobs=workload_knobs(o.workload, o.knob or []),
            mode="single" if o.mode == "single" else "swarm",
            on_malformed=malformed,
        )
    for p in problems:
        err.print(f"[yellow]skipped[/yellow] {escape(p.path)}:{p.line}: {escape(p.error)}", soft_wrap=True)
    return task_list, problems


class _RolloutTasks(BaseModel):
    """``swarm rollout``'s first options: the output, tasks, groups and reward."""

    model_config = ConfigDict(frozen=True)

    out: Annotated[Path, typer.Option("--out", "-o", help="output directory (re-run into it to resume)")]
    tasks: Annotated[
        Path | None,
        typer.Option(
            "--tasks",
            "-t",
            help="task file: .jsonl ({id, prompt, verifier, verifier_args} a line), .json or text; - reads stdin "
            "(with --workload: swarm eval's tasks.jsonl)",
        ),
    ] = None
    workload: Annotated[
        str | None,
        typer.Option("--workload", "-w", metavar="NAME", help="roll out a workload's tasks (see swarm eval --list)"),
    ] = None
    n: Annotated[
        int | None,
        typer.Option("-n", "--num-tasks", metavar="N", min=1, help="workload: number of tasks [default: 10]"),
    ] = None
    split: Annotated[
        str | None,
        typer.Option(
            "--split", metavar="SPLIT", help="workload: train, dev (tuning) or test (held out) [default: train]"
        ),
    ] = None
    knob: KnobOpt = None
    mode: Annotated[
        str, typer.Option("--mode", metavar="MODE", help="workload: swarm, or single (no sub-agent actions)")
    ] = "swarm"
    group_size: Annotated[int, typer.Option("--group-size", "-k", metavar="K", min=1, help="episodes per task (K)")] = 4
    max_concurrent: Annotated[
        int, typer.Option("--concurrent-episodes", metavar="N", min=1, help="episodes running at once over all tasks")
    ] = 8
    seed: Annotated[
        int,
        typer.Option(
            "--seed", help="run seed (per-sample sampling seeds derive from it); workload task-generation seed"
        ),
    ] = 0
    normalize: Annotated[bool, typer.Option("--normalize/--no-normalize", help="divide advantages by group std")] = (
        False
    )
    on_malformed: Annotated[
        str, typer.Option("--on-malformed", metavar="ACTION", help="skip: report bad task lines and go on; fail: stop")
    ] = "skip"
    step: Annotated[
        int, typer.Option("--step", metavar="STEP", min=0, help="trainer step at which λ schedules are read")
    ] = 0
    schedule: Annotated[
        str | None,
        typer.Option("--schedule", metavar="SCHEDULE", help="λ schedule: constant, linear, cosine or exponential"),
    ] = None
    lambda1: Annotated[
        float | None, typer.Option("--lambda1", metavar="X", min=0.0, help="λ1 at step 0 (r_parallel)")
    ] = None
    lambda2: Annotated[
        float | None, typer.Option("--lambda2", metavar="X", min=0.0, help="λ2 at step 0 (r_finish)")
    ] = None
    lambda_steps: Annotated[
        int | None, typer.Option("--lambda-steps", metavar="N", min=1, help="steps to anneal λ to 0")
    ] = None
    parallel_form: Annotated[
        str | None,
        typer.Option(
            "--parallel-form",
            metavar="FORM",
            help="r_parallel: coverage (default), parts, count, width or any (docs/rewards.md)",
        ),
    ] = None
    parallel_target: Annotated[int | None, typer.Option("--parallel-target", metavar="N", min=1)] = None


class _RolloutChoice(BackendChoiceOptions, _RolloutTasks):
    """``swarm rollout``'s options up to ``--config``: :class:`_RolloutTasks`', the backends, the rubric
    judge and the config file."""

    judge_model: Annotated[
        str | None,
        typer.Option("--judge-model", metavar="MODEL", help="model for rubric verifiers (same backend kind)"),
    ] = None
    config_file: Annotated[
        Path | None, typer.Option("--config", "-c", help="TOML/JSON: [swarm], [backend] and [reward] tables")
    ] = None


class _RolloutRun(EpisodeLimitOptions, _RolloutChoice):
    """``swarm rollout``'s options up to ``--ray-actors``: :class:`_RolloutChoice`'s, the episode limits, then
    sampling, output and where the episodes run."""

    temperature: Annotated[
        float | None, typer.Option("--temperature", metavar="T", min=0.0, help="model backends: sampling temperature")
    ] = None
    max_tokens: Annotated[
        int | None, typer.Option("--max-tokens", metavar="N", min=1, help="model backends: tokens per turn")
    ] = None
    latency: LatencyOpt = 0.0
    parquet: Annotated[bool, typer.Option("--parquet", help="also write OUT/trajectories.parquet")] = False
    json_out: Annotated[bool, typer.Option("--json", help="print the summary as JSON on stdout")] = False
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="[ADDRESS]",
            help="run the episodes on Ray actors: alone or 'local' starts a local Ray for the run; 'auto' joins "
            "the running cluster (or starts one); else a cluster address (host:port, ray://host:10001). "
            "Needs the ray extra",
        ),
    ] = None
    ray_actors: Annotated[
        int | None,
        typer.Option(
            "--ray-actors",
            metavar="N",
            min=1,
            help="episode actors, one event loop each (default: one per cluster CPU)",
        ),
    ] = None


class RolloutOptions(SubagentCacheOptions, _RolloutRun):
    """``swarm rollout``'s options as parsed: one field per option, in ``--help`` order (:class:`_RolloutRun`'s,
    the sub-agent cache's, then this one)."""

    keep_infra_failures: Annotated[
        bool,
        typer.Option(
            "--keep-infra-failures",
            help="record episodes that failed because a model server did as finished (default: they go "
            "to failures.jsonl and run again when the same command is re-run)",
        ),
    ] = False

    def settings(self) -> Settings:
        """The config file, flags and environment resolved once; ``--seed`` is the run seed (each sample's
        sampling seed derives from it), not a sampling flag."""
        return Settings.resolve(self, "rollout", quiet=self.quiet or self.json_out, cache=self)


@command_options(RolloutOptions)
def rollout(**given: Any) -> None:
    """Collect rollouts: K episodes per task, PARL rewards, group advantages, trajectories (resumable).

    Re-running the same command into the same --out resumes; a different group size, seed,
    workload or reward configuration is refused instead of mixing episodes.

    Examples:

    \b
      swarm rollout -w wide-lookup -b scripted -n 4 -k 4 -o runs/r1
      swarm rollout -t tasks.jsonl -k 8 -o runs/r2 --lambda1 0.3 --json
      swarm rollout -t tasks.jsonl -k 8 -o runs/r3 --concurrent-episodes 64 --ray
    """
    o = RolloutOptions(**given)
    try:
        job = _resolve(o)
        writable_dir(o.out, "--out")
    except UserError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None
    summary = _collect(job, out=o.out, quiet=o.quiet)
    raise typer.Exit(_finish(summary, o.out, parquet=o.parquet, json_out=o.json_out, kept=o.keep_infra_failures))


@dataclass(frozen=True, slots=True)
class _RolloutJob:
    """What ``swarm rollout`` collects: the tasks, the episode factory and where it runs, the run's
    config, the episodes' config, the reward, and the task-file lines skipped."""

    tasks: list[Task]
    factory: EpisodeFactory
    executor: RolloutExecutor | None
    config: RolloutConfig
    swarm_config: SwarmConfig
    reward: PARLReward
    problems: list[Any]


def _resolve(o: RolloutOptions) -> _RolloutJob:
    """The rollout the options ask for, with its :class:`Settings` resolved once."""
    task_list, problems = _read_tasks(o)
    settings = o.settings()
    reward_cfg = _reward_config(
        settings.extras,
        {
            "schedule": o.schedule,
            "lambda1": o.lambda1,
            "lambda2": o.lambda2,
            "lambda_steps": o.lambda_steps,
            "parallel_form": o.parallel_form,
            "parallel_target": o.parallel_target,
        },
    )
    source = _episode_source(task_list, settings, o)
    warn_cache_bypass(err, settings.extras, source.swarm_config.subagent_sampling)
    factory, executor = _factory_and_executor(source.build, source.build_args, o.ray, o.ray_actors)
    reward = PARLReward(reward_cfg, step=o.step, judge=source.judge)
    cfg = _run_config(source, reward_cfg, o)
    return _RolloutJob(source.tasks, factory, executor, cfg, source.swarm_config, reward, problems)


def _run_config(source: _Source, reward: RewardConfig, o: RolloutOptions) -> RolloutConfig:
    # A resume must score its episodes as the first run did: the reward settings are part of the run.
    settings = {**source.settings, "reward": {**reward.model_dump(mode="json"), "step": o.step}}
    return RolloutConfig(
        group_size=o.group_size,
        max_concurrent_episodes=o.max_concurrent,
        seed=o.seed,
        advantage="group_normalized" if o.normalize else "group_mean",
        settings=settings,
        retry_infrastructure_failures=not o.keep_infra_failures,
    )


@dataclass(frozen=True, slots=True)
class _Source:
    """What the episodes run with: the factory's builder and arguments, their config, the rubric judge,
    the settings a resume must match, and the tasks (a scripted run's named as the demo's)."""

    build: Callable[..., EpisodeFactory]
    build_args: dict[str, Any]
    swarm_config: SwarmConfig
    judge: ModelBackend | None
    settings: dict[str, Any]
    tasks: list[Task]


def _episode_source(task_list: list[Task], settings: Settings, o: RolloutOptions) -> _Source:
    """A workload's per-task episodes, the scripted demo, or one model backend pair for every task."""
    if o.workload is not None:
        mode: Mode = "single" if o.mode == "single" else "swarm"
        args = {"settings": settings, "workload": o.workload, "latency": o.latency, "mode": mode}
        given = {k: v for k, v in settings.overrides.items() if v is not None}
        resume = {"workload": o.workload, "mode": mode, "backend": o.backend, "tasks": [t.id for t in task_list]}
        cfg = settings.with_sampling(settings.base or SwarmConfig())
        return _Source(_workload_factory, args, cfg, None, {**resume, "overrides": given}, task_list)
    if settings.backend.kind == "scripted":
        from agent_swarm.orchestrator.demo import demo

        demo_latency = environment().demo_latency_s(0.0)
        cache_dir = settings.extras.get("backend", {}).get("subagent_cache")
        cfg = settings.with_sampling(settings.config(settings.base or demo("capitals", latency_s=demo_latency).config))
        args = {"latency": demo_latency, "subagent_cache": cache_dir}
        return _Source(_demo_factory, args, cfg, None, {}, demo_tasks(task_list))
    spec = settings.spec()
    cfg = settings.with_sampling(settings.config())
    judge = _backends(kind=spec.kind, model=o.judge_model, base_url=o.base_url)[0] if o.judge_model else None
    return _Source(_backend_factory, spec.arguments(), cfg, judge, {}, task_list)


def _collect(job: _RolloutJob, *, out: Path, quiet: bool) -> RolloutSummary:
    """Collect the rollouts with a progress bar; Ctrl-C or SIGTERM is exit 130 (a re-run resumes)."""
    progress = Progress(
        TextColumn("[bold]rollout"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[failed]} crashed"),
        TimeElapsedColumn(),
        console=err,
        disable=quiet,
        transient=False,
    )
    bar = progress.add_task("episodes", total=None, failed=0)

    def on_progress(p: RolloutProgress) -> None:
        progress.update(bar, completed=p.done, total=p.total, failed=p.failed)

    async def main() -> RolloutSummary:
        return await collect_rollouts(
            job.tasks,
            job.factory,
            out_dir=out,
            config=job.config,
            swarm_config=job.swarm_config,
            reward=job.reward,
            progress=on_progress,
            skipped_lines=job.problems,
            executor=job.executor,
        )

    for note in filter(None, map(large_task_warning, job.tasks)):
        err.print(f"[yellow]warning:[/yellow] {escape(note)}", soft_wrap=True)
    try:
        with progress, warnings.catch_warnings():
            warnings.simplefilter("ignore", LargeInputWarning)  # said above, once per task
            # SIGTERM (a scheduler's stop, `timeout`) ends the run like Ctrl-C: finished episodes and the
            # summary are on disk, and a re-run resumes.
            return run_until_stopped(main)
    except KeyboardInterrupt:
        err.print(
            f"[yellow]interrupted[/yellow]; finished episodes are in {escape(str(out))}; "
            "re-run the same command to resume",
            soft_wrap=True,
        )
        raise typer.Exit(130) from None
    except UserError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None


def _finish(summary: RolloutSummary, out: Path, *, parquet: bool, json_out: bool, kept: bool) -> int:
    """The parquet file if asked, the summary (table or JSON), what failed; the exit code."""
    if parquet:
        from agent_swarm.swarm.rl.export import read_trajectories, write_parquet

        try:
            write_parquet(read_trajectories(out / TRAJECTORIES), out / "trajectories.parquet")
        except UserError as exc:
            err.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
            return 2
    if json_out:
        sys.stdout.write(json.dumps(summary.model_dump(mode="json")) + "\n")
    else:
        Console().print(_summary_table(summary, out))
    _report_failures(summary, out, kept=kept)
    nothing_succeeded = summary.episodes_run > 0 and summary.infrastructure_failures >= summary.episodes_run
    return 1 if summary.crashed_episodes or summary.groups_incomplete or nothing_succeeded else 0


def _report_failures(s: RolloutSummary, out: Path, *, kept: bool) -> None:
    """What failed in this run, on stderr (the summary table or JSON goes to stdout)."""
    failed = s.crashed_episodes + s.infrastructure_failures
    if not failed:
        return
    attempted = s.episodes_run + (0 if kept else s.infrastructure_failures) + s.crashed_episodes
    what = []
    if s.infrastructure_failures:
        what.append(f"{s.infrastructure_failures} failed because a model server did")
    if s.crashed_episodes:
        what.append(f"{s.crashed_episodes} crashed")
    err.print(f"[red]error:[/red] {failed} of {attempted} episodes: {escape(' and '.join(what))}", soft_wrap=True)
    for reason, count in sorted(s.failure_reasons.items(), key=lambda kv: -kv[1])[:5]:
        err.print(f"  {count} × {escape(reason)}", soft_wrap=True, highlight=False)
    where = escape(str(out / "failures.jsonl"))
    if kept and not s.crashed_episodes:
        err.print(f"they are recorded as finished episodes (--keep-infra-failures); details in {where}")
    else:
        err.print(f"details in {where}; fix the cause and re-run the same command to run them again", soft_wrap=True)
