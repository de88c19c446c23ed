"""``swarm serve``: keep the local model loaded so the ``swarm run``s that follow skip the engine start.

The engine's model and settings are resolved as ``swarm run -b local`` resolves them (the config file's
``[backend]`` table and ``[swarm]`` width, the flags, the environment: :class:`~.settings.Settings`), so
a later ``swarm run`` with the same config attaches to it (:mod:`agent_swarm.swarm.backends.local.resident`).
"""

from __future__ import annotations

import signal
import threading
from typing import Annotated, Any, ClassVar

import typer
from pydantic import BaseModel, ConfigDict
from rich.console import Console
from rich.markup import escape

from agent_swarm.orchestrator.cli.options import ConfigOpt, ModelOpt
from agent_swarm.orchestrator.cli.settings import Settings, command_options
from agent_swarm.swarm.errors import SwarmError, UserError

__all__ = ["ServeOptions", "serve"]

err = Console(stderr=True)


class ServeOptions(BaseModel):
    """``swarm serve``'s options as parsed; the model options of ``swarm run`` it does not take are unset."""

    model_config = ConfigDict(frozen=True)

    model: ModelOpt = None
    config_file: ConfigOpt = None
    max_subagents: Annotated[
        int | None,
        typer.Option(
            "--max-subagents", metavar="N", min=1, help="as swarm run's (the engine's slots) [default: 16, or config's]"
        ),
    ] = None
    idle: Annotated[
        float, typer.Option("--idle", metavar="SECONDS", min=1, help="exit after this long with no run attached")
    ] = 600.0
    foreground: Annotated[bool, typer.Option("--foreground", help="serve in this process (Ctrl-C stops it)")] = False
    status: Annotated[bool, typer.Option("--status", help="say whether a resident engine runs, and which")] = False
    stop: Annotated[bool, typer.Option("--stop", help="stop the resident engine")] = False

    # What Settings.resolve reads of every model command: serve runs the local engine, and none of
    # the episode or sampling flags.
    backend: ClassVar[str] = "local"
    base_url: ClassVar[None] = None
    subagent_backend: ClassVar[None] = None
    subagent_model: ClassVar[None] = None
    max_critical_steps: ClassVar[None] = None
    budget: ClassVar[None] = None
    max_subagent_steps: ClassVar[None] = None
    max_concurrency: ClassVar[None] = None
    episode_timeout: ClassVar[None] = None
    temperature: ClassVar[None] = None
    max_tokens: ClassVar[None] = None

    def engine(self) -> Any:
        """The local engine ``swarm run -b local`` would start with these options (not started)."""
        settings = Settings.resolve(self, "run", quiet=True, max_subagents_per_stage=self.max_subagents)
        spec = settings.spec()
        if spec.kind != "local":
            raise UserError(f"swarm serve runs the local engine; the config's [backend] kind is {spec.kind!r}")
        from agent_swarm.orchestrator.cli.progress import terminal_progress
        from agent_swarm.swarm.backends.local import LocalBackend, engine_available

        if not engine_available():
            from agent_swarm.swarm.backends.local import ENGINE_INSTALL

            raise UserError(f"the local engine is not installed; install it with: {ENGINE_INSTALL}")
        orch, _ = spec.build(fanout=settings.config().max_subagents_per_stage, progress=terminal_progress())
        assert isinstance(orch, LocalBackend)
        return orch.engine


@command_options(ServeOptions)
def serve(**given: Any) -> None:
    """Keep the local model loaded in a background process, so later swarm run -b local calls of the
    same model and settings attach to it instead of starting their own engine (one run at a time; a
    second concurrent run starts its own). It exits after --idle seconds with no run attached, on
    swarm serve --stop, or when its model file changes.

    Examples:

    \b
      swarm serve                  # the model swarm run would start
      swarm serve -m qwen2.5-coder-0.5b --idle 1800
      swarm serve --status
      swarm serve --stop
    """
    from agent_swarm.swarm.backends.local.resident import read_state, stop_resident

    options = ServeOptions(**given)
    try:
        if options.status or options.stop:
            state = stop_resident() if options.stop else read_state()
            _say_state(state, stopped=options.stop)
            raise typer.Exit(0 if state is not None or options.stop else 1)
        if (state := read_state()) is not None:
            raise UserError(f"a resident engine is already running (pid {state.pid}, {state.model}); see --status")
        engine = options.engine()
        if options.foreground:
            _serve_here(engine, options.idle)
        else:
            _spawn(engine, options.idle)
    except SwarmError as exc:  # bad input, or an engine that failed to start
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


def _say_state(state: Any, *, stopped: bool) -> None:
    from agent_swarm.swarm.backends.local.resident import client_attached

    if state is None:
        typer.echo("no resident engine is running")
    elif stopped:
        typer.echo(f"stopped the resident engine (pid {state.pid}, {state.model})")
    else:
        busy = "a run is attached" if client_attached() else "idle"
        typer.echo(
            f"resident engine: {state.model} ({state.file.path}), pid {state.pid}, {state.base_url}, "
            f"{state.slots} slots x {state.ctx_per_slot} tokens, {state.threads} threads; {busy}; "
            f"exits after {state.idle_s:g} s idle"
        )


def _serve_here(engine: Any, idle_s: float) -> None:
    """Serve in this process until idle, SIGTERM or Ctrl-C."""
    from agent_swarm.swarm.backends.local.resident import serve_engine

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def ready(state: Any) -> None:
        err.print(
            f"resident engine ready: {state.model}, pid {state.pid}, {state.base_url}; exits after {idle_s:g} s idle"
        )

    try:
        why = serve_engine(engine, idle_s, stop=stop, ready=ready)
    except KeyboardInterrupt:
        why = "stopped"
    err.print(f"resident engine exited ({why})")


def _spawn(engine: Any, idle_s: float) -> None:
    """Start the engine in a detached process and wait until it serves (or fails, with its error)."""
    from agent_swarm.swarm.backends.local.keepalive import spawn_resident
    from agent_swarm.swarm.backends.local.resident import resident_dir

    state, why = spawn_resident(engine.serve_request(idle_s, resident_dir()))
    if state is None:
        raise UserError(f"the resident engine did not start: {why}")
    typer.echo(
        f"resident engine ready: {state.model}, pid {state.pid}, {state.base_url}; "
        f"exits after {state.idle_s:g} s with no run attached (swarm serve --stop stops it)"
    )
