"""Start a resident engine in a background process: ``swarm serve``, and a run that keeps its model loaded.

A :class:`~agent_swarm.swarm.backends.local.engine.LocalEngine` given ``keep_alive`` and finding no resident
engine starts one with exactly its own settings (:class:`ServeRequest`) and attaches to it, so the
engine outlives the run by ``keep_alive`` seconds of idle time and the next run skips the model load
(as Ollama keeps a model loaded for five minutes after a request). ``swarm serve`` starts its engine
the same way (:meth:`LocalEngine.serve_request <agent_swarm.swarm.backends.local.engine.LocalEngine.serve_request>`).
The child runs ``python -m agent_swarm.swarm.backends.local REQUEST`` (``__main__.py``), serves through
:func:`~agent_swarm.swarm.backends.local.resident.serve_engine` and writes its log to
``resident_dir()/serve.log``; :func:`spawn_resident` returns once it serves, or says why it did not.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, NonNegativeInt, PositiveFloat, PositiveInt

from agent_swarm.swarm.backends.local.resident import ResidentState, read_state

__all__ = ["LOG_FILE", "START_TIMEOUT_S", "ServeRequest", "last_line", "spawn_resident"]

LOG_FILE = "serve.log"
"""The background engine's log, in its directory (:attr:`ServeRequest.directory`)."""
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
    """Where it publishes its state (``resident_dir()``, unless a caller keeps its own)."""

    def command(self) -> list[str]:
        """The background process's command line."""
        return [sys.executable, "-m", "agent_swarm.swarm.backends.local", self.model_dump_json()]


def spawn_resident(
    request: ServeRequest,
    *,
    timeout_s: float = START_TIMEOUT_S,
    command: Sequence[str] | None = None,
) -> tuple[ResidentState | None, str]:
    """Start ``request``'s engine in a detached process (``command``, default :meth:`ServeRequest.command`)
    and wait until it serves: ``(state, "")``, else ``(None, why)`` with the log's last line (an engine
    that failed to load, another resident engine that claimed the directory first, or ``timeout_s``
    passed: the process is then stopped; or its directory or process could not be made). The process
    outlives the caller and this shell's hangup."""
    d = Path(request.directory)
    log = d / LOG_FILE
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:  # another engine may still write to it
            child = subprocess.Popen(
                list(command or request.command()),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
    except OSError as exc:
        return None, f"the background engine could not start: {exc}"
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
