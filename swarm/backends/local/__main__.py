"""The background engine's process: ``python -m agent_swarm.swarm.backends.local REQUEST`` serves the engine a
:class:`~agent_swarm.swarm.backends.local.keepalive.ServeRequest` (JSON) asks for until it is idle, stopped
(SIGTERM) or its model file changes; started by
:func:`~agent_swarm.swarm.backends.local.keepalive.spawn_resident`, its output is the engine's log."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from agent_swarm.swarm.backends.local.engine import LocalEngine
from agent_swarm.swarm.backends.local.keepalive import ServeRequest
from agent_swarm.swarm.backends.local.resident import ResidentState, serve_engine
from agent_swarm.swarm.errors import SwarmError


def main(argv: Sequence[str]) -> int:
    """Serve the request in ``argv[0]``; 0 when it ended (idle, stopped, model changed), 2 when it could not start."""
    request = ServeRequest.model_validate_json(argv[0])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def ready(state: ResidentState) -> None:
        print(f"resident engine ready: {state.model}, pid {state.pid}, {state.base_url}", flush=True)

    try:
        engine = LocalEngine.serving(request)
        why = serve_engine(engine, request.idle_s, directory=Path(request.directory), stop=stop, ready=ready)
    except SwarmError as exc:  # another resident engine claimed the directory, or the model did not load
        print(f"error: {exc}", flush=True)
        return 2
    print(f"resident engine exited ({why})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
