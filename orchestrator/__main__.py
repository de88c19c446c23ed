"""``python -m orchestrator`` runs the ``swarm`` CLI."""

from agent_swarm.orchestrator.cli import main

main()
