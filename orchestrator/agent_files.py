"""Sub-agent types from definition files, as Claude Code (``.claude/agents/*.md``) and kimi-cli
(agent YAML) users write them.

A Markdown file holds YAML front matter and the system prompt as its body::

    ---
    name: researcher
    description: Looks facts up and reports them with sources.
    tools: search, read_file        # or a YAML list
    model: qwen2.5-coder-1.5b       # optional: a sub-agent model; "inherit" = the default one
    ---
    You research one question and answer it in two sentences, citing the document ids.

A ``.yaml``/``.yml`` file holds the same keys with the prompt under ``system_prompt`` (or a file
named by ``system_prompt_path``, relative to the YAML file); kimi-cli's ``agent:`` wrapper is
accepted. Each file is one :class:`~agent_swarm.swarm.records.AgentDefinition`, offered to the orchestrator as a
ready sub-agent type (:class:`~agent_swarm.orchestrator.engine.Orchestrator` ``agents=``).

Nothing is silently ignored: a file without a name or prompt, an unknown key, a duplicate name or
unreadable YAML raises :class:`~agent_swarm.swarm.errors.ConfigError` naming the file and what to fix.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.records import AgentDefinition

__all__ = ["AGENT_FILE_KEYS", "DEFAULT_AGENTS_DIR", "AgentFile", "load_agent_file", "load_agents"]

DEFAULT_AGENTS_DIR = Path(".swarm") / "agents"
"""Where ``swarm run`` looks for agent files when ``--agents`` is not given."""

AGENT_FILE_KEYS = ("name", "description", "tools", "model", "system_prompt", "system_prompt_path")
_IGNORED = ("color",)  # Claude Code's display colour: nothing to do with the agent's behaviour
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)(.*)\Z", re.DOTALL)


class AgentFile:
    """An agent definition and the file it came from."""

    __slots__ = ("definition", "path")

    def __init__(self, definition: AgentDefinition, path: Path) -> None:
        self.definition = definition
        self.path = path


def _tools(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        items = [t.strip() for t in value.split(",")]
    elif isinstance(value, list) and all(isinstance(t, str) for t in value):
        items = [t.strip() for t in value]
    else:
        raise ConfigError(f"{where}: 'tools' must be a list of tool names or a comma-separated string")
    return tuple(dict.fromkeys(t for t in items if t))


def _definition(meta: dict[str, Any], body: str, path: Path) -> AgentDefinition:
    where = str(path)
    unknown = sorted(set(meta) - set(AGENT_FILE_KEYS) - set(_IGNORED))
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(AGENT_FILE_KEYS)}"
        )
    name = meta.get("name", path.stem)
    if not isinstance(name, str) or not _NAME.match(name.strip()):
        raise ConfigError(
            f"{where}: name {name!r} must be 1-64 letters, digits, '_', '-' or '.', starting with a letter or digit"
        )
    prompt = body
    if "system_prompt" in meta or "system_prompt_path" in meta:
        if body.strip():
            raise ConfigError(f"{where}: give the system prompt once: as the body or as system_prompt, not both")
        if "system_prompt_path" in meta:
            target = path.parent / str(meta["system_prompt_path"])
            try:
                prompt = target.read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"{where}: cannot read system_prompt_path {str(target)!r}: {exc.strerror}") from None
        else:
            prompt = meta["system_prompt"]
    if not isinstance(prompt, str) or not prompt.strip():
        raise ConfigError(f"{where}: the system prompt is empty; write it below the front matter")
    description = meta.get("description") or ""
    if not isinstance(description, str):
        raise ConfigError(f"{where}: 'description' must be text")
    model = meta.get("model")
    if model is not None and not isinstance(model, str):
        raise ConfigError(f"{where}: 'model' must be a model name")
    return AgentDefinition(
        name=name.strip(),
        system_prompt=prompt.strip(),
        tools=_tools(meta.get("tools"), where),
        model=None if model in (None, "", "inherit") else model,
        description=description.strip(),
    )


def _yaml(text: str, where: str) -> Any:
    import yaml  # only when an agent file is read: most runs find none

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: the front matter is not valid YAML: {str(exc).splitlines()[0]}") from None


def load_agent_file(path: Path) -> AgentDefinition:
    """One agent definition from a ``.md`` (front matter + prompt) or ``.yaml``/``.yml`` file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read agent file {path}: {exc}") from None
    if path.suffix in (".yaml", ".yml"):
        data = _yaml(text, str(path))
        if isinstance(data, dict) and isinstance(data.get("agent"), dict):  # kimi-cli: {version, agent: {...}}
            data = data["agent"]
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: an agent YAML file holds a mapping of {', '.join(AGENT_FILE_KEYS)}")
        return _definition(data, "", path)
    m = _FRONT.match(text.lstrip("\ufeff"))
    if m is None:
        raise ConfigError(
            f"{path}: no front matter; start the file with a '---' line, then name/description/tools/model, "
            "then '---' and the system prompt"
        )
    meta = _yaml(m.group(1), str(path)) or {}
    if not isinstance(meta, dict):
        raise ConfigError(f"{path}: the front matter must be 'key: value' lines")
    return _definition(meta, m.group(2), path)


def load_agents(*dirs: Path) -> list[AgentFile]:
    """Every agent file (``*.md``, ``*.yaml``, ``*.yml``) in ``dirs``, sorted by name within each
    directory. A name defined twice is an error naming both files."""
    out: list[AgentFile] = []
    seen: dict[str, Path] = {}
    for d in dirs:
        if not d.is_dir():
            raise ConfigError(f"agents directory {d} does not exist (or is not a directory)")
        for path in sorted(p for p in d.iterdir() if p.is_file() and p.suffix in (".md", ".yaml", ".yml")):
            if path.name.lower() == "readme.md":
                continue
            definition = load_agent_file(path)
            if definition.name in seen:
                raise ConfigError(
                    f"sub-agent type {definition.name!r} is defined twice: {seen[definition.name]} and {path}"
                )
            seen[definition.name] = path
            out.append(AgentFile(definition, path))
    return out
