"""`swarm traces show` names each stage's actions and rejections; `swarm traces list` finds the
episodes of `swarm eval` and `swarm rollout` too; the Jaeger link only for exported runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app

runner = CliRunner()


pytestmark = pytest.mark.usefixtures("cli_env")


def _policy(body: dict[str, Any]) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """Stage 0: a direct tool call that fails, a type, two assignments (one to an unknown type);
    stage 1: answer."""
    if not any(t["function"]["name"] == "assign_task" for t in body.get("tools") or []):
        return "report", []
    if any(m["role"] == "tool" for m in body["messages"]):
        return "All done.", []
    return "", [
        ("read_file", {"path": "missing.txt"}),
        ("create_subagent", {"name": "reader", "system_prompt": "Read and report."}),
        ("assign_task", {"agent": "reader", "task": "read chapter one"}),
        ("assign_task", {"agent": "ghost", "task": "read chapter two"}),
    ]


def _episode(r: Any) -> str:
    return str(json.loads(r.stdout.splitlines()[-1])["episode_id"])


def test_show_names_actions_and_rejections_and_links_jaeger_only_when_exported(
    tmp_path: Path, openai_script: Callable[..., Any], otlp_http: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    args = ["run", "-b", "openai", "--base-url", "", "-m", "m", "-o", str(tmp_path), "-q", "--tools", "files"]
    with openai_script(_policy) as srv:
        args[4] = srv.url
        local = runner.invoke(app, [*args, "--json-summary", "go"])
        assert local.exit_code == 0, local.output
        monkeypatch.delenv("OTEL_TRACES_EXPORTER")
        exported = runner.invoke(app, [*args, "--json-summary", "--otlp-endpoint", otlp_http.url, "go"])
        assert exported.exit_code == 0, exported.output
    shown = runner.invoke(app, ["traces", "show", _episode(local), "-o", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    text = shown.stdout
    assert "read_file failed (ToolError):" in text and "missing.txt" in text
    assert "create reader created" in text
    assert "assign_task → ghost rejected (InvalidAction): unknown sub-agent 'ghost'" in text
    assert "reader-0-0" in text  # the sub-agent that ran has its row
    assert "Jaeger:" not in text and "not exported over OTLP" in text
    linked = runner.invoke(app, ["traces", "show", _episode(exported), "-o", str(tmp_path)])
    assert "Jaeger: http://127.0.0.1:16686/trace/" in linked.stdout
    data = json.loads(runner.invoke(app, ["traces", "show", _episode(local), "-o", str(tmp_path), "--json"]).stdout)
    outcomes = [(a["kind"], a["label"], a["outcome"]) for a in data["stages"][0]["actions"]]
    assert outcomes == [  # in the order the orchestrator called them
        ("tool", "read_file", "failed"),
        ("create", "reader", "created"),
        ("assign", "reader-0-0", "completed"),
        ("assign", "ghost", "rejected"),
    ]


def test_list_includes_eval_and_rollout_episodes(tmp_path: Path) -> None:
    root = tmp_path / "traces"
    r = runner.invoke(app, ["run", "--demo", "capitals", "-o", str(root), "-q", "--no-trace-file"])
    assert r.exit_code == 0, r.output
    eval_args = ["eval", "-w", "wide-lookup", "--split", "train", "-b", "gold", "-n", "1", "--mode", "swarm"]
    ev = runner.invoke(app, [*eval_args, "--out", str(root / "eval")])
    assert ev.exit_code == 0, ev.output
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "capitals", "prompt": "capitals"}) + "\n")
    ro = runner.invoke(
        app, ["rollout", "-b", "scripted", "--tasks", str(tasks), "--group-size", "2", "-o", str(root / "r1"), "-q"]
    )
    assert ro.exit_code == 0, ro.output
    listed = runner.invoke(app, ["traces", "list", "-o", str(root), "--json"])
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert sorted(row["source"] for row in rows) == ["eval", "rollout", "rollout", "run"]
    rollout_row = next(row for row in rows if row["source"] == "rollout")
    assert rollout_row["path"].startswith(str(root / "r1" / "episodes.jsonl"))
    table = runner.invoke(app, ["traces", "list", "-o", str(root)])
    assert "eval" in table.stdout and "rollout" in table.stdout
    shown = runner.invoke(app, ["traces", "show", rollout_row["episode_id"], "-o", str(root)])
    assert shown.exit_code == 0 and "researcher-0-8" in shown.stdout
