"""Loading tasks and configs from files, with errors that name the file, the line and the fix."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.config import SwarmConfig
from swarm.errors import ConfigError, TaskFileError
from swarm.records import Task

__all__ = ["load_config", "load_tasks", "parse_task_line"]


def _task_from(obj: Any, path: str, line: int | None) -> Task:
    if isinstance(obj, str):
        obj = {"prompt": obj}
    if not isinstance(obj, dict):
        raise TaskFileError(f"a task must be a JSON object with a 'prompt', got {type(obj).__name__}", path, line)
    if "prompt" not in obj and "task" in obj:  # accept the common alias
        obj = {**obj, "prompt": obj["task"]}
        obj.pop("task")
    try:
        return Task.model_validate(obj)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'task'}: {e['msg']}" for e in exc.errors())
        raise TaskFileError(f"invalid task: {problems}", path, line) from None


def parse_task_line(text: str, path: str, line: int) -> Task:
    """Parse one JSONL line into a task (raises TaskFileError naming the line)."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TaskFileError(f"invalid JSON ({exc.msg} at column {exc.colno})", path, line) from None
    return _task_from(obj, path, line)


def load_tasks(path: Path) -> list[Task]:
    """Read tasks from ``.jsonl`` (one per line), ``.json`` (object or list) or any text file (one prompt)."""
    p = str(path)
    if not path.exists():
        raise TaskFileError("task file does not exist; check the path", p)
    if path.is_dir():
        raise TaskFileError("task file is a directory; pass a .jsonl, .json or text file", p)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TaskFileError("task file is not UTF-8 text", p) from None
    if not text.strip():
        raise TaskFileError("task file is empty", p)
    tasks: list[Task] = []
    if path.suffix == ".jsonl":
        for i, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                tasks.append(parse_task_line(line, p, i))
    elif path.suffix == ".json":
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TaskFileError(f"invalid JSON ({exc.msg})", p, exc.lineno) from None
        items = obj if isinstance(obj, list) else [obj]
        tasks = [_task_from(o, p, None) for o in items]
    else:
        tasks = [Task(id=path.stem, prompt=text.strip())]
    if not tasks:
        raise TaskFileError("task file holds no tasks", p)
    return [t if t.id else t.model_copy(update={"id": f"{path.stem}-{i}"}) for i, t in enumerate(tasks)]


def load_config(path: Path) -> tuple[SwarmConfig, dict[str, Any]]:
    """Read a TOML or JSON config: the ``[swarm]`` table is a :class:`SwarmConfig`; everything else
    (e.g. ``[backend]``) is returned as a dict for the CLI to interpret."""
    p = str(path)
    if not path.is_file():
        raise ConfigError(f"config file {p} does not exist")
    try:
        data = tomllib.loads(path.read_text()) if path.suffix == ".toml" else json.loads(path.read_text())
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"config file {p} is not valid {path.suffix.lstrip('.') or 'JSON'}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must hold a table/object at the top level")
    swarm_part = data.pop("swarm", {})
    try:
        cfg = SwarmConfig.model_validate(swarm_part)
    except ValidationError as exc:
        problems = "; ".join(f"swarm.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"invalid config in {p}: {problems}") from None
    return cfg, data
