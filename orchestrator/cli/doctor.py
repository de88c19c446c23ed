"""``swarm doctor``: what works here and what to install or fix, one line per check.

Checks: the code sandbox (bubblewrap), the optional extras, the local models (installed, and their
sha256 against the pinned one), an OTLP receiver for traces, the config and agent files ``swarm run``
would find, and the records directory. ``fail`` means a feature will refuse to run (exit code 1);
``warn`` means an optional part is missing or off.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent_swarm.orchestrator.cli.discovery import agent_dirs, find_config
from agent_swarm.orchestrator.cli.models import short_install
from agent_swarm.swarm import __version__
from agent_swarm.swarm.errors import ConfigError, UserError

__all__ = ["Check", "checks", "doctor"]

Status = Literal["ok", "warn", "fail"]

EXTRAS: tuple[tuple[str, str, str], ...] = (
    ("cli", "opentelemetry.sdk", "traces exported over OTLP and written to trace.jsonl"),
    ("local", "xllamacpp", "the local backend (llama.cpp in-process)"),
    ("mcp", "mcp", "MCP servers as tools (--mcp-config)"),
    ("search", "bm25s", "the search tool (--tools search)"),
    ("parquet", "pyarrow", "Parquet export of trajectories"),
    ("rl", "transformers", "swarm train and the transformers backend (with torch)"),
    ("ray", "ray", "rollouts and wide stages on Ray (--ray)"),
    ("vllm", "vllm", "the vllm backend in-process"),
)
"""(extra, module it installs, what it enables)."""


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _sandbox() -> Check:
    from agent_swarm.swarm.sandbox import isolation_available

    ok, why = isolation_available()
    if ok:
        return Check("sandbox", "ok", "bubblewrap isolation works (the python tool and code verifier can run)")
    return Check("sandbox", "fail", f"the python tool and the code verifier refuse to run: {why}")


def _extras() -> list[Check]:
    out = []
    for extra, module, what in EXTRAS:
        if _has(module):
            out.append(Check(f"extra {extra}", "ok", what))
        else:
            out.append(Check(f"extra {extra}", "warn", f"not installed ({what}): pip install 'agent-swarm[{extra}]'"))
    return out


def _models(verify: bool) -> list[Check]:
    from agent_swarm.swarm.backends.local import LOCAL_MODELS, verify_models

    # Hashes are cached by (path, size, mtime, inode); --verify reads every file again.
    checked = {c.name: c for c in verify_models(force=verify)}
    out = []
    for name, m in LOCAL_MODELS.items():
        c = checked.get(name)
        if c is None:
            out.append(Check(f"model {name}", "warn", f"not installed: {short_install(m.install)}"))
        else:
            where = f"{c.path}: " if c.path is not None else "installed: "
            context = _context(name) if c.ok else ""
            out.append(Check(f"model {name}", "ok" if c.ok else "fail", where + c.detail + context))
    return out


def _context(name: str) -> str:
    """The engine a default ``swarm run -b local -m NAME`` starts on this machine now: its slots and
    each slot's context, and why (the same plan as the run header: LocalEngine.plan)."""
    from agent_swarm.orchestrator.backend_factory import build_backends
    from agent_swarm.swarm.backends.local import LocalBackend
    from agent_swarm.swarm.config import SwarmConfig

    try:
        orch, _ = build_backends("local", name, fanout=SwarmConfig().max_subagents_per_stage)
        assert isinstance(orch, LocalBackend)
        return (
            f"; context {orch.engine.plan()}; slots: one per sub-agent a default stage runs at once, at most 4 per core"
        )
    except ConfigError as exc:
        return f"; context not sized: {exc}"


def _otlp() -> Check:
    from agent_swarm.orchestrator.cli.telemetry_setup import receiver_listening, resolve_otlp

    try:
        target = resolve_otlp()
    except UserError as exc:
        return Check("traces", "fail", str(exc))
    if target is None:
        return Check("traces", "ok", "OTLP export off (OTEL_TRACES_EXPORTER=none); trace.jsonl files are written")
    host, port = target.address
    if receiver_listening(target, 0.5):
        return Check("traces", "ok", f"an OTLP receiver listens at {target.endpoint}: runs export there")
    return Check(
        "traces",
        "warn",
        f"no OTLP receiver at {host}:{port}: runs write trace.jsonl only (swarm traces push ID sends one later)",
    )


def _config() -> list[Check]:
    from agent_swarm.orchestrator.cli.tools import agent_files
    from agent_swarm.orchestrator.tasks import load_config

    out = []
    path, source = find_config(None)
    if path is None:
        out.append(
            Check("config", "ok", "none found (./swarm.toml or the user config directory; swarm init writes one)")
        )
    else:
        try:
            load_config(path, command="swarm run")
            out.append(Check("config", "ok", f"{path} ({source})"))
        except UserError as exc:
            out.append(Check("config", "fail", f"{path} ({source}): {exc}"))
    dirs = agent_dirs()
    try:
        n = len(agent_files(None))
        where = ", ".join(map(str, dirs)) or "no .swarm/agents/ here or above, none in the user config directory"
        out.append(Check("agent files", "ok", f"{n} agent type(s) from {where}"))
    except UserError as exc:
        out.append(Check("agent files", "fail", str(exc)))
    return out


def _records() -> Check:
    from agent_swarm.orchestrator.store import records_dir

    root = records_dir()
    probe = root if root.exists() else next((p for p in root.parents if p.exists()), Path("/"))
    if os.access(probe, os.W_OK):
        return Check(
            "records", "ok", f"{root} (swarm run writes and swarm traces reads here; SWARM_RECORDS_DIR moves it)"
        )
    return Check("records", "fail", f"{root} is not writable; set SWARM_RECORDS_DIR or pass --out")


def checks(*, verify: bool = False) -> list[Check]:
    """Every check, in the order ``swarm doctor`` prints them."""
    python = f"Python {sys.version.split()[0]}, agent-swarm {__version__}"
    return [
        Check("install", "ok", python),
        _sandbox(),
        *_extras(),
        *_models(verify),
        _otlp(),
        *_config(),
        _records(),
    ]


_STYLE = {"ok": "green", "warn": "yellow", "fail": "red"}


def doctor(
    verify: Annotated[
        bool, typer.Option("--verify", help="rehash assembled model files against the pinned sha256 (slow: GBs)")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="one JSON object per check on stdout")] = False,
) -> None:
    """Check what works here: the code sandbox, extras, local models and their hashes, an OTLP
    receiver, the config and agent files swarm run would use, the records directory.
    Exit codes: 0 nothing failed (warnings are optional parts), 1 a check failed.

    Examples:

    \b
      swarm doctor
      swarm doctor --verify --json
    """
    found = checks(verify=verify)
    if json_out:
        for c in found:
            typer.echo(json.dumps(asdict(c), ensure_ascii=False))
    else:
        t = Table(show_header=False, box=None, pad_edge=False)
        t.add_column("check", style="bold", no_wrap=True)
        t.add_column("status", no_wrap=True)
        t.add_column("detail")
        for c in found:
            t.add_row(escape(c.name), f"[{_STYLE[c.status]}]{c.status}[/]", escape(c.detail))
        Console().print(t)
    raise typer.Exit(1 if any(c.status == "fail" for c in found) else 0)
