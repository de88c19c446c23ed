"""Re-export of :mod:`swarm.rl.trajectory`, this module's home since 0.2 (README.md documented ``swarm.trajectory``)."""

from swarm.rl.trajectory import (
    SCHEMA_VERSION,
    SubagentSide,
    Trajectory,
    TrajectoryError,
    TrajectoryTurn,
    build_trajectory,
    flatten_turns,
    validate_trajectory,
)

__all__ = [
    "SCHEMA_VERSION",
    "SubagentSide",
    "Trajectory",
    "TrajectoryError",
    "TrajectoryTurn",
    "build_trajectory",
    "flatten_turns",
    "validate_trajectory",
]
