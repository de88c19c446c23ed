"""The drift test: ``swarm run``, ``swarm eval`` and ``swarm rollout`` resolve the same flags, config file
and environment variables to the same SwarmConfig and the same sampling of both roles, and ``swarm train``
resolves the options it shares with them (the config file it finds, the sub-agent cache flags) alike.

The last tests check it through the settings object (:mod:`agent_swarm.orchestrator.cli.settings`), which every
command builds from typer's parse before the library call; the first ones end to end:
each command runs through the CLI (typer's runner) on the same workload task; the config each episode
ran with is read back from what the command wrote (the record), and a model backend's sampling from the
requests a scripted OpenAI-compatible server received. Seeds are compared by each command's own rule
(rollout derives one sampling seed per sample from its run seed).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.cli.eval import EvalOptions
from agent_swarm.orchestrator.cli.rollout import RolloutOptions
from agent_swarm.orchestrator.cli.run import RunOptions
from agent_swarm.orchestrator.cli.settings import Settings
from agent_swarm.orchestrator.cli.train import TrainOptions
from agent_swarm.swarm.errors import UserError

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


# Through the settings object: each command's own parse (typer's, environment included) into its options
# model, then Settings.resolve, as the commands do before the library call.

OPTIONS: dict[str, Any] = {"run": RunOptions, "eval": EvalOptions, "rollout": RolloutOptions, "train": TrainOptions}


def _settings(argv: list[str]) -> Any:
    """``swarm ARGV``'s settings: typer parses the arguments into the command's options model, which
    resolves them (eval's ``--seed`` counts as typed when it was)."""
    name, *rest = argv
    ctx = typer.main.get_command(app).commands[name].make_context(name, rest)  # type: ignore[attr-defined]
    options = OPTIONS[name](**ctx.params)
    if name == "eval":
        source = ctx.get_parameter_source("seed")
        return options.settings(seed_typed=source is not None and source.name == "COMMANDLINE")
    return options.settings()


def _each(tmp_path: Path, *flags: str) -> dict[str, Settings]:
    out = ("-o", str(tmp_path / "out"))
    return {name: _settings([name, *flags, *(out if name == "rollout" else ())]) for name in ("run", "eval", "rollout")}


def test_the_settings_object_resolves_the_same_flags_file_and_environment_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "swarm.toml"
    cfg.write_text(CONFIG + '[backend]\nsubagent_model = "file-workers"\ntimeout = 30\n')
    for variable, value in {"SWARM_BACKEND": "openai", "SWARM_BASE_URL": "http://h:1/v1", "SWARM_MODEL": "m"}.items():
        monkeypatch.setenv(variable, value)
    more = ("--budget", "tokens=5000", "--max-subagent-steps", "3", "--max-concurrency", "4")
    each = _each(tmp_path, *FLAGS, "-c", str(cfg), *SAMPLING_FLAGS, *more)
    run = each["run"]
    assert run.config_file == cfg and run.backend.model == "m" and run.spec().subagent_model == "file-workers"
    config = run.config()
    assert (config.max_critical_steps, config.max_subagent_steps, config.max_concurrency) == (9, 3, 4)
    assert config.budgets.max_tokens == 5000 and config.subagent_timeout_s == 77.0
    for name, s in each.items():
        assert (s.config_file, s.base, s.extras, s.backend, s.spec()) == (
            run.config_file,
            run.base,
            run.extras,
            run.backend,
            run.spec(),
        ), name
        assert s.config() == config, name
        assert {k: s.sampling_flags[k] for k in ("temperature", "max_tokens")} == {"temperature": 0.2, "max_tokens": 99}
        # the sub-agents' sampling is the config file's in every command, the flags on top
        sub = s.sampling(config, "m")["subagent_sampling"]
        assert (sub.temperature, sub.max_tokens, sub.top_p) == (0.2, 99, 0.9), name
    # --seed: run's and (typed) eval's sampling seed; rollout's run seed, not a sampling flag
    assert [each[n].sampling_flags["seed"] for n in ("run", "eval", "rollout")] == [0, 0, None]
    assert [each[n].start for n in ("run", "eval", "rollout")] == ["family", "greedy", "config"]


def test_a_scripted_policy_gets_the_same_sampling_from_the_settings_of_every_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "swarm.toml"
    cfg.write_text(CONFIG)
    monkeypatch.setenv("SWARM_BACKEND", "gold")
    each = _each(tmp_path, *FLAGS, "-c", str(cfg), "--temperature", "0.2", "--max-tokens", "99")
    resolved = {name: s.with_sampling(s.config()) for name, s in each.items()}
    assert all(s.start == "config" for s in each.values())
    assert resolved["run"] == resolved["eval"] == resolved["rollout"]
    assert resolved["run"].orchestrator_sampling.temperature == 0.2


def test_train_resolves_its_shared_options_as_eval_and_rollout_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "swarm.toml").write_text('[backend]\nsubagent_cache = "from-file"\n')
    out = ("-o", str(tmp_path / "out"))
    train = _settings(["train", "--subagent-cache", "c"])
    rollout = _settings(["rollout", "--subagent-cache", "c", *out])
    evaluation = _settings(["eval", "--subagent-cache", "c"])
    # -c absent: every command finds ./swarm.toml the same way
    assert train.config_file == rollout.config_file == evaluation.config_file == Path.cwd() / "swarm.toml"
    assert train.subagent_cache == Path("c")
    assert rollout.extras["backend"]["subagent_cache"] == evaluation.extras["backend"]["subagent_cache"] == "c"
    train = _settings(["train", "--no-subagent-cache"])
    rollout = _settings(["rollout", "--no-subagent-cache", *out])
    assert train.subagent_cache == "off" and "subagent_cache" not in rollout.extras["backend"]
    both = ["--subagent-cache", "c", "--no-subagent-cache"]
    errors = set()
    for argv in (["train", *both], ["rollout", *both, *out], ["eval", *both]):
        with pytest.raises(UserError) as bad:
            _settings(argv)
        errors.add(str(bad.value))
    assert errors == {"--subagent-cache DIR and --no-subagent-cache contradict each other; give one"}


def test_the_scripted_demo_resolves_the_same_config_in_run_and_rollout(tmp_path: Path) -> None:
    # rollout -b scripted ignored --temperature/--max-tokens; run --demo put them on the recorded sampling
    tasks = tmp_path / "demo.jsonl"
    tasks.write_text('{"id": "capitals", "prompt": "capitals"}\n')
    flags = ["-b", "scripted", "--temperature", "0.3", "--max-tokens", "50", "--max-critical-steps", "7", "-q"]
    r = runner.invoke(app, ["run", "--demo", "capitals", *flags, "--json", "-o", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    run = json.loads(r.stdout)["config"]
    ro = tmp_path / "rollout"
    r = runner.invoke(app, ["rollout", "-t", str(tasks), *flags, "-k", "1", "--json", "-o", str(ro)])
    assert r.exit_code == 0, r.output
    rollout = json.loads((ro / "episodes.jsonl").read_text().splitlines()[0])["record"]["config"]
    assert _seedless(run) == _seedless(rollout)
    assert [(run[r]["temperature"], run[r]["max_tokens"]) for r in ROLES] == [(0.3, 50)] * 2
