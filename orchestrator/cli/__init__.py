"""The ``swarm`` command line: ``agent_swarm.orchestrator.cli:main`` is the console script (see :mod:`.app`)."""

from agent_swarm.orchestrator.cli.app import GC_THRESHOLD, app, main, optional_value, tune_gc

__all__ = ["GC_THRESHOLD", "app", "main", "optional_value", "tune_gc"]
