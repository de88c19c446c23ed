"""Swarm (`agent-swarm`): parallel multi-agent runtime and PARL training for the orchestrator that plans it.

One import name for the whole distribution, so a user's own ``tools.py`` or ``swarm.py``, or another
``swarm`` package, cannot shadow ours: ``agent_swarm.swarm`` (the kernel), ``agent_swarm.tools``,
``agent_swarm.subagents``, ``agent_swarm.orchestrator`` and ``agent_swarm.workloads``. In the repository the
packages stay in their top-level folders; the entries here are relative symlinks to them (ARCHITECTURE.md).
"""
