"""Rollout collection: K episodes per task, PARL rewards, group advantages, trajectories on disk.

One episode's job and outcome (:mod:`.episodes`), where episodes run (:mod:`.executors`: the
:class:`~.executors.EpisodeRunner`, the in-process :class:`~.executors.LocalExecutor`; Ray's is
:class:`agent_swarm.orchestrator.cluster.RayExecutor`), the driver that writes the run's files and resumes it
(:mod:`.collection`, :func:`~.collection.collect_rollouts`), its settings (:mod:`.config`) and the TRL
``rollout_func`` (:mod:`.trl`). They are imported from their modules; the common names are also on
:mod:`orchestrator` itself (``from orchestrator import collect_rollouts, RolloutConfig``). Task files
are read by :func:`agent_swarm.orchestrator.tasks.load_task_file`.
"""

__all__: list[str] = []
