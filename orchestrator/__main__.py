"""``python -m orchestrator`` runs the ``swarm`` CLI."""

from orchestrator.cli import main

main()
