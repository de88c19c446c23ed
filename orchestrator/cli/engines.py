"""What the local engines behind a command will run: each engine's context per slot and slots, and why.

``swarm run`` prints these lines in its header and ``swarm eval`` in its banner and manifest
(:class:`~agent_swarm.orchestrator.eval_raw.Provenance` ``engine``). Planning finds the model and sizes the slots
without loading anything (:meth:`agent_swarm.swarm.backends.local.LocalEngine.plan`), so the slots a stage admits
are known before the first sub-agent starts.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent_swarm.swarm.backends.local import LocalEngine
from agent_swarm.swarm.errors import ConfigError

__all__ = ["SLOTS_WHY", "engine_notes"]

SLOTS_WHY = (
    "slots: one per sub-agent a stage runs at once, at most 4 per core ([backend] slots or SWARM_LOCAL_SLOTS sets them)"
)


def engine_notes(backends: Iterable[object]) -> list[str]:
    """``local engine NAME: PLAN; SLOTS_WHY`` for each distinct local engine behind ``backends``. An
    engine that cannot be planned says nothing here: its first request fails with the fix."""
    engines: dict[int, LocalEngine] = {}
    for b in backends:
        engine = getattr(b, "engine", None)
        if isinstance(engine, LocalEngine):
            engines.setdefault(id(engine), engine)
    lines = []
    for engine in engines.values():
        try:
            note = engine.plan()
        except ConfigError:
            continue
        lines.append(f"local engine {engine.name}: {note}; {SLOTS_WHY}")
    return lines
