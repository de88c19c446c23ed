"""Raw per-episode data of ``swarm eval`` runs: what every published figure is regenerated from.

A run directory holds ``manifest.json`` (:class:`RunManifest`: what was run, on which code and model,
with which settings) and ``episodes.jsonl.gz`` (one :class:`RawEpisode` per finished episode: the
answer, the per-item scores, status, steps, tokens per role, wall time, provenance and the resolved
config). Each row is appended as its own gzip member and flushed, so an interrupted run keeps every
finished episode; a torn last member (a kill mid-write) is skipped on reading and dropped when the
run resumes (:func:`read_raw`). ``gzip``/``zcat`` read the file as one stream.

:func:`settings_diff` names the keys where two runs' settings differ: a resumed run must match.
:func:`read_records` reads a run's full episode records (its traces), which some scorers need.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import subprocess
import tarfile
import tempfile
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_swarm.swarm import __version__
from agent_swarm.swarm.errors import ConfigError

__all__ = [
    "MANIFEST_FILE",
    "RAW_FILE",
    "RAW_SCHEMA",
    "Provenance",
    "RawEpisode",
    "RoleTokens",
    "RunManifest",
    "append_raw",
    "code_state",
    "episode_key",
    "file_sha256",
    "read_manifest",
    "read_raw",
    "read_records",
    "settings_diff",
    "write_manifest",
    "write_raw",
]

RAW_FILE = "episodes.jsonl.gz"
MANIFEST_FILE = "manifest.json"
RAW_SCHEMA = 1


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RoleTokens(_Frozen):
    prompt: int = 0
    completion: int = 0

    @property
    def total(self) -> int:
        return self.prompt + self.completion


class Provenance(_Frozen):
    """What produced an episode: the code, the model files and the backend."""

    commit: str | None = Field(None, description="git rev-parse HEAD of the source tree (None: not a git checkout)")
    dirty: bool | None = Field(None, description="uncommitted changes in the source tree when the run started")
    swarm_version: str = __version__
    python: str = platform.python_version()
    backend: str = ""
    model: str = ""
    model_sha256: str | None = None
    subagent_model: str = ""
    subagent_model_sha256: str | None = None
    adapter: str | None = Field(None, description="the orchestrator's LoRA adapter (None: the base model)")
    adapter_sha256: str | None = None
    engine: str | None = Field(
        None, description="the local engines' plans: context per slot, slots and why (None: no local engine)"
    )


class _OfRun(_Frozen):
    """What names an evaluation run: its id, the workload and metric, and the split and seed of its
    tasks (the first fields of a manifest and of each raw row, in this order on disk)."""

    schema_version: int = RAW_SCHEMA
    run_id: str
    workload: str
    metric_name: str
    split: str
    seed: int


class RawEpisode(_OfRun):
    """One finished episode of an evaluation, with everything a report needs."""

    task_id: str
    arm: str
    mode: str = Field(description="the workload mode the arm runs in (swarm or single)")
    sample: int = 0
    episode_id: str
    status: str
    answer: str | None = None
    metric: float = 0.0
    success: bool = False
    items: dict[str, float] | None = Field(None, description="per-item scores (None: the scorer reports none)")
    scores: dict[str, Any] = Field(default_factory=dict, description="the scorer's details (aggregates)")
    critical_steps: int = 0
    total_steps: int = 0
    main_steps: int = 0
    subagent_steps: int = 0
    max_width: int = 0
    mean_width: float = 0.0
    subagents: int = 0
    finish_rate: float | None = None
    tokens: dict[str, RoleTokens] = Field(default_factory=dict, description="orchestrator / subagent")
    wall_time_s: float = 0.0
    concurrent_episodes: int = Field(1, description="episodes the run ran at once (wall times share the machine)")
    error: str | None = None
    started_at: float = 0.0
    provenance: Provenance = Provenance()
    config: dict[str, Any] = Field(default_factory=dict, description="the episode's resolved SwarmConfig")
    subagent_cache: dict[str, int] = Field(
        default_factory=dict, description="the sub-agent replay cache's hits, misses and bypassed calls (empty: off)"
    )

    @property
    def total_tokens(self) -> int:
        return sum(t.total for t in self.tokens.values())

    @property
    def key(self) -> tuple[str, str, int]:
        return episode_key(self.task_id, self.arm, self.sample)


def episode_key(task_id: str, arm: str, sample: int = 0) -> tuple[str, str, int]:
    """What identifies an episode within a run (a resumed run skips the keys it already has)."""
    return (task_id, arm, sample)


class RunManifest(_OfRun):
    """``manifest.json``: one evaluation run."""

    task_ids: tuple[str, ...]
    arms: tuple[str, ...]
    knobs: dict[str, Any] = Field(default_factory=dict, description="the workload knobs, defaults included")
    settings: dict[str, Any] = Field(description="everything that must match for a resume to continue the run")
    provenance: Provenance
    samples: int = Field(1, description="episodes per task and arm")
    concurrent_episodes: int = 1
    argv: tuple[str, ...] = ()
    created_at: float = 0.0
    resumed_at: tuple[float, ...] = ()


def append_raw(path: Path, row: RawEpisode) -> None:
    """Append ``row`` as one gzip member, flushed to disk."""
    data = gzip.compress((row.model_dump_json() + "\n").encode("utf-8"), mtime=0)
    with path.open("ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _members(blob: bytes) -> Iterable[tuple[bytes, bool]]:
    """Decompressed gzip members of ``blob``; the flag is False for a torn (incomplete) member."""
    while blob:
        d = zlib.decompressobj(wbits=31)
        try:
            out = d.decompress(blob)
        except zlib.error:
            yield b"", False
            return
        if not d.eof:
            yield out, False
            return
        yield out, True
        blob = d.unused_data


def read_raw(path: Path) -> tuple[list[RawEpisode], int]:
    """The rows of a raw file and the number of damaged entries skipped (a torn last member from a
    kill mid-write, or a line that is not a valid row)."""
    rows: list[RawEpisode] = []
    bad = 0
    if not path.is_file():
        return rows, bad
    for text, whole in _members(path.read_bytes()):
        if not whole:
            bad += 1
            continue
        for line in text.decode("utf-8", errors="replace").splitlines():
            if not line.strip():
                continue
            try:
                rows.append(RawEpisode.model_validate_json(line))
            except ValidationError:
                bad += 1
    return rows, bad


def write_raw(path: Path, rows: Sequence[RawEpisode]) -> None:
    """Replace ``path`` with ``rows`` atomically (temp file + rename)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".episodes-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            for row in rows:
                f.write(gzip.compress((row.model_dump_json() + "\n").encode("utf-8"), mtime=0))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_manifest(root: Path, manifest: RunManifest) -> Path:
    target = root / MANIFEST_FILE
    tmp = root / f".{MANIFEST_FILE}.tmp"
    tmp.write_text(manifest.model_dump_json(indent=1) + "\n", encoding="utf-8")
    tmp.replace(target)
    return target


def read_manifest(root: Path) -> RunManifest:
    path = root / MANIFEST_FILE
    try:
        return RunManifest.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{root} has no {MANIFEST_FILE}; it is not a swarm eval run directory") from None
    except ValidationError as exc:
        raise ConfigError(f"{path} is not a valid eval manifest: {exc.errors()[0]['msg']}") from None


def settings_diff(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two settings mappings (missing on one side included)."""
    out: list[str] = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, _MISSING), new.get(key, _MISSING)
        name = f"{prefix}{key}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += settings_diff(a, b, f"{name}.")
        elif _norm(a) != _norm(b):
            out.append(name)
    return out


_MISSING = object()


def _norm(value: Any) -> Any:
    """JSON round trip, so tuples and lists (a manifest read back) compare equal."""
    if value is _MISSING:
        return value
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def read_records(run: Path) -> Iterator[dict[str, Any]]:
    """Every episode record (``episode.json``, as a dict) of an eval run: from its ``episodes/`` folder,
    else from its packed ``traces.tar.gz`` (the committed form); none when it has neither."""
    folder = run / "episodes"
    if folder.is_dir():
        for path in sorted(folder.glob("*/*/episode.json")):
            yield json.loads(path.read_text(encoding="utf-8"))
        return
    if not (run / "traces.tar.gz").is_file():
        return
    with tarfile.open(run / "traces.tar.gz") as tar:
        for member in tar:
            if member.name.endswith("/episode.json"):
                blob = tar.extractfile(member)
                if blob is not None:
                    yield json.load(io.TextIOWrapper(blob, encoding="utf-8"))


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def code_state(source: Path | None = None) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the git checkout holding ``source`` (default: this package's source tree);
    ``(None, None)`` outside a checkout or without git."""
    where = source or Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return head or None, bool(status.strip())
