"""Text that did not come from us — answers, errors, tasks, tool and agent names, paths — is printed
as written, never read as Rich markup; help texts show their brackets."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.cli.live import LiveState, summary_table
from agent_swarm.swarm.events import EpisodeStarted, StageStarted, SubagentStarted
from agent_swarm.swarm.records import EpisodeRecord, EpisodeStatus, Task

runner = CliRunner()
TRICKY = "x [/int] and [bold]y[/bold] and [link=file:///etc]z[/link] \\[w]"


class _Answer(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = json.dumps(
            {
                "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": TRICKY}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 3},
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def _plain(renderable: object, width: int = 400) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_an_answer_with_markup_is_printed_as_written_by_swarm_run(tmp_path: Path, server: str) -> None:
    """Regression: `[/int]` in an answer crashed the summary with MarkupError after the episode ran."""
    out = tmp_path / "o"
    r = runner.invoke(
        app, ["run", "-b", "openai", "--base-url", server, "-m", "m", "-q", "-o", str(out), "--no-trace-file", TRICKY]
    )
    assert r.exit_code == 0, r.output
    flat = " ".join(r.stdout.split())
    assert "[/int]" in flat and "[bold]y[/bold]" in flat and "[link=file:///etc]z[/link]" in flat


def test_summary_and_live_view_escape_records_and_events() -> None:
    record = EpisodeRecord(
        episode_id="e[1]",
        task=Task(prompt=TRICKY),
        status=EpisodeStatus.BUDGET_EXHAUSTED,  # an ending with an answer (a failed episode shows none)
        answer=TRICKY,
        error=f"BackendError: {TRICKY}",
    )
    text = _plain(summary_table(record, "/tmp/[runs]/e.json"))
    # The error as written; the answer as Markdown (where "\\[" is an escaped bracket), never as Rich markup.
    assert text.count(TRICKY) == 1 and TRICKY.replace("\\[", "[") in text
    assert "episode e[1]" in text and "/tmp/[runs]/e.json" in text
    live = LiveState()
    live(EpisodeStarted(episode_id="e", task=TRICKY))
    live(StageStarted(index=0, kind="subagents", width=1, critical_so_far=1))
    live(SubagentStarted(agent_id="w[0]", name="w[0]", task="[red]t[/red]", step_cap=3))
    shown = _plain(live)
    assert "w[0]" in shown and "[red]t[/red]" in shown


def _help_texts(group: Any, prefix: str = "swarm") -> Iterator[tuple[str, str]]:
    yield prefix, group.help or ""
    for p in group.params:
        yield f"{prefix} {p.name}", getattr(p, "help", None) or ""
    for name, cmd in getattr(group, "commands", {}).items():  # typer vendors its own click
        yield from _help_texts(cmd, f"{prefix} {name}")


def test_help_texts_lose_nothing_to_markup() -> None:
    """Regression: `swarm rollout --config` rendered as "TOML/JSON: ,  and  tables". Help is plain
    text (no Rich markup), so brackets need no escaping and none is left in."""
    texts = list(_help_texts(typer.main.get_command(app)))
    assert len(texts) > 100  # every command and option was walked
    for where, text in texts:
        assert "\\[" not in text, f"{where}: help {text!r} escapes a bracket that plain help prints as written"


def test_rollout_config_help_names_its_tables() -> None:
    r = runner.invoke(app, ["rollout", "--help"])
    assert "[swarm], [backend] and [reward] tables" in " ".join(r.stdout.split())
