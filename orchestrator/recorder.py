"""Writing episode records from your own code, where ``swarm traces list/show`` finds them.

An :class:`~agent_swarm.orchestrator.engine.Orchestrator` tells its observers about every step; the last event of
an episode, :class:`~agent_swarm.swarm.events.EpisodeFinished`, carries the whole record, for every ending
(answered, failed, timed out, cancelled by Ctrl-C). :class:`RecordWriter` is that observer::

    from agent_swarm.orchestrator import Orchestrator, RecordWriter

    writer = RecordWriter()  # the records directory `swarm traces list` reads (records_dir())
    orch = Orchestrator(backend, config, observers=[writer])
    record = await orch.run("Capitals of France and Japan?")
    print(writer.paths[record.episode_id])  # …/<episode-id>/episode.json: swarm traces show <episode-id>

``swarm run`` writes its records with this same observer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agent_swarm.orchestrator.store import records_dir, write_episode
from agent_swarm.swarm.events import EpisodeFinished, Event
from agent_swarm.swarm.records import EpisodeRecord

__all__ = ["RecordWriter"]


class RecordWriter:
    """An observer that writes each finished episode to ``root/<episode-id>/episode.json`` (atomically).

    ``root`` defaults to :func:`agent_swarm.orchestrator.store.records_dir` (``$SWARM_RECORDS_DIR``, else the user
    data directory), which ``swarm traces list`` reads from any working directory. ``annotate`` returns
    metadata merged into a record before it is written. ``records`` and ``paths`` hold what was written.
    A record that cannot be written (a full disk, a folder removed mid-run) never ends the run: it stays
    in ``records``, and ``failures`` maps its episode id to the reason.
    """

    def __init__(
        self,
        root: Path | None = None,
        *,
        annotate: Callable[[EpisodeRecord], Mapping[str, Any]] | None = None,
    ) -> None:
        self.root = root if root is not None else records_dir()
        self._annotate = annotate
        self.records: list[EpisodeRecord] = []
        self.paths: dict[str, Path] = {}
        self.failures: dict[str, str] = {}

    def __call__(self, event: Event) -> None:
        if not isinstance(event, EpisodeFinished):
            return
        record = event.record
        extra = self._annotate(record) if self._annotate is not None else {}
        if extra:
            record = record.model_copy(update={"metadata": {**record.metadata, **extra}})
        self.records.append(record)
        try:
            self.paths[record.episode_id] = write_episode(record, self.root)
        except OSError as exc:
            self.failures[record.episode_id] = f"{exc.strerror or type(exc).__name__} ({exc.filename or self.root})"
