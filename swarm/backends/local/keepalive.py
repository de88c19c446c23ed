"""Start a resident engine in a background process: ``swarm serve``, and a run that keeps its model loaded.

A :class:`~agent_swarm.swarm.backends.local.engine.LocalEngine` given ``keep_alive`` and finding no resident
engine starts one with exactly its own settings (:class:`ServeRequest`) and attaches to it, so the
engine outlives the run by ``keep_alive`` seconds of idle time and the next run skips the model load
(as Ollama keeps a model loaded for five minutes after a request). ``swarm serve`` starts its engine
the same way. The child runs :func:`main` (``python -m agent_swarm.swarm.backends.local.keepalive REQUEST``),
serves through :func:`~agent_swarm.swarm.backends.local.resident.serve_engine` and writes its log to
``resident_dir()/serve.log``; :func:`spawn_resident` returns once it serves, or says why it did not.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, NonNegativeInt, PositiveFloat, PositiveInt

from agent_swarm.swarm.backends.local.resident import ResidentState, read_state, resident_dir

if TYPE_CHECKING:
    from agent_swarm.swarm.backends.local.engine import LocalEngine

__all__ = ["LOG_FILE", "START_TIMEOUT_S", "ServeRequest", "main", "spawn_resident"]

LOG_FILE = "serve.log"
"""The background engine's log, in :func:`resident_dir`."""
START_TIMEOUT_S = 900.0
"""How long :func:`spawn_resident` waits for the engine to serve (a first run assembles the model)."""
_DETACHED: list[subprocess.Popen[bytes]] = []
"""Background engines this process started that serve on: their handles live as long as this process
(a collected handle of a running child warns that it still runs; the child is meant to)."""


class ServeRequest(BaseModel):
    """What the background process builds: the engine's constructor arguments as asked, and its idle timeout."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None
    slots: PositiveInt
    fit_slots: bool
    ctx_per_slot: PositiveInt | None
    threads: PositiveInt | None
    pool: NonNegativeInt = 0
    prefix_cache: bool = True
    idle_s: PositiveFloat
    directory: str
    """Where it publishes its state (:func:`resident_dir`, unless a caller keeps its own)."""

    @classmethod
    def of(cls, engine: LocalEngine, idle_s: float, directory: Path | None = None) -> ServeRequest:
        """The request that serves ``engine``'s model with ``engine``'s settings (so it attaches) in
        ``directory`` (default: the engine's ``resident``, else :func:`resident_dir`)."""
        r = engine.request
        return cls(
            model=engine.requested,
            slots=r.slots,
            fit_slots=r.fit_slots,
            ctx_per_slot=r.ctx,
            threads=r.threads,
            pool=engine.pool,
            prefix_cache=engine.use_prefix_cache,
            idle_s=idle_s,
            directory=str(directory or engine.resident or resident_dir()),
        )

    def engine(self) -> LocalEngine:
        """The engine this request asks for (not started; it never attaches to another)."""
        from agent_swarm.swarm.backends.local.engine import LocalEngine

        return LocalEngine(
            self.model,
            slots=self.slots,
            fit_slots=self.fit_slots,
            ctx_per_slot=self.ctx_per_slot,
            threads=self.threads,
            pool=self.pool,
            prefix_cache=self.prefix_cache,
        )

    def command(self) -> list[str]:
        """The background process's command line."""
        return [sys.executable, "-m", "agent_swarm.swarm.backends.local.keepalive", self.model_dump_json()]


def spawn_resident(
    request: ServeRequest,
    *,
    timeout_s: float = START_TIMEOUT_S,
    command: Sequence[str] | None = None,
) -> tuple[ResidentState | None, str]:
    """Start ``request``'s engine in a detached process (``command``, default :meth:`ServeRequest.command`)
    and wait until it serves: ``(state, "")``, else ``(None, why)`` with the log's last line (an engine
    that failed to load, another resident engine that claimed the directory first, or ``timeout_s``
    passed: the process is then stopped). The process outlives the caller and this shell's hangup."""
    d = Path(request.directory)
    log = d / LOG_FILE
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:  # another engine may still write to it
        child = subprocess.Popen(
            list(command or request.command()),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout_s
    while (state := read_state(d)) is None or state.pid != child.pid:
        if child.poll() is not None:
            return None, f"the background engine exited: {last_line(log)} (log: {log})"
        if time.monotonic() > deadline:
            child.kill()
            child.wait()
            return None, f"the background engine did not serve within {timeout_s:g} s (log: {log})"
        time.sleep(0.1)
    _DETACHED.append(child)
    return state, ""


def last_line(path: Path) -> str:
    """The last non-empty line of a log, without an ``error:`` prefix."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "it left no log"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1].removeprefix("error: ") if lines else "it exited without a message"


def main(argv: Sequence[str]) -> int:
    """The background process: serve the request's engine until idle, SIGTERM or its model file changes."""
    from agent_swarm.swarm.backends.local.resident import serve_engine
    from agent_swarm.swarm.errors import SwarmError

    request = ServeRequest.model_validate_json(argv[0])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def ready(state: ResidentState) -> None:
        print(f"resident engine ready: {state.model}, pid {state.pid}, {state.base_url}", flush=True)

    try:
        why = serve_engine(request.engine(), request.idle_s, directory=Path(request.directory), stop=stop, ready=ready)
    except SwarmError as exc:  # another resident engine claimed the directory, or the model did not load
        print(f"error: {exc}", flush=True)
        return 2
    print(f"resident engine exited ({why})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
