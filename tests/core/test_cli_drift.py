"""The drift test: ``swarm run``, ``swarm eval`` and ``swarm rollout`` resolve the same flags, config file
and environment variables to the same SwarmConfig and the same sampling of both roles.

Each command runs through the CLI (typer's runner) on the same workload task; the config each episode
ran with is read back from what the command wrote (the record), and a model backend's sampling from the
requests a scripted OpenAI-compatible server received. Seeds are compared by each command's own rule
(rollout derives one sampling seed per sample from its run seed).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from orchestrator.cli import app

runner = CliRunner()

CONFIG = """\
[swarm]
max_concurrency = 5
subagent_timeout_s = 77.0
[swarm.subagent_sampling]
temperature = 0.0
top_p = 0.9
"""
FLAGS = ("-w", "deep-lookup", "--split", "train", "-n", "1", "--max-critical-steps", "9", "--episode-timeout", "120")
SAMPLING_FLAGS = ("--temperature", "0.2", "--max-tokens", "99", "--seed", "0")
ROLES = ("orchestrator_sampling", "subagent_sampling")


def _configs(tmp_path: Path, env: dict[str, str], *extra: str) -> dict[str, dict[str, Any]]:
    """Each command's recorded episode config for the same flags, config file and environment."""
    cfg = tmp_path / "swarm.toml"
    cfg.write_text(CONFIG)
    flags = [*FLAGS, "-c", str(cfg), *extra]
    out: dict[str, dict[str, Any]] = {}
    r = runner.invoke(app, ["run", *flags, "--json", "-q", "-o", str(tmp_path / "run")], env=env)
    assert r.exit_code == 0, r.output
    out["run"] = json.loads(r.stdout)["config"]
    ev = tmp_path / "eval"
    r = runner.invoke(app, ["eval", *flags, "--mode", "swarm", "--json", "-q", "-o", str(ev), "--run-id", "x"], env=env)
    assert r.exit_code == 0, r.output
    out["eval"] = json.loads(next((ev / "x" / "episodes").rglob("episode.json")).read_text())["config"]
    ro = tmp_path / "rollout"
    r = runner.invoke(app, ["rollout", *flags, "-k", "1", "--json", "-q", "-o", str(ro)], env=env)
    assert r.exit_code == 0, r.output
    entry = json.loads((ro / "episodes.jsonl").read_text().splitlines()[0])
    # rollout's one documented difference: each sample's orchestrator samples with a seed derived from --seed
    assert entry["record"]["config"]["orchestrator_sampling"]["seed"] == entry["seed"]
    out["rollout"] = entry["record"]["config"]
    return out


def _seedless(config: dict[str, Any]) -> dict[str, Any]:
    return {**config, **{role: {**config[role], "seed": None} for role in ROLES}}


def _assert_same(configs: dict[str, dict[str, Any]]) -> None:
    """The same config in every command; seeds by each command's rule: ``--seed`` is run's and eval's
    sampling seed, and rollout's run seed (each sample's orchestrator seed derives from it; its frozen
    sub-agents keep the config's)."""
    assert configs["run"] == configs["eval"], "swarm run and swarm eval resolved different configs"
    run = _seedless(configs["run"])
    for name in ("eval", "rollout"):
        other = _seedless(configs[name])
        diff = {k: (run.get(k), other.get(k)) for k in run.keys() | other.keys() if run.get(k) != other.get(k)}
        assert not diff, f"swarm run and swarm {name} resolved different configs: {diff}"


def test_a_scripted_policy_resolves_the_same_config_in_every_command(tmp_path: Path) -> None:
    # The backend comes from the environment. A gold policy samples nothing, but its sampling keys the
    # sub-agent replay cache: every command puts the sampling flags on it (rollout did, alone).
    configs = _configs(tmp_path, {"SWARM_BACKEND": "gold"}, *SAMPLING_FLAGS)
    _assert_same(configs)
    run = configs["run"]
    assert (run["max_critical_steps"], run["max_concurrency"], run["episode_timeout_s"]) == (9, 5, 120.0)
    assert run["subagent_timeout_s"] == 77.0 and run["subagent_sampling"]["top_p"] == 0.9
    for c in configs.values():
        assert [(c[r]["temperature"], c[r]["max_tokens"]) for r in ROLES] == [(0.2, 99)] * 2
    assert configs["eval"]["subagent_sampling"]["seed"] == 0  # a typed --seed is on top of the config file's


def test_a_model_backend_resolves_the_same_config_and_sampling_in_every_command(
    tmp_path: Path, openai_script: Callable[..., Any]
) -> None:
    with openai_script(lambda body: ("ANSWER: Anya Lee", [])) as srv:
        env = {"SWARM_BACKEND": "openai", "SWARM_BASE_URL": f"{srv.url}/v1", "SWARM_MODEL": "served-model"}
        configs = _configs(tmp_path, env, *SAMPLING_FLAGS)
        sent = [(b["temperature"], b["max_tokens"], b.get("top_p", 1.0)) for b in srv.requests]
    _assert_same(configs)
    for c in configs.values():
        assert {k: c["orchestrator_sampling"][k] for k in ("temperature", "max_tokens", "top_p")} == {
            "temperature": 0.2,
            "max_tokens": 99,
            "top_p": 1.0,
        }
        # the config file sets the sub-agents' sampling; the flags go on top of it
        assert {k: c["subagent_sampling"][k] for k in ("temperature", "max_tokens", "top_p")} == {
            "temperature": 0.2,
            "max_tokens": 99,
            "top_p": 0.9,
        }
    assert sent == [(0.2, 99, 1.0)] * 3  # what the server was asked, once per command
    assert configs["eval"]["subagent_sampling"]["seed"] == 0  # a typed --seed is on top of the config file's
    assert configs["rollout"]["subagent_sampling"]["seed"] is None


def test_every_command_resolves_flags_over_the_backend_table_alike(
    tmp_path: Path, openai_script: Callable[..., Any]
) -> None:
    # -m over the config's [backend] model: eval and rollout crashed (model given twice to the factory)
    cfg = tmp_path / "backend.toml"
    cfg.write_text('[backend]\nmodel = "from-file"\nsubagent_model = "file-workers"\n')
    flags = [*FLAGS, "-c", str(cfg), "-m", "flag-model"]
    with openai_script(lambda body: ("ANSWER: Anya Lee", [])) as srv:
        env = {"SWARM_BACKEND": "openai", "SWARM_BASE_URL": f"{srv.url}/v1"}
        commands = [
            ["run", *flags, "--json", "-q", "-o", str(tmp_path / "run")],
            ["eval", *flags, "--mode", "swarm", "--json", "-q", "-o", str(tmp_path / "eval")],
            ["rollout", *flags, "-k", "1", "--json", "-q", "-o", str(tmp_path / "rollout")],
        ]
        for argv in commands:
            r = runner.invoke(app, argv, env=env)
            assert r.exit_code == 0, f"{argv[0]}: {r.output}"
        asked = [b["model"] for b in srv.requests]
    assert asked == ["flag-model"] * 3
