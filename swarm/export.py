"""Re-export of :mod:`swarm.rl.export`, this module's home since 0.2 (README.md documented ``swarm.export``)."""

from swarm.rl.export import (
    JsonlProblem,
    JsonlWriter,
    iter_jsonl,
    read_jsonl,
    read_parquet,
    read_trajectories,
    repair_jsonl,
    to_agl_triplets,
    to_trl_rollout,
    to_verl_agent_loop_output,
    write_parquet,
)

__all__ = [
    "JsonlProblem",
    "JsonlWriter",
    "iter_jsonl",
    "read_jsonl",
    "read_parquet",
    "read_trajectories",
    "repair_jsonl",
    "to_agl_triplets",
    "to_trl_rollout",
    "to_verl_agent_loop_output",
    "write_parquet",
]
