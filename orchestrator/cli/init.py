"""``swarm init``: a commented ``swarm.toml`` and an example agent file, where ``swarm run`` finds them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from agent_swarm.orchestrator.cli.discovery import AGENTS, CONFIG_NAME, config_dir

__all__ = ["AGENT_EXAMPLE", "CONFIG_TEMPLATE", "init"]

CONFIG_TEMPLATE = """\
# swarm.toml: read by `swarm run` from the working directory (else from the user config directory,
# ~/.config/swarm/), or given with -c FILE. Every key is optional; the values shown are the defaults.
# A misspelt table or key is an error that names it, never a silent default. Flags override the file.

[swarm]
# max_critical_steps = 32        # the episode's budget, in critical steps (the DAG's longest path)
# max_subagents_per_stage = 16   # assign_task calls admitted per stage
# max_subagent_steps = 8         # step cap of one sub-agent
# max_concurrency = 64           # sub-agents running at once
# subagent_timeout_s = 300       # seconds one sub-agent may run
# episode_timeout_s = 600        # seconds one episode may run (default: no limit)
# orchestrator_sampling = { temperature = 0.7, max_tokens = 1024 }   # default: the model family's

[backend]
# kind = "local"                 # local (llama.cpp in-process), openai, vllm, transformers
# model = "qwen2.5-coder-1.5b"   # a packaged model (swarm models), path/to/model.gguf, or a server's model name
# base_url = "http://localhost:8000/v1"   # openai/vllm: the server (API key: OPENAI_API_KEY)
# timeout = 600                  # seconds per model call

[tools]
# enabled = ["python", "files"]  # built-in tools: python, files, search
# workspace = "workspaces"       # python and files work in WORKSPACE/<episode-id>/
# search_corpus = "docs"         # what the search tool searches (a directory of .md/.txt/.jsonl)
"""

AGENT_EXAMPLE = """\
---
name: summarizer
description: Summarizes one document or topic in three bullet points.
# tools: read_file, list_files   # grant tools the run has (--tools files); none by default
# model: qwen2.5-coder-0.5b      # optional; default: the sub-agents' model
---
You summarize what you are given in exactly three short bullet points. Report only the bullets.
"""


def _write(path: Path, text: str, force: bool) -> str:
    if path.exists() and not force:
        return "kept (exists; --force overwrites)"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return "wrote"


def init(
    user: Annotated[
        bool, typer.Option("--user", help="write into the user config directory instead of the working directory")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="overwrite files that exist")] = False,
) -> None:
    """Write a commented swarm.toml and an example agent file (.swarm/agents/summarizer.md) where
    swarm run finds them: here, or with --user in the user config directory.

    Examples:

    \b
      swarm init
      swarm init --user
      swarm agents list
    """
    root = config_dir() if user else Path.cwd()
    config = root / CONFIG_NAME
    agent = (root / "agents" if user else root / AGENTS) / "summarizer.md"
    out = Console()
    for path, text in ((config, CONFIG_TEMPLATE), (agent, AGENT_EXAMPLE)):
        out.print(f"{_write(path, text, force)} {escape(str(path))}", highlight=False, soft_wrap=True)
