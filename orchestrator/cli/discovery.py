"""Where the CLI finds its config and agent files when none are named, as Claude Code and kimi-cli do.

- **Config** (``swarm run``, ``eval``, ``rollout`` and ``train``, through :func:`resolve_config`):
  ``-c FILE`` when given; else ``./swarm.toml``; else ``swarm.toml`` in the user config directory
  (:func:`config_dir`). The first found is used whole (files are not merged), and the command says
  which one on stderr.
- **Agent files**: ``--agents DIR`` when given; else every ``.swarm/agents/`` from the working
  directory up to the repository root (the first directory holding ``.git``; just the working directory
  outside a repository), then ``agents/`` in the user config directory. The nearest definition of a
  name wins, as a project's own agents override a user's.
- **Records**: :func:`agent_swarm.orchestrator.store.records_dir` (``$SWARM_RECORDS_DIR``, else the user data
  directory), for writing and for ``swarm traces``.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape

from agent_swarm.orchestrator.environment import environment

__all__ = ["CONFIG_NAME", "agent_dirs", "config_dir", "find_config", "resolve_config"]

CONFIG_NAME = "swarm.toml"
AGENTS = Path(".swarm") / "agents"


def config_dir() -> Path:
    """The user config directory: ``$SWARM_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/swarm``, else ``~/.config/swarm``."""
    return environment().config_dir


def find_config(explicit: Path | None, cwd: Path | None = None) -> tuple[Path | None, str]:
    """(the config file to use or ``None``, where it came from: ``-c``, ``./swarm.toml`` or ``user config``)."""
    if explicit is not None:
        return explicit, "-c"
    here = (cwd or Path.cwd()) / CONFIG_NAME
    if here.is_file():
        return here, f"./{CONFIG_NAME}"
    user = config_dir() / CONFIG_NAME
    if user.is_file():
        return user, "user config"
    return None, ""


def resolve_config(explicit: Path | None, *, quiet: bool = False) -> Path | None:
    """The config file a command uses (:func:`find_config`); one it found rather than was given is
    named on stderr, unless ``quiet``."""
    path, found_in = find_config(explicit)
    if path is not None and found_in != "-c" and not quiet:
        Console(stderr=True).print(
            f"[dim]config: {escape(str(path))} ({found_in}; -c FILE picks another)[/dim]", soft_wrap=True
        )
    return path


def _repo_chain(start: Path) -> list[Path]:
    """``start`` and its parents up to the repository root (``start`` alone outside a repository)."""
    chain: list[Path] = []
    for d in (start, *start.parents):
        chain.append(d)
        if (d / ".git").exists():
            return chain
    return [start]


def agent_dirs(cwd: Path | None = None) -> list[Path]:
    """The agent file directories that exist, nearest first: ``.swarm/agents/`` from ``cwd`` up to the
    repository root, then the user config directory's ``agents/``."""
    start = (cwd or Path.cwd()).resolve()
    dirs = [d / AGENTS for d in _repo_chain(start)] + [config_dir() / "agents"]
    return [d for d in dirs if d.is_dir()]
