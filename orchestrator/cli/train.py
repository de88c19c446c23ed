"""``swarm train``: RL-train the orchestrator from a config file, and plot a run's curves.

``swarm train sft --config FILE`` is the warm start: it regenerates gold swarm transcripts of the
config's workloads through the current engine and fits the policy to them (:mod:`agent_swarm.orchestrator.rl.sft`);
``swarm train --config FILE`` then runs (or resumes) the RL loop of :mod:`agent_swarm.orchestrator.rl.trainer`
from the SFT result, with a progress bar; ``swarm train plot RUN`` writes PNG curves of
``RUN/metrics.jsonl`` into ``RUN/plots``. All need the ``rl`` extra (torch, transformers, peft,
matplotlib).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from pydantic import BaseModel, ConfigDict
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:
    from agent_swarm.orchestrator.rl.config import TrainConfig

from agent_swarm.orchestrator.cli.discovery import resolve_config
from agent_swarm.orchestrator.cli.options import SubagentCacheOptions
from agent_swarm.orchestrator.cli.settings import command_options
from agent_swarm.swarm.errors import UserError

__all__ = ["TrainOptions", "TrainSettings", "train_app", "training_config"]

train_app = typer.Typer(
    name="train",
    help="Train the orchestrator with PARL (K2.5 loss, Toggle, annealed λs); `sft` warm-starts it on gold "
    "transcripts; `plot RUN` draws a run's curves.\n\n"
    "Examples (the two-step smoke test of the packaged 0.5B model, then its curves):\n\n"
    "\b\n"
    "  cd experiments\n"
    "  swarm train sft -c orchestrator_05b_smoke.toml\n"
    "  swarm train -c orchestrator_05b_smoke.toml\n"
    "  swarm train plot runs/orchestrator-05b-smoke",
    invoke_without_command=True,
)
_err = Console(stderr=True)


def _fail(message: str) -> typer.Exit:
    _err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


def training_config(given: Path | None) -> Path:
    """The training config: ``-c FILE``, else the one :func:`resolve_config` finds (``./swarm.toml``,
    then the user config directory's). A missing or YAML config is a :class:`UserError`, said before
    torch is imported (seconds)."""
    path = resolve_config(given)
    if path is None:
        raise UserError("give --config FILE to train (or put swarm.toml here), or `swarm train plot RUN` to plot a run")
    if not path.is_file():
        raise UserError(f"training config {path} does not exist")
    if path.suffix.lower() in (".yaml", ".yml"):
        raise UserError(f"training config {path} is YAML; swarm train reads TOML (.toml) or JSON (.json)")
    return path


@dataclass(frozen=True, slots=True)
class TrainSettings:
    """What ``swarm train`` resolved from its options once: the training config file (found as every
    command finds its config) and the sub-agent cache flags
    (:meth:`~agent_swarm.orchestrator.cli.options.SubagentCacheOptions.cache_choice`, as ``eval`` and
    ``rollout`` read them)."""

    config_file: Path
    subagent_cache: Path | Literal["off"] | None


class _TrainChoice(BaseModel):
    """``swarm train``'s own options: the training config and what of it to override."""

    model_config = ConfigDict(frozen=True)

    config: Annotated[Path | None, typer.Option("--config", "-c", help="training config (TOML or JSON)")] = None
    steps: Annotated[int | None, typer.Option(help="override the config's total steps")] = None
    run_dir: Annotated[Path | None, typer.Option(help="override the config's run directory")] = None
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True


class TrainOptions(SubagentCacheOptions, _TrainChoice):
    """``swarm train``'s options as parsed: one field per option, in ``--help`` order (its own, then the
    sub-agent cache's)."""

    def settings(self) -> TrainSettings:
        """The config file and the cache flags, resolved once (:class:`UserError` for bad input)."""
        return TrainSettings(training_config(self.config), self.cache_choice())


def _need_rl() -> None:
    try:
        import matplotlib  # noqa: F401
        import peft  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise _fail(
            f"`swarm train` needs the rl extra: pip install 'agent-swarm[rl]' ({exc.name} is missing)"
        ) from None


@train_app.callback()
@command_options(TrainOptions)
def train(ctx: typer.Context, **given: Any) -> None:
    """Run or resume training from --config FILE (see orchestrator/rl/config.py for the fields).

    Examples:

    \b
      swarm train sft -c orchestrator_05b_smoke.toml   # step 1: SFT warm start
      swarm train -c orchestrator_05b_smoke.toml       # step 2: PARL
      swarm train plot runs/orchestrator-05b-smoke
    """
    if ctx.invoked_subcommand is not None:
        return
    options = TrainOptions(**given)
    try:
        settings = options.settings()
    except UserError as exc:
        raise _fail(str(exc)) from None
    _need_rl()
    try:
        run_dir = _train(settings, options)
    except UserError as exc:
        raise _fail(str(exc)) from None
    _err.print(escape(f"metrics: {run_dir / 'metrics.jsonl'}; checkpoints: {run_dir / 'checkpoints'}"))


def _train(settings: TrainSettings, options: TrainOptions) -> Path:
    """Run or resume the training :class:`TrainSettings` names, with a progress bar; its run directory."""
    from agent_swarm.orchestrator.rl.config import load_train_config
    from agent_swarm.orchestrator.rl.metrics import StepMetrics
    from agent_swarm.orchestrator.rl.trainer import Trainer

    run_dir = str(options.run_dir.resolve()) if options.run_dir else None
    cfg = load_train_config(settings.config_file, steps=options.steps, run_dir=run_dir)
    cfg = _with_cache_flags(cfg, settings.subagent_cache)
    with _progress("train", options.progress) as bar:
        task = bar.add_task("train", total=cfg.steps, info="")

        def on_step(m: StepMetrics) -> None:
            info = (
                f"reward {m.reward:.3f} r_perf {m.r_perf:.3f} λ1 {m.lambda1:.3f} "
                f"crit {m.mean_critical_steps:.2f} width {m.mean_parallel_width:.2f}"
            )
            if m.subagent_cache:
                info += f" cache {m.subagent_cache.get('hits', 0)} hits {m.subagent_cache.get('misses', 0)} misses"
            bar.update(task, completed=m.step + 1, info=info)

        trainer = Trainer.from_config(cfg, config_dir=settings.config_file.parent, on_step=on_step)
        try:
            done = trainer.resume()
            bar.update(task, completed=done, info=f"resumed at step {done}" if done else "")
            trainer.run()
        finally:
            trainer.close()
    return cfg.run_dir


def _with_cache_flags(cfg: TrainConfig, choice: Path | Literal["off"] | None) -> TrainConfig:
    """``cfg`` with ``subagent_cache`` set by ``--subagent-cache DIR`` or cleared by ``--no-subagent-cache``."""
    if choice == "off":
        return cfg.model_copy(update={"subagent_cache": None})
    if choice is None:
        return cfg
    return cfg.model_copy(update={"subagent_cache": choice.resolve()})


def _progress(label: str, enabled: bool) -> Progress:
    """The bar of a training stage on stderr: steps done of all, the latest metrics, elapsed time."""
    return Progress(
        TextColumn(f"[bold]{label}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        console=_err,
        disable=not enabled,
    )


@train_app.command("sft")
def sft(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="training config (TOML or JSON) [default: ./swarm.toml]")
    ] = None,
    steps: Annotated[int | None, typer.Option(help="override the config's SFT steps")] = None,
    run_dir: Annotated[Path | None, typer.Option(help="override the config's run directory")] = None,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
) -> None:
    """SFT warm start: gold transcripts of the config's workloads (train split), regenerated through the
    current engine and rendered as the policy's exact tokens, then masked NLL on the orchestrator's tokens.

    Writes RUN/sft/policy (and resumes RUN/sft/checkpoint after an interruption); `swarm train` starts from it.

    Examples:

    \b
      swarm train sft -c experiments/orchestrator_05b_smoke.toml --steps 2
    """
    try:
        config = training_config(config)
    except UserError as exc:
        raise _fail(str(exc)) from None
    _need_rl()
    from agent_swarm.orchestrator.rl.config import load_train_config
    from agent_swarm.orchestrator.rl.sft import run_sft

    try:
        cfg = load_train_config(config, run_dir=str(run_dir.resolve()) if run_dir else None)
        if steps is not None:
            cfg = cfg.model_copy(update={"sft": cfg.sft.model_copy(update={"steps": steps})})
        with _progress("sft", progress) as bar:
            task = bar.add_task("sft", total=cfg.sft.steps, info="generating gold transcripts")

            def on_step(step: int, loss: float) -> None:
                bar.update(task, completed=step + 1, info=f"loss {loss:.4f}")

            summary = run_sft(cfg, on_step=on_step)
    except UserError as exc:
        raise _fail(str(exc)) from None
    _err.print(
        f"SFT: {summary['examples']} gold examples ({summary['trained_tokens']} trained tokens), "
        f"{summary['steps_run']} steps, final loss {summary.get('final_loss', float('nan')):.4f}; "
        f"policy: {cfg.run_dir / 'sft' / 'policy'}"
    )


@train_app.command("plot")
def plot(
    run: Annotated[Path, typer.Argument(help="a `swarm train` run directory (holds metrics.jsonl)")],
    out: Annotated[Path | None, typer.Option(help="output directory (default RUN/plots)")] = None,
    window: Annotated[int, typer.Option(min=1, help="moving-average window in steps")] = 3,
) -> None:
    """Write PNG curves (reward and components, λs, critical steps, width, loss, ...) of a run.

    Examples:

    \b
      swarm train plot runs/r1
      swarm train plot runs/r1 --out plots --window 5
    """
    _need_rl()
    from agent_swarm.orchestrator.rl.plots import plot_run

    try:
        paths = plot_run(run, out, window=window)
    except UserError as exc:
        raise _fail(str(exc)) from None
    for p in paths:
        typer.echo(str(p))
