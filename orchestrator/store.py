"""Where episode records live on disk: ``<root>/<episode-id>/episode.json``, written atomically.

The default root is :func:`records_dir`: ``$SWARM_RECORDS_DIR``, else ``$XDG_DATA_HOME/swarm/records``,
else ``~/.local/share/swarm/records``, so ``swarm run`` writes and ``swarm traces list`` reads the same
place from any working directory.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from agent_swarm.orchestrator.environment import environment
from agent_swarm.swarm.records import EpisodeRecord, dump_record

__all__ = [
    "DEFAULT_ROOT",
    "EPISODE_FILE",
    "episode_dir",
    "iter_episodes",
    "read_episode",
    "records_dir",
    "write_episode",
]

DEFAULT_ROOT = Path("traces")
"""A relative ``traces/`` (what commands with their own ``--out`` default, such as ``swarm eval``, use)."""
EPISODE_FILE = "episode.json"


def records_dir() -> Path:
    """The default records directory: ``$SWARM_RECORDS_DIR``, else ``$XDG_DATA_HOME/swarm/records``,
    else ``~/.local/share/swarm/records``."""
    return environment().records_dir


def episode_dir(root: Path, episode_id: str) -> Path:
    return root / episode_id


def write_episode(record: EpisodeRecord, root: Path = DEFAULT_ROOT) -> Path:
    """Write the record as JSON, type-checked on the way out (:func:`agent_swarm.swarm.records.dump_record`); a
    crash mid-write never leaves a half file (temp file + rename)."""
    d = episode_dir(root, record.episode_id)
    d.mkdir(parents=True, exist_ok=True)
    target = d / EPISODE_FILE
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".episode-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(dump_record(record, indent=1))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def read_episode(path: Path) -> EpisodeRecord:
    """Read a record from an ``episode.json`` file or its directory."""
    if path.is_dir():
        path = path / EPISODE_FILE
    return EpisodeRecord.model_validate_json(path.read_text(encoding="utf-8"))


def iter_episodes(root: Path = DEFAULT_ROOT) -> Iterator[Path]:
    """Episode files anywhere under ``root`` (``swarm run``'s ``<root>/<id>/``, ``swarm eval``'s
    ``<root>/<run>/episodes/<mode>/<id>/``), newest first."""
    if not root.is_dir():
        return iter(())
    files = [p for p in root.rglob(EPISODE_FILE) if p.is_file()]
    return iter(sorted(files, key=lambda p: p.stat().st_mtime, reverse=True))
