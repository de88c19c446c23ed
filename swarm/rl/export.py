"""Exporters for trajectories: native JSONL, Parquet, verl ``AgentLoopOutput`` and TRL ``rollout_func``.

* **JSONL** (native, lossless): one :class:`~agent_swarm.swarm.rl.trajectory.Trajectory` (or any pydantic model /
  JSON object) per line. :class:`JsonlWriter` appends each record with a single ``write`` on an
  ``O_APPEND`` descriptor; a process killed mid-write can leave at most one unterminated tail, which
  :func:`repair_jsonl` (run by every writer on open) cuts off, and :func:`read_jsonl` reports rather
  than parses. So a finished line is always a whole record.
* **Parquet** (``pyarrow``, the ``parquet`` extra): the flattened token columns as native lists plus
  a JSON column with the rest; :func:`read_parquet` rebuilds identical trajectories.
* **verl**: :func:`to_verl_agent_loop_output` gives the fields of
  ``verl.experimental.agent_loop.AgentLoopOutput`` (``prompt_ids``, ``response_ids``,
  ``response_mask``, ``response_logprobs``, ``reward_score``, ``num_turns``, ``metrics``,
  ``extra_fields``): ``AgentLoopOutput(**record)`` loads it.
* **Agent Lightning**: :func:`to_agl_triplets` gives one ``Triplet``-shaped dict per orchestrator turn
  (``prompt.token_ids``, ``response.token_ids``/``log_probs``, the episode reward on the last turn).
* **TRL**: :func:`to_trl_rollout` gives the dict a ``GRPOTrainer`` ``rollout_func`` returns:
  ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask`` (1 = model token), one entry per
  completion, plus extra per-completion keys (``reward``, ``advantage``, ids) that TRL forwards to the
  reward functions as keyword lists.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, overload

from pydantic import BaseModel, ValidationError

from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.records import dump_record
from agent_swarm.swarm.rl.trajectory import Trajectory

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

M = TypeVar("M", bound=BaseModel)


# -- JSONL ------------------------------------------------------------------------------------------


def repair_jsonl(path: Path) -> int:
    """Cut an unterminated last line (a write interrupted by a crash). Returns the bytes removed."""
    if not path.exists():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with path.open("rb+") as f:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return 0
        # Walk back to the last newline.
        pos = size
        chunk = 1 << 16
        while pos > 0:
            start = max(0, pos - chunk)
            f.seek(start)
            buf = f.read(pos - start)
            nl = buf.rfind(b"\n")
            if nl >= 0:
                keep = start + nl + 1
                f.truncate(keep)
                return size - keep
            pos = start
        f.truncate(0)
        return size


class JsonlWriter:
    """Append-only JSONL writer: each record is one line written with one ``os.write`` call.

    Safe to share between tasks of one process (a lock serialises writes). ``fsync=True`` also
    flushes each record to disk before :meth:`write` returns.
    """

    def __init__(self, path: Path | str, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.repaired_bytes = repair_jsonl(self.path)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._fsync = fsync
        self._lock = threading.Lock()

    def write(self, record: BaseModel | Mapping[str, Any]) -> None:
        if isinstance(record, BaseModel):
            text = dump_record(record)  # type-checked on the way out
        else:
            text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        self.write_line(text)

    def write_line(self, text: str) -> None:
        """Append one already-serialised JSON record (it must hold no newline)."""
        if "\n" in text:
            raise ValueError(f"a JSONL record must be one line; got {len(text.splitlines())} lines for {self.path}")
        data = (text + "\n").encode("utf-8")
        with self._lock:
            if self._fd is None:
                raise ValueError(f"JsonlWriter for {self.path} is closed")
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
            if self._fsync:
                os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class JsonlProblem(BaseModel):
    """A line of a JSONL file that could not be read."""

    path: str
    line: int
    error: str


@overload
def iter_jsonl(
    path: Path | str,
    model: type[M],
    *,
    on_error: Literal["raise", "skip"] = "raise",
    problems: list[JsonlProblem] | None = None,
) -> Iterator[M]: ...
@overload
def iter_jsonl(
    path: Path | str,
    model: None = None,
    *,
    on_error: Literal["raise", "skip"] = "raise",
    problems: list[JsonlProblem] | None = None,
) -> Iterator[Any]: ...
def iter_jsonl(
    path: Path | str,
    model: type[M] | None = None,
    *,
    on_error: Literal["raise", "skip"] = "raise",
    problems: list[JsonlProblem] | None = None,
) -> Iterator[Any]:
    """Yield the records one at a time (a large file is never held whole); see :func:`read_jsonl`."""
    p = Path(path)
    for lineno, raw, terminated in _lines(p):
        if not raw.strip():
            continue
        try:
            if not terminated:
                raise ValueError("unterminated last line (a write was interrupted)")
            value = model.model_validate_json(raw) if model is not None else json.loads(raw)
        except (ValueError, ValidationError) as exc:
            msg = str(exc).splitlines()[0] if not isinstance(exc, ValidationError) else _short(exc)
            if on_error == "raise":
                raise ConfigError(f"{p}:{lineno}: cannot read record: {msg}") from None
            if problems is not None:
                problems.append(JsonlProblem(path=str(p), line=lineno, error=msg))
            continue
        yield value


@overload
def read_jsonl(
    path: Path | str,
    model: type[M],
    *,
    on_error: Literal["raise", "skip"] = "raise",
    problems: list[JsonlProblem] | None = None,
) -> list[M]: ...
@overload
def read_jsonl(
    path: Path | str,
    model: None = None,
    *,
    on_error: Literal["raise", "skip"] = "raise",
    problems: list[JsonlProblem] | None = None,
) -> list[Any]: ...
def read_jsonl(
    path: Path | str,
    model: type[M] | None = None,
    *,
    on_error: Literal["raise", "skip"] = "raise",
    problems: list[JsonlProblem] | None = None,
) -> list[Any]:
    """Read every record; with ``model`` each line is validated into it.

    A bad line (invalid JSON, failed validation, an unterminated last line) raises
    :class:`ConfigError` naming the file and line, or with ``on_error="skip"`` is appended to
    ``problems`` and skipped.
    """
    return list(iter_jsonl(path, model, on_error=on_error, problems=problems))


def _short(exc: ValidationError) -> str:
    e = exc.errors()[0]
    return f"{'.'.join(str(x) for x in e['loc']) or '(record)'}: {e['msg']} ({exc.error_count()} error(s))"


def _lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    with path.open("rb") as f:
        for i, line in enumerate(f, start=1):
            terminated = line.endswith(b"\n")
            yield i, line.decode("utf-8", errors="replace"), terminated


def read_trajectories(path: Path | str) -> list[Trajectory]:
    """Trajectories from a JSONL file (each validated, token continuity included)."""
    return read_jsonl(path, Trajectory)


# -- Parquet ----------------------------------------------------------------------------------------

_LIST_COLUMNS = ("prompt_ids", "response_ids", "response_mask", "response_logprobs")


def _pyarrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError("Parquet export needs pyarrow: pip install 'agent-swarm[parquet]'") from None
    return pa, pq


def write_parquet(trajectories: Iterable[Trajectory], path: Path | str) -> int:
    """Write trajectories to one Parquet file (atomically: a temp file renamed into place).

    Columns: ``episode_id``, ``group_id``, ``task_id``, ``reward``, ``advantage``, ``num_turns``, the
    four flattened token lists, and ``record`` (JSON of every other field). Returns the row count.
    """
    pa, pq = _pyarrow()
    rows = list(trajectories)
    cols: dict[str, list[Any]] = {
        "episode_id": [],
        "group_id": [],
        "task_id": [],
        "reward": [],
        "advantage": [],
        "num_turns": [],
        "prompt_ids": [],
        "response_ids": [],
        "response_mask": [],
        "response_logprobs": [],
        "record": [],
    }
    for t in rows:
        cols["episode_id"].append(t.episode_id)
        cols["group_id"].append(t.group_id)
        cols["task_id"].append(t.task_id)
        cols["reward"].append(t.reward.total)
        cols["advantage"].append(t.advantage)
        cols["num_turns"].append(t.num_turns)
        for c in _LIST_COLUMNS:
            cols[c].append(list(getattr(t, c)))
        cols["record"].append(t.model_dump_json(exclude=set(_LIST_COLUMNS)))
    schema = pa.schema(
        [
            ("episode_id", pa.string()),
            ("group_id", pa.string()),
            ("task_id", pa.string()),
            ("reward", pa.float64()),
            ("advantage", pa.float64()),
            ("num_turns", pa.int32()),
            ("prompt_ids", pa.list_(pa.int64())),
            ("response_ids", pa.list_(pa.int64())),
            ("response_mask", pa.list_(pa.int8())),
            ("response_logprobs", pa.list_(pa.float64())),
            ("record", pa.string()),
        ]
    )
    table = pa.table(cols, schema=schema)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, p)
    return len(rows)


def read_parquet(path: Path | str) -> list[Trajectory]:
    """Rebuild the trajectories written by :func:`write_parquet` (validated)."""
    _, pq = _pyarrow()
    table = pq.read_table(Path(path))
    data = table.to_pydict()
    out = []
    for i in range(table.num_rows):
        rec = json.loads(data["record"][i])
        for c in _LIST_COLUMNS:
            rec[c] = data[c][i]
        out.append(Trajectory.model_validate(rec))
    return out


# -- trainer formats --------------------------------------------------------------------------------


def _extra(t: Trajectory) -> dict[str, Any]:
    r = t.reward
    return {
        "episode_id": t.episode_id,
        "group_id": t.group_id,
        "uid": t.group_id,
        "task_id": t.task_id,
        "sample_index": t.sample_index,
        "advantage": t.advantage,
        "policy_version": t.policy_version,
        "reward_components": {
            "r_perf": r.r_perf,
            "r_parallel": r.r_parallel,
            "r_finish": r.r_finish,
            "lambda1": r.lambda1,
            "lambda2": r.lambda2,
            "step": r.step,
        },
        "reward_error": r.error,
        "status": t.status,
        "truncated": t.truncated,
        "critical_steps": t.critical_steps,
        "total_steps": t.total_steps,
        "stage_widths": list(t.stage_widths),
        "subagent_statuses": list(t.subagent_statuses),
        "trace_id": t.trace_id,
        "orchestrator_turns": t.num_turns,
    }


def to_verl_agent_loop_output(t: Trajectory) -> dict[str, Any]:
    """The fields of verl's ``AgentLoopOutput`` for one trajectory.

    ``num_turns`` counts chat turns as verl does (user + assistant + observation blocks = 2 · turns);
    swarm's own fields (ids, reward components, advantage, DAG stats) go in ``extra_fields``.
    """
    return {
        "prompt_ids": list(t.prompt_ids),
        "response_ids": list(t.response_ids),
        "response_mask": list(t.response_mask),
        "response_logprobs": list(t.response_logprobs),
        "reward_score": t.reward.total,
        "num_turns": 2 * t.num_turns,
        "metrics": {"generate_sequences": 0.0, "tool_calls": 0.0, "compute_score": 0.0, "num_preempted": -1},
        "extra_fields": _extra(t),
    }


def to_trl_rollout(trajectories: Sequence[Trajectory]) -> dict[str, list[Any]]:
    """The dict a TRL ``GRPOTrainer`` ``rollout_func`` returns, one entry per completion, in order.

    Order the trajectories prompt by prompt, ``num_generations`` each (as rollout collection does);
    keys besides ``prompt_ids``/``completion_ids``/``logprobs``/``env_mask`` reach TRL's reward
    functions as keyword lists (``reward`` is the PARL total a reward function can return as is).
    """
    if not trajectories:
        raise ConfigError("to_trl_rollout needs at least one trajectory")
    out: dict[str, list[Any]] = {
        "prompt_ids": [],
        "completion_ids": [],
        "logprobs": [],
        "env_mask": [],
        "reward": [],
        "advantage": [],
        "episode_id": [],
        "group_id": [],
        "task_id": [],
    }
    for t in trajectories:
        out["prompt_ids"].append(list(t.prompt_ids))
        out["completion_ids"].append(list(t.response_ids))
        out["logprobs"].append(list(t.response_logprobs))
        out["env_mask"].append(list(t.response_mask))
        out["reward"].append(t.reward.total)
        out["advantage"].append(t.advantage)
        out["episode_id"].append(t.episode_id)
        out["group_id"].append(t.group_id)
        out["task_id"].append(t.task_id)
    return out


def to_agl_triplets(t: Trajectory) -> list[dict[str, Any]]:
    """Agent Lightning ``Triplet``-shaped dicts, one per orchestrator turn (1.0 field names).

    Each turn's exact prompt and response ids; the episode's PARL total is the reward of the last
    turn (``None`` before it), as Agent Lightning assigns a final reward; ids go in ``metadata``.
    """
    last = len(t.turns) - 1
    return [
        {
            "prompt": {"token_ids": list(turn.prompt_ids)},
            "response": {"token_ids": list(turn.response_ids), "log_probs": list(turn.response_logprobs)},
            "reward": t.reward.total if k == last else None,
            "metadata": {
                "episode_id": t.episode_id,
                "group_id": t.group_id,
                "turn": turn.index,
                "finish_reason": turn.finish_reason,
                "weight_version": turn.weight_version,
            },
        }
        for k, turn in enumerate(t.turns)
    ]
