"""Config files: every key and table is either used or rejected by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.tasks import load_config
from agent_swarm.swarm.errors import ConfigError

runner = CliRunner()


def _cfg(tmp_path: Path, text: str, name: str = "swarm.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "max_critical_steps = 3\n",
            ["'max_critical_steps'", "[swarm]", "allowed tables: [backend], [reward], [swarm]"],
        ),
        ("[swram]\nmax_critical_steps = 3\n", ["[swram]", "did you mean [swarm]"]),
        ("[swarm]\nmax_critcal_steps = 3\n", ["swarm.max_critcal_steps", "did you mean 'max_critical_steps'"]),
        ("[swarm.orchestrator_sampling]\ntemprature = 0.5\n", ["swarm.orchestrator_sampling.temprature"]),
        ("[backend]\ntimout = 3\n", ["backend.timout", "did you mean 'timeout'", "allowed:"]),
        ("[reward]\nlambda3 = 0.1\n", ["reward.lambda3", "allowed:"]),
        ("backend = 'openai'\n", ["'backend' must be a table"]),
    ],
)
def test_unknown_keys_and_tables_are_rejected_by_name(tmp_path: Path, text: str, expected: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_cfg(tmp_path, text))
    for e in expected:
        assert e in str(info.value), str(info.value)


def test_json_configs_are_checked_the_same_way(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown table \[swarm_config\]"):
        load_config(_cfg(tmp_path, json.dumps({"swarm_config": {}}), "c.json"))


@pytest.mark.parametrize(
    "command",
    [["run", "--demo", "capitals"], ["eval", "-w", "wide-lookup", "--split", "train", "-b", "gold", "-n", "1"]],
)
def test_the_cli_refuses_a_misspelt_table_instead_of_running_with_defaults(tmp_path: Path, command: list[str]) -> None:
    cfg = _cfg(tmp_path, "[swram]\nmax_critical_steps = 3\n")
    r = runner.invoke(app, [*command, "-c", str(cfg), "-o", str(tmp_path / "o")])
    assert r.exit_code == 2, r.output
    assert "[swram]" in r.stderr and "did you mean [swarm]" in r.stderr


def test_the_rollout_cli_refuses_a_top_level_budget(tmp_path: Path) -> None:
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"id": "a", "prompt": "capitals"}) + "\n")
    cfg = _cfg(tmp_path, "max_critical_steps = 3\n")
    r = runner.invoke(app, ["rollout", "-b", "scripted", "-t", str(tasks), "-c", str(cfg), "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and "'max_critical_steps'" in r.stderr and "[swarm]" in r.stderr


def test_swarm_eval_says_reward_is_not_its_table(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "[reward]\nlambda1 = { kind = 'constant', start = 0.5 }\n")
    args = [
        "eval",
        "-w",
        "wide-lookup",
        "--split",
        "train",
        "-b",
        "gold",
        "-n",
        "1",
        "-c",
        str(cfg),
        "-o",
        str(tmp_path / "o"),
    ]
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "[reward]" in r.stderr and "swarm eval" in r.stderr


def test_swarm_run_scores_episodes_with_the_reward_table(tmp_path: Path) -> None:
    """`[reward]` used to be ignored by `swarm run`; now it scores the episode."""
    cfg = _cfg(
        tmp_path,
        "[reward]\nlambda1 = { kind = 'constant', start = 0.5 }\nlambda2 = { kind = 'constant', start = 0.25 }\n"
        "default_verifier = 'instructions'\n"
        "default_verifier_args = { constraints = [{ type = 'contains', phrases = ['Paris'] }] }\n",
    )
    args = ["run", "--demo", "capitals", "-c", str(cfg), "--json", "--no-trace-file", "-o", str(tmp_path / "o")]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.stderr
    record = json.loads(r.stdout)
    reward = record["reward"]
    assert (reward["lambda1"], reward["lambda2"]) == (0.5, 0.25)
    assert reward["r_perf"] == 1.0 and reward["error"] is None


def test_swarm_run_workload_reads_its_config_instead_of_ignoring_it(tmp_path: Path) -> None:
    bad = _cfg(tmp_path, "[swarm]\nmax_critcal_steps = 3\n")
    args = ["run", "-w", "wide-lookup", "-b", "gold", "-o", str(tmp_path / "o"), "-c"]
    r = runner.invoke(app, [*args, str(bad)])
    assert r.exit_code == 2 and "swarm.max_critcal_steps" in r.stderr
    good = _cfg(tmp_path, "[swarm]\nmax_concurrency = 3\n", "good.toml")
    r = runner.invoke(app, [*args, str(good), "--json"])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1])["config"]["max_concurrency"] == 3
