"""`swarm run --tools`, agent files (`--agents DIR`, ./.swarm/agents/), `swarm agents list`, and the
scripting outputs `-p/--print` and `--json-summary`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app

runner = CliRunner()
Reply = tuple[str, list[tuple[str, dict[str, Any]]]]


def _tools_of(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools") or []}


def _system(body: dict[str, Any]) -> str:
    return str(next(m["content"] for m in body["messages"] if m["role"] == "system"))


def _results(body: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]


def _files_policy(body: dict[str, Any]) -> Reply:
    """The orchestrator writes a file itself, then a sub-agent granted `files` reads it back."""
    if "assign_task" not in _tools_of(body):  # the sub-agent
        if not _results(body):
            return "", [("read_file", {"path": "notes.txt"})]
        return f"the file says: {_results(body)[-1]}", []
    done = _results(body)
    if not done:
        return "", [("write_file", {"path": "notes.txt", "content": "swarm was here"})]
    if len(done) == 1:
        return "", [
            ("create_subagent", {"name": "reader", "system_prompt": "Read files.", "tools": ["files"]}),
            ("assign_task", {"agent": "reader", "task": "read notes.txt"}),
        ]
    return done[-1].splitlines()[-1], []


def _run(url: str, out: Path, *extra: str, task: str = "go") -> Any:
    return runner.invoke(
        app,
        ["run", "-b", "openai", "--base-url", url, "-m", "m", "-o", str(out), "--no-trace-file", "-q", *extra, task],
    )


def test_tools_flag_grants_builtin_tools_to_the_orchestrator_and_sub_agents(
    tmp_path: Path, openai_script: Callable[..., Any]
) -> None:
    with openai_script(_files_policy) as srv:
        args = ["run", "-b", "openai", "--base-url", srv.url, "-m", "m", "-o", str(tmp_path), "--no-trace-file"]
        r = runner.invoke(app, [*args, "-q", "--tools", "python,files", "go"], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    orch = next(b for b in srv.requests if "assign_task" in _tools_of(b))
    assert {"python", "write_file", "read_file", "list_files", "search_files"} <= _tools_of(orch)
    sub = next(b for b in srv.requests if "assign_task" not in _tools_of(b))
    assert _tools_of(sub) == {"list_files", "read_file", "write_file", "search_files"}  # granted: files
    flat = " ".join(r.stdout.split())
    assert "swarm was here" in flat
    eid = next(tmp_path.glob("*/episode.json")).parent.name
    workspace = tmp_path / "workspaces" / eid
    assert (workspace / "notes.txt").read_text() == "swarm was here"
    assert f"python, files (workspace {tmp_path / 'workspaces'}/{eid}/)" in flat  # the summary names it


def test_the_config_files_tools_table(tmp_path: Path, openai_script: Callable[..., Any]) -> None:
    ws = tmp_path / "ws"
    cfg = tmp_path / "swarm.toml"
    cfg.write_text(f'[tools]\nenabled = ["files"]\nworkspace = "{ws}"\n')
    with openai_script(_files_policy) as srv:
        r = _run(srv.url, tmp_path / "o", "-c", str(cfg))
    assert r.exit_code == 0, r.output
    assert "python" not in _tools_of(srv.requests[0]) and "write_file" in _tools_of(srv.requests[0])
    assert len(list(ws.glob("*/notes.txt"))) == 1
    cfg.write_text('[tools]\nenabled = ["files"]\nworkdir = "x"\n')
    bad = runner.invoke(app, ["run", "--demo", "capitals", "-c", str(cfg)])
    assert bad.exit_code == 2 and "workdir" in bad.stderr and "search_corpus" in bad.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tools", "python,shell"], "unknown built-in tool(s) 'shell'; choose from python, files, search"),
        (["--tools", "search"], "--tools search needs something to search"),
        (["--search-corpus", "."], "add search to --tools"),
    ],
)
def test_bad_tool_options_are_exit_code_2(args: list[str], message: str) -> None:
    r = runner.invoke(app, ["run", "--demo", "capitals", *args])
    assert r.exit_code == 2 and message in " ".join(r.stderr.split()), r.output


def test_search_tool_over_a_corpus_directory(tmp_path: Path, openai_script: Callable[..., Any]) -> None:
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "otters.md").write_text("# Otters\nSea otters hold hands while they sleep.\n")
    (corpus / "bees.md").write_text("# Bees\nBees dance to show where flowers are.\n")

    def policy(body: dict[str, Any]) -> Reply:
        if not _results(body):
            return "", [("search", {"query": "otters sleep", "k": 1})]
        return _results(body)[-1], []

    with openai_script(policy) as srv:
        r = _run(srv.url, tmp_path / "o", "--tools", "search", "--search-corpus", str(corpus), "--json-summary")
    assert r.exit_code == 0, r.output
    assert "otters.md" in json.loads(r.stdout)["answer"]


AGENT = """---
name: reviewer
description: Reviews a text and lists its problems.
tools: read_file, list_files
---
You review texts. Reply with a bullet list of problems.
"""


def _agent_policy(body: dict[str, Any]) -> Reply:
    if "assign_task" not in _tools_of(body):
        return f"system prompt was: {_system(body)}", []
    if not _results(body):
        return "", [("assign_task", {"agent": "reviewer", "task": "review the README"})]
    return "reviewed", []


def test_agent_files_are_ready_sub_agent_types(tmp_path: Path, openai_script: Callable[..., Any]) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "reviewer.md").write_text(AGENT)
    with openai_script(_agent_policy) as srv:
        r = _run(srv.url, tmp_path / "o", "--agents", str(agents), "--tools", "files", "--json")
    assert r.exit_code == 0, r.output
    orch = next(b for b in srv.requests if "assign_task" in _tools_of(b))
    assert "- reviewer: Reviews a text and lists its problems. (tools: read_file, list_files)" in _system(orch)
    record = json.loads(r.stdout)
    sub = record["stages"][0]["subagents"][0]
    assert sub["status"] == "completed" and sub["name"] == "reviewer"
    assert "You review texts. Reply with a bullet list of problems." in sub["report"]
    sub_request = next(b for b in srv.requests if "assign_task" not in _tools_of(b))
    assert _tools_of(sub_request) == {"read_file", "list_files"}


def test_agents_load_from_dot_swarm_agents_by_default_and_are_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, openai_script: Callable[..., Any]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".swarm" / "agents").mkdir(parents=True)
    (tmp_path / ".swarm" / "agents" / "reviewer.md").write_text(AGENT.replace("tools: read_file, list_files\n", ""))
    (tmp_path / ".swarm" / "agents" / "planner.yaml").write_text(
        "version: 1\nagent:\n  name: planner\n  description: Plans work.\n  system_prompt: Plan it.\n"
    )
    with openai_script(_agent_policy) as srv:
        r = _run(srv.url, tmp_path / "o", "-p")
    assert r.exit_code == 0, r.output
    assert r.stdout == "reviewed\n"
    listed = runner.invoke(app, ["agents", "list"])
    assert listed.exit_code == 0
    assert "reviewer" in listed.stdout and "Reviews a text" in listed.stdout and "planner" in listed.stdout
    rows = [json.loads(line) for line in runner.invoke(app, ["agents", "list", "--json"]).stdout.splitlines()]
    assert [(a["name"], a["system_prompt"]) for a in rows] == [
        ("planner", "Plan it."),
        ("reviewer", "You review texts. Reply with a bullet list of problems."),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no front matter here", "no front matter"),
        ("---\nname: x\nmodl: m\n---\nprompt", "unknown key(s) 'modl'"),
        ("---\nname: x\n---\n   \n", "the system prompt is empty"),
        ("---\nname: [x\n---\nprompt", "not valid YAML"),
        ("---\nname: bad name!\n---\nprompt", "must be 1-64 letters"),
    ],
)
def test_bad_agent_files_name_the_file_and_the_fix(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "a.md").write_text(text)
    for args in (
        ["run", "--demo", "capitals", "--agents", str(tmp_path)],
        ["agents", "list", "--agents", str(tmp_path)],
    ):
        r = runner.invoke(app, args)
        assert r.exit_code == 2, r.output
        assert message in r.stderr and "a.md" in r.stderr


def test_an_agent_granting_a_tool_the_run_lacks_is_exit_code_2(tmp_path: Path) -> None:
    (tmp_path / "reviewer.md").write_text(AGENT)
    r = runner.invoke(app, ["run", "--demo", "capitals", "--agents", str(tmp_path)])
    assert r.exit_code == 2
    assert "reviewer" in r.stderr and "read_file" in r.stderr and "--tools" in r.stderr


def test_print_gives_only_the_answer_and_json_summary_the_small_object(tmp_path: Path) -> None:
    printed = runner.invoke(app, ["run", "--demo", "capitals", "-o", str(tmp_path), "-p", "-q"])
    assert printed.exit_code == 0
    assert printed.stdout.startswith("Capitals found by 9 parallel researchers:\n| result | status |")
    assert "episode" not in printed.stdout and "critical" not in printed.stdout
    summary = runner.invoke(app, ["run", "--demo", "budget", "-o", str(tmp_path), "--json-summary", "-q"])
    data = json.loads(summary.stdout)
    assert set(data) == {
        "episode_id",
        "task_id",
        "status",
        "answer",
        "error",
        "critical_steps",
        "total_steps",
        "wall_time_s",
        "record",
    }
    assert data["status"] == "budget_exhausted" and data["critical_steps"] == 12
    assert Path(data["record"]).is_file()
    both = runner.invoke(app, ["run", "--demo", "capitals", "-p", "--json"])
    assert both.exit_code == 2 and "choose one output" in both.stderr


def test_an_agent_files_model_runs_its_sub_agents(tmp_path: Path, openai_script: Callable[..., Any]) -> None:
    (tmp_path / "reviewer.md").write_text(AGENT.replace("tools: read_file, list_files\n", "model: big-model\n"))
    with openai_script(_agent_policy) as srv:
        r = _run(srv.url, tmp_path / "o", "--agents", str(tmp_path), "--json-summary")
    assert r.exit_code == 0, r.output
    models = {("orchestrator" if "assign_task" in _tools_of(b) else "sub-agent", b["model"]) for b in srv.requests}
    assert models == {("orchestrator", "m"), ("sub-agent", "big-model")}
