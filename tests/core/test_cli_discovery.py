"""Where the CLI finds things nobody named: ./swarm.toml, the user config directory, agent files up to
the repository root; `swarm init` writes them and `swarm doctor` says what works."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.cli.init import CONFIG_TEMPLATE
from agent_swarm.orchestrator.tasks import load_config

runner = CliRunner()


def _budget(tmp_path: Path, *extra: str) -> tuple[int, str]:
    r = runner.invoke(app, ["run", "--demo", "capitals", "--json", "-o", str(tmp_path / "rec"), *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["config"]["max_critical_steps"], r.stderr


def test_swarm_toml_here_then_the_user_config_then_dash_c(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work, user = tmp_path / "work", Path(os.environ["SWARM_CONFIG_DIR"])
    work.mkdir()
    user.mkdir(parents=True)
    monkeypatch.chdir(work)
    assert _budget(tmp_path)[0] == 16  # the demo's own budget: nothing found
    (user / "swarm.toml").write_text("[swarm]\nmax_critical_steps = 9\n")
    budget, note = _budget(tmp_path)
    assert budget == 9 and f"config: {user / 'swarm.toml'} (user config" in " ".join(note.split())
    (work / "swarm.toml").write_text("[swarm]\nmax_critical_steps = 7\n")
    budget, note = _budget(tmp_path)
    assert budget == 7 and "(./swarm.toml;" in note
    other = tmp_path / "other.toml"
    other.write_text("[swarm]\nmax_critical_steps = 5\n")
    budget, note = _budget(tmp_path, "-c", str(other))
    assert budget == 5 and "config:" not in note
    assert "config:" not in _budget(tmp_path, "-q")[1]


def test_a_broken_discovered_config_is_bad_input_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "swarm.toml").write_text("[swram]\n")
    r = runner.invoke(app, ["run", "--demo", "capitals", "-o", str(tmp_path / "rec")])
    assert r.exit_code == 2 and "swram" in r.stderr


def _agent(d: Path, name: str, description: str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.md").write_text(f"---\nname: {name}\ndescription: {description}\n---\nYou are {name}.\n")


def _agents() -> dict[str, str]:
    r = runner.invoke(app, ["agents", "list", "--json"])
    assert r.exit_code == 0, r.output
    return {a["name"]: a["description"] for a in map(json.loads, r.stdout.splitlines())}


def test_agent_files_from_here_up_to_the_repo_root_then_the_user_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside, repo = tmp_path, tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    _agent(outside / ".swarm" / "agents", "outsider", "above the repository: not read")
    _agent(repo / ".swarm" / "agents", "reviewer", "the repository's")
    _agent(repo / "pkg" / ".swarm" / "agents", "reviewer", "the package's, nearer")
    _agent(repo / "pkg" / ".swarm" / "agents", "tester", "the package's")
    _agent(Path(os.environ["SWARM_CONFIG_DIR"]) / "agents", "writer", "the user's")
    (repo / "pkg" / "deep").mkdir()
    monkeypatch.chdir(repo / "pkg" / "deep")
    assert _agents() == {"reviewer": "the package's, nearer", "tester": "the package's", "writer": "the user's"}


def test_init_writes_a_config_that_loads_and_an_agent_swarm_run_offers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["init"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "swarm.toml").read_text() == CONFIG_TEMPLATE
    load_config(tmp_path / "swarm.toml", command="swarm run")  # every table is one swarm run reads
    assert "summarizer" in _agents()
    again = runner.invoke(app, ["init"])
    assert again.exit_code == 0 and again.stdout.count("kept (exists") == 2
    user = runner.invoke(app, ["init", "--user"])
    assert user.exit_code == 0
    assert (Path(os.environ["SWARM_CONFIG_DIR"]) / "agents" / "summarizer.md").is_file()
    run = runner.invoke(app, ["run", "--demo", "capitals", "-q", "-p", "-o", str(tmp_path / "rec")])
    assert run.exit_code == 0, run.output  # the commented config and the example agent run as they are


def _doctor(*extra: str) -> tuple[int, dict[str, dict[str, str]]]:
    r = runner.invoke(app, ["doctor", "--json", *extra])
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    return r.exit_code, {row["name"]: row for row in rows}


def test_doctor_reports_each_part_and_fails_on_what_will_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(
        "SWARM_CACHE_DIR", str(tmp_path / "cache")
    )  # doctor's hash cache lands here, not in the shared one
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    code, rows = _doctor()
    assert {"install", "sandbox", "extra cli", "extra local", "traces", "config", "agent files", "records"} <= set(rows)
    assert any(name.startswith("model ") for name in rows)
    assert rows["traces"]["status"] == "warn" and "swarm traces push" in rows["traces"]["detail"]
    assert code == (1 if any(r["status"] == "fail" for r in rows.values()) else 0)
    (tmp_path / "swarm.toml").write_text("[swarm]\nmax_critcal_steps = 3\n")
    code, rows = _doctor()
    assert code == 1 and rows["config"]["status"] == "fail" and "max_critcal_steps" in rows["config"]["detail"]
    human = runner.invoke(app, ["doctor"], env={"COLUMNS": "80"})
    assert "config" in human.stdout and "fail" in human.stdout


def test_an_all_commented_config_changes_nothing_in_the_demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    before = _budget(tmp_path)[0]
    assert runner.invoke(app, ["init"]).exit_code == 0
    budget, note = _budget(tmp_path)
    assert budget == before == 16 and "config: " in note


def test_eval_rollout_and_train_read_swarm_toml_here_as_run_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "swarm.toml").write_text("[swarm]\nmax_malformed_retries = 5\n")

    r = runner.invoke(app, ["eval", "-w", "wide-lookup", "--split", "train", "-b", "gold", "-n", "1", "--out", "ev"])
    assert r.exit_code == 0, r.output
    assert "(./swarm.toml;" in r.stderr
    episodes = list((tmp_path / "ev").glob("*/episodes/*/*/episode.json"))
    assert episodes and all(json.loads(e.read_text())["config"]["max_malformed_retries"] == 5 for e in episodes)

    (tmp_path / "t.jsonl").write_text('{"prompt": "capitals"}\n')
    r = runner.invoke(app, ["rollout", "-b", "scripted", "-t", "t.jsonl", "-k", "1", "-o", "ro", "-q"])
    assert r.exit_code == 0, r.output
    (line,) = (tmp_path / "ro" / "episodes.jsonl").read_text().splitlines()
    assert json.loads(line)["record"]["config"]["max_malformed_retries"] == 5

    # swarm train reads the same file as its training config: here an invalid [swarm] value, named as such
    (tmp_path / "swarm.toml").write_text('[swarm]\nmax_critical_steps = "many"\n')
    for args in (["train"], ["train", "sft"]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2, r.output
        assert f"{tmp_path / 'swarm.toml'}: invalid training config" in " ".join(r.stderr.split())
        assert "swarm.max_critical_steps" in r.stderr
