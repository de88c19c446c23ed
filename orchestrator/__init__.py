"""The orchestrator: the trainable policy's episode engine, rollouts, trainer and the `swarm` CLI."""

from orchestrator.config import SwarmConfig
from orchestrator.engine import Orchestrator

__all__ = ["Orchestrator", "SwarmConfig"]
