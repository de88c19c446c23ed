"""Loading tasks and configs from files, with errors that name the file, the line and the fix."""

from __future__ import annotations

import difflib
import json
import sys
import tomllib
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import ConfigError, TaskFileError, UnknownNameError, validation_problems
from agent_swarm.swarm.records import Task

__all__ = [
    "CONFIG_TABLES",
    "LARGE_TASK_CHARS",
    "TaskProblem",
    "large_task_warning",
    "load_config",
    "load_task_file",
    "task_from",
]

LARGE_TASK_CHARS = 256_000
"""Task prompts longer than this get a :class:`~agent_swarm.swarm.errors.LargeInputWarning`
(see :func:`large_task_warning`)."""


def task_from(obj: Any, path: str, line: int | None) -> Task:
    """One task of a task file, whichever command reads it: a JSON object (``task`` is an alias of
    ``prompt``) or a bare string (the prompt). The one rule for keys a task does not have: they go into
    its ``metadata`` (``{"prompt": "hi", "difficulty": "easy"}`` → ``metadata.difficulty``; an explicit
    ``metadata`` entry wins). Raises :class:`TaskFileError` naming the file and line."""
    if isinstance(obj, str):
        obj = {"prompt": obj}
    if not isinstance(obj, dict):
        raise TaskFileError(f"a task must be a JSON object with a 'prompt', got {type(obj).__name__}", path, line)
    if "prompt" not in obj and "task" in obj:  # accept the common alias
        obj = {**obj, "prompt": obj["task"]}
        obj.pop("task")
    extra = {k: v for k, v in obj.items() if k not in Task.model_fields}
    metadata = obj.get("metadata") or {}
    if extra and isinstance(metadata, dict):
        obj = {k: v for k, v in obj.items() if k in Task.model_fields}
        obj["metadata"] = {**extra, **metadata}
    try:
        return Task.model_validate(obj)
    except ValidationError as exc:
        raise TaskFileError(f"invalid task: {validation_problems(exc, 'task')}", path, line) from None


def large_task_warning(task: Task) -> str | None:
    """What to tell the user about a task too large to run without surprise, or ``None``.

    Every orchestrator turn records the exact token ids of its whole prompt (RL trajectories need
    them, never re-tokenized), and the prompt holds the task: a 1 MB task makes each turn's record
    about 1–5 MB (the trajectory repeats it), and each sub-agent step's request carries it too.
    """
    n = len(task.prompt)
    if n <= LARGE_TASK_CHARS:
        return None
    return (
        f"task {task.id or '(no id)'!r} is {n / 1e6:.1f} MB of text: every orchestrator turn records its whole "
        "prompt's token ids (exact ids for RL), so each episode's record grows by about that much per turn, "
        "and trajectories.jsonl repeats it; give large inputs to the agents as a file or through a tool"
    )


class TaskProblem(BaseModel):
    """A task of a task file that was skipped: the file, the line it starts on, and why."""

    model_config = ConfigDict(frozen=True)

    path: str
    line: int
    error: str


def load_task_file(
    path: Path, *, on_malformed: Literal["skip", "fail"] = "skip", workload: str | None = None
) -> tuple[list[Task], list[TaskProblem]]:
    """Read a task file, the one loader every command uses (``run``, ``rollout``, ``train``).

    ``.jsonl``: one task a line (``{"id", "prompt", "verifier", "verifier_args", "metadata"}``);
    ``.json``: one task object or a list of them; any other file: its text is one prompt; ``-`` reads
    standard input (JSONL when every line is a JSON object, else one prompt). Keys a task does not
    have go into its ``metadata`` (:func:`task_from`). A task without an id gets ``<file stem>-<n>``:
    ``n`` is its line in a ``.jsonl`` file (stable when other lines are blank or skipped), its place in
    a ``.json`` list (from 1); a text file's prompt is ``<file stem>`` (standard input's stem is
    ``stdin``). A bad task (invalid JSON, no prompt, unknown verifier or bad verifier arguments, an id
    used before; with ``workload``, a task that is not that workload's by its ``metadata.workload``,
    as ``swarm eval --export-tasks`` writes them) raises :class:`TaskFileError` naming the file and
    line with ``on_malformed="fail"``, or is reported in the returned problems and skipped; a missing,
    empty or unreadable file, or one with no usable task, always raises.
    """
    source, stem, suffix, data = _read_source(path)
    tasks: list[Task] = []
    problems: list[TaskProblem] = []
    seen: set[str] = set()
    for line, default_id, obj, err in _entries(data, source, suffix, stem):
        task: Task | None = None
        if err is None:
            try:
                task = task_from(obj, source, line)  # the task loader's one rule for unknown keys
            except TaskFileError as exc:
                err = exc.message
            else:
                task = task if task.id else task.model_copy(update={"id": default_id})
                err = _task_problem(task, seen, workload)
        if err is not None:
            if on_malformed == "fail":
                raise TaskFileError(err, source, line)
            problems.append(TaskProblem(path=source, line=line, error=err))
            continue
        assert task is not None
        seen.add(task.id)
        tasks.append(task)
    if not tasks:
        first = f"; line {problems[0].line}: {problems[0].error}" if problems else ""
        raise TaskFileError(f"task file holds no usable tasks ({len(problems)} malformed{first})", source)
    return tasks, problems


def _read_source(path: Path) -> tuple[str, str, str, bytes]:
    """(name in messages, id stem, format suffix, bytes) of a task file, or of standard input for ``-``."""
    p = str(path)
    if p == "-":
        data = sys.stdin.read().encode("utf-8")
        lines = [line.strip() for line in data.splitlines() if line.strip()]
        suffix = ".jsonl" if lines and all(line.startswith(b"{") for line in lines) else ".txt"
        source, stem = "<stdin>", "stdin"
    else:
        if not path.exists():
            raise TaskFileError("task file does not exist; check the path", p)
        if path.is_dir():
            raise TaskFileError("task file is a directory; pass a .jsonl, .json or text file", p)
        data, suffix, source, stem = path.read_bytes(), path.suffix.lower(), p, path.stem
    if not data.strip():
        raise TaskFileError("task file is empty", source)
    return source, stem, suffix, data


def _entries(data: bytes, source: str, suffix: str, stem: str) -> Iterator[tuple[int, str, Any, str | None]]:
    """(line, id for a task without one, parsed value, problem) of each task in a task file's bytes."""
    if suffix == ".jsonl":
        for lineno, raw in enumerate(data.splitlines(), start=1):
            if raw.strip():
                yield (lineno, f"{stem}-{lineno}", *_json_line(raw))
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise TaskFileError("task file is not UTF-8 text", source) from None
    if suffix != ".json":
        yield 1, stem, text.strip(), None
        return
    for n, (line, obj) in enumerate(_json_items(text, source), start=1):
        yield line, f"{stem}-{n}", obj, None


def _json_line(raw: bytes) -> tuple[Any, str | None]:
    """A JSONL line's value, or why it has none."""
    try:
        return json.loads(raw.decode("utf-8")), None
    except UnicodeDecodeError:
        return None, "line is not UTF-8 text"
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON ({exc.msg} at column {exc.colno})"


def _json_items(text: str, source: str) -> list[tuple[int, Any]]:
    """(line it starts on, value) of a ``.json`` task file's one object, or of each item of its list."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TaskFileError(f"invalid JSON ({exc.msg} at column {exc.colno})", source, exc.lineno) from None
    start = len(text) - len(text.lstrip())
    if not isinstance(obj, list):
        return [(text.count("\n", 0, start) + 1, obj)]
    decoder, pos, items = json.JSONDecoder(), start + 1, []
    for value in obj:  # find where each item starts, for the line its problems name
        while text[pos] in " \t\r\n,":
            pos += 1
        items.append((text.count("\n", 0, pos) + 1, value))
        pos = decoder.raw_decode(text, pos)[1]
    return items


def _task_problem(task: Task, seen: set[str], workload: str | None) -> str | None:
    """What is wrong with a parsed task: an id used before, another workload's task where ``workload``'s
    are read, or arguments its verifier does not take."""
    if task.id in seen:
        return f"duplicate task id {task.id!r} (ids name episodes and rollout groups; make them unique)"
    owner = task.metadata.get("workload")
    if workload is not None and owner != workload:
        return (
            f"task {task.id!r} is not a {workload} task (metadata.workload={owner!r}); "
            "write workload task files with swarm eval --export-tasks"
        )
    if task.verifier is None:
        return None
    from agent_swarm.swarm.verifiers import validate_verifier_args  # only for tasks that name a verifier

    try:
        validate_verifier_args(task.verifier, task.verifier_args)
    except (UnknownNameError, ConfigError) as exc:
        return str(exc)
    return None


CONFIG_TABLES: dict[str, str] = {
    "swarm": "budgets, widths, timeouts, sampling, tool allow-lists (SwarmConfig)",
    "backend": "model backend options (kind, model, base_url, timeout, max_concurrency, …)",
    "reward": "the PARL reward: lambda1/lambda2 schedules, parallel/finish terms, default verifier",
    "tools": "built-in tools for swarm run: enabled (python, files, search), workspace, search_corpus",
}
"""The top-level tables a config file may hold, and what each sets."""


def _closest(name: str, options: Collection[str]) -> str | None:
    match = difflib.get_close_matches(name, list(options), n=1, cutoff=0.6)
    return match[0] if match else None


def _unknown_key(where: str, key: str, allowed: Collection[str]) -> str:
    """``unknown key swarm.x (did you mean 'y'?); allowed: a, b, c``."""
    guess = _closest(key, allowed)
    hint = f" (did you mean {guess!r}?)" if guess else ""
    return f"unknown key {where}{key}{hint}; allowed: {', '.join(sorted(allowed))}"


def model_problems(exc: ValidationError, prefix: str, model: type[BaseModel]) -> str:
    """Validation errors as ``prefix.loc: message`` on one line, unknown keys with the allowed ones
    named (the closest first); ``prefix`` may be empty."""
    out = []
    for e in exc.errors(include_url=False):
        loc = [str(x) for x in e["loc"]]
        if e["type"] == "extra_forbidden":
            owner: Any = model
            for part in loc[:-1]:  # walk to the nested model that rejected the key
                field = getattr(owner, "model_fields", {}).get(part)
                ann = getattr(field, "annotation", None)
                owner = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
                if owner is None:
                    break
            allowed = list(getattr(owner, "model_fields", {})) if owner is not None else []
            where = ".".join(p for p in [prefix, *loc[:-1]] if p) + ("." if prefix or loc[:-1] else "")
            out.append(_unknown_key(where, loc[-1], allowed) if allowed else f"{where}{loc[-1]}: unknown key")
        else:
            out.append(f"{'.'.join(p for p in [prefix, *loc] if p)}: {e['msg']}")
    return "; ".join(out)


def _read_config(path: Path) -> Any:
    """The parsed TOML or JSON of a config file (a missing file, YAML or bad syntax: :class:`ConfigError`)."""
    p = str(path)
    if not path.is_file():
        raise ConfigError(f"config file {p} does not exist")
    if path.suffix.lower() in (".yaml", ".yml"):
        raise ConfigError(
            f"config file {p} is YAML; swarm reads TOML (.toml) or JSON (.json) configs: write it as TOML "
            "(`swarm init` writes a commented swarm.toml)"
        )
    try:
        data = tomllib.loads(path.read_text()) if path.suffix == ".toml" else json.loads(path.read_text())
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"config file {p} is not valid {path.suffix.lstrip('.') or 'JSON'}: {exc}") from None
    return data


def load_config(
    path: Path, *, tables: Collection[str] = tuple(CONFIG_TABLES), command: str = "this command"
) -> tuple[SwarmConfig, dict[str, Any]]:
    """Read a TOML or JSON config: the ``[swarm]`` table is a :class:`SwarmConfig`; the other tables
    (``[backend]``, ``[reward]``) are returned as dicts for the CLI to interpret.

    Nothing is silently ignored: a top-level key that is not one of ``tables`` (a misspelt table, a
    ``[swarm]`` key written at the top level, a table ``command`` does not read) and an unknown key
    inside ``[swarm]``, ``[backend]`` or ``[reward]`` raise :class:`ConfigError` naming the key and
    the allowed ones.
    """
    p = str(path)
    data = _read_config(path)
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must hold a table/object at the top level")
    listed = ", ".join(f"[{t}]" for t in sorted(tables))
    for key, value in data.items():
        if key in CONFIG_TABLES and key not in tables:
            raise ConfigError(
                f"config file {p}: {command} does not read the [{key}] table ({CONFIG_TABLES[key]}); "
                f"remove it or use a config with only {listed}"
            )
        if key not in tables:
            if key in SwarmConfig.model_fields:
                hint = f"; {key!r} belongs in the [swarm] table"
            else:
                guess = _closest(key, tables)
                hint = f"; did you mean [{guess}]?" if guess else ""
            what = "table" if isinstance(value, dict) else "top-level key"
            shown = f"[{key}]" if isinstance(value, dict) else repr(key)
            raise ConfigError(f"config file {p}: unknown {what} {shown}{hint}; allowed tables: {listed}")
        if not isinstance(value, dict):
            raise ConfigError(f"config file {p}: {key!r} must be a table ([{key}]), got {type(value).__name__}")
    if "backend" in data:
        from agent_swarm.orchestrator.backend_factory import BACKEND_TABLE_KEYS

        for key in data["backend"]:
            if key not in BACKEND_TABLE_KEYS:
                raise ConfigError(f"config file {p}: {_unknown_key('backend.', key, BACKEND_TABLE_KEYS)}")
    if "reward" in data:
        from agent_swarm.swarm.rl.rewards import RewardConfig

        try:
            RewardConfig.model_validate(data["reward"])
        except ValidationError as exc:
            raise ConfigError(f"invalid config in {p}: {model_problems(exc, 'reward', RewardConfig)}") from None
    swarm_part = data.pop("swarm", {})
    try:
        cfg = SwarmConfig.model_validate(swarm_part)
    except ValidationError as exc:
        raise ConfigError(f"invalid config in {p}: {model_problems(exc, 'swarm', SwarmConfig)}") from None
    return cfg, data
