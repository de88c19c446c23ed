"""Built-in tools and agent files for ``swarm run``: ``--tools python,files,search`` (or the config
file's ``[tools]`` table) and ``--agents DIR`` (default ``./.swarm/agents/``).

The tools are registered with the episode's :class:`~agent_swarm.tools.registry.ToolRegistry`, so the
orchestrator may call them itself and ``create_subagent`` may grant them (the ``files`` and
``search`` toolsets by name). ``python`` and ``files`` work in a per-episode workspace,
``WORKSPACE/<episode-id>/`` (default ``OUT/workspaces``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from agent_swarm.orchestrator.agent_files import AgentFile, load_agents
from agent_swarm.orchestrator.cli.discovery import agent_dirs
from agent_swarm.swarm.errors import ConfigError, UserError
from agent_swarm.tools.registry import Tool, Toolset

__all__ = ["BUILTIN_TOOLS", "ToolsConfig", "agent_files", "builtin_tools", "parse_tool_names"]

BUILTIN_TOOLS = {
    "python": "run Python in the sandbox, in the episode workspace (python)",
    "files": "list_files, read_file, write_file, search_files in the episode workspace",
    "search": "search and open over a document collection (--search-corpus DIR or FILE.jsonl)",
}


class ToolsConfig(BaseModel):
    """The config file's ``[tools]`` table; the flags win over it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: tuple[str, ...] = ()
    """Built-in tools: python, files, search."""
    workspace: Path | None = None
    """Per-episode workspaces are created below this (default: OUT/workspaces)."""
    search_corpus: Path | None = None
    """What ``search`` searches: a directory of .md/.txt/.jsonl files, or one .jsonl file."""


def tools_config(table: object, where: str = "the config") -> ToolsConfig:
    try:
        cfg = ToolsConfig.model_validate(table or {})
    except ValidationError as exc:
        e = exc.errors()[0]
        key = ".".join(str(x) for x in e["loc"])
        raise ConfigError(
            f"[tools] table in {where}: {key}: {e['msg']} (keys: enabled, workspace, search_corpus)"
        ) from None
    parse_tool_names(cfg.enabled)
    return cfg


def parse_tool_names(values: Iterable[str]) -> tuple[str, ...]:
    """``["python,files", "search"]`` -> ``("python", "files", "search")``; unknown names are an error."""
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    bad = [n for n in names if n not in BUILTIN_TOOLS]
    if bad:
        raise UserError(
            f"unknown built-in tool(s) {', '.join(map(repr, bad))}; choose from {', '.join(BUILTIN_TOOLS)} "
            "(MCP servers' tools: --mcp-config FILE)"
        )
    return tuple(dict.fromkeys(names))


def builtin_tools(names: Iterable[str], *, search_corpus: Path | None = None) -> list[Tool | Toolset]:
    """The named built-in tools, ready to register."""
    out: list[Tool | Toolset] = []
    for name in names:
        if name == "python":
            from agent_swarm.swarm.backends.local.cpu import usable_cores
            from agent_swarm.tools.builtin.python import python_tool

            out.append(python_tool(max_concurrent=usable_cores()))  # sandboxes at once: the cores we may use
        elif name == "files":
            from agent_swarm.tools.builtin.files import files_toolset

            out.append(files_toolset())
        elif name == "search":
            out.append(_search(search_corpus))
        else:  # parse_tool_names checked the names
            raise UserError(f"unknown built-in tool {name!r}")
    return out


def _search(corpus_path: Path | None) -> Toolset:
    from agent_swarm.tools.builtin.search import Corpus, SearchIndex, search_toolset

    if corpus_path is None:
        raise UserError(
            "--tools search needs something to search: --search-corpus DIR (its .md, .txt and .jsonl files) "
            "or --search-corpus FILE.jsonl (one {id, text, title} object per line)"
        )
    try:
        corpus = Corpus.from_directory(corpus_path) if corpus_path.is_dir() else Corpus.from_jsonl(corpus_path)
        return search_toolset(SearchIndex(corpus))
    except ConfigError as exc:
        raise UserError(f"--search-corpus: {exc}") from None


def agent_files(dirs: Iterable[Path] | None) -> list[AgentFile]:
    """Agent files from ``dirs`` (``--agents``), or the discovered ones
    (:func:`agent_swarm.orchestrator.cli.discovery.agent_dirs`: ``.swarm/agents/`` from here up to the repository
    root, then the user config directory's ``agents/``; the nearest definition of a name wins)."""
    given = list(dirs or ())
    if given:
        return load_agents(*given)
    found: dict[str, AgentFile] = {}
    for d in agent_dirs():
        for a in load_agents(d):
            found.setdefault(a.definition.name, a)
    return list(found.values())
