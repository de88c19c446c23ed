"""The settings model (:mod:`agent_swarm.orchestrator.cli.settings`): each command's parameters are its options
model's fields, and :meth:`Settings.resolve` reads the config file and the flags once."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from pydantic import BaseModel

from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.cli.eval import EvalOptions
from agent_swarm.orchestrator.cli.options import (
    BackendChoiceOptions,
    EpisodeLimitOptions,
    ModelChoiceOptions,
    SubagentCacheOptions,
)
from agent_swarm.orchestrator.cli.rollout import RolloutOptions
from agent_swarm.orchestrator.cli.run import RunOptions
from agent_swarm.orchestrator.cli.settings import COMMANDS, BackendFlags, Settings
from agent_swarm.orchestrator.cli.train import TrainOptions
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import ConfigError, UserError

MODELS: list[tuple[str, type[BaseModel]]] = [
    ("run", RunOptions),
    ("eval", EvalOptions),
    ("rollout", RolloutOptions),
    ("train", TrainOptions),
]


@pytest.mark.parametrize(("name", "model"), MODELS)
def test_a_commands_parameters_are_its_options_models_fields_in_order(name: str, model: type[BaseModel]) -> None:
    command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    assert [p.name for p in command.params] == list(model.model_fields)


@pytest.mark.parametrize("model", [EvalOptions, RolloutOptions])
def test_the_shared_episode_limits_stand_between_config_and_temperature(model: type[BaseModel]) -> None:
    names = list(model.model_fields)
    at = names.index("config_file")
    assert names[at + 1 : at + 7] == [*EpisodeLimitOptions.model_fields, "temperature"]
    assert list(EpisodeLimitOptions.model_fields) == [
        "max_critical_steps",
        "budget",
        "max_subagent_steps",
        "max_concurrency",
        "episode_timeout",
    ]


@pytest.mark.parametrize(("name", "model"), MODELS)
def test_each_option_group_stands_together_in_every_command_that_takes_it(name: str, model: type[BaseModel]) -> None:
    names = list(model.model_fields)
    groups = (BackendChoiceOptions, ModelChoiceOptions, EpisodeLimitOptions, SubagentCacheOptions)
    taken = [g for g in groups if issubclass(model, g)]
    assert taken, f"swarm {name} takes no shared option group"
    for group in taken:
        fields = list(group.model_fields)
        at = names.index(fields[0])
        assert names[at : at + len(fields)] == fields, f"swarm {name}: {group.__name__} split"


def test_resolve_reads_the_file_once_with_the_commands_tables_and_puts_the_backend_flags_in(tmp_path: Path) -> None:
    cfg = tmp_path / "swarm.toml"
    cfg.write_text('[swarm]\nmax_critical_steps = 5\n[backend]\nsubagent_cache = "file-cache"\n')
    options = RolloutOptions(
        out=tmp_path, config_file=cfg, max_subagent_steps=3, temperature=0.5, no_subagent_cache=True
    )
    s = Settings.resolve(options, "rollout", adapter="none", cache=options)
    assert s.config_file == cfg and s.base == SwarmConfig(max_critical_steps=5)
    assert s.extras == {"backend": {"orchestrator_adapter": "none"}}  # --no-subagent-cache drops the file's
    assert (s.config().max_critical_steps, s.config().max_subagent_steps) == (5, 3)
    assert s.with_sampling(s.config()).orchestrator_sampling.temperature == 0.5
    assert s.backend == BackendFlags("local") and s.start == "config"
    cfg.write_text('[tools]\nenabled = ["python"]\n')
    with pytest.raises(ConfigError, match="swarm eval does not read the \\[tools\\] table"):
        Settings.resolve(EvalOptions(config_file=cfg), "eval")
    assert "tools" in COMMANDS["run"].tables and "tools" not in COMMANDS["eval"].tables


def test_a_library_caller_builds_settings_without_a_command_line() -> None:
    s = Settings("run", overrides={"max_critical_steps": 4}, sampling_flags={"temperature": 0.0})
    config = s.with_sampling(s.config(), "unknown-model")
    assert config.max_critical_steps == 4 and config.orchestrator_sampling.temperature == 0.0


@pytest.mark.parametrize("model", [EvalOptions, RolloutOptions, TrainOptions])
def test_the_cache_flags_are_one_choice_in_every_command(model: type[SubagentCacheOptions], tmp_path: Path) -> None:
    def choice(**flags: object) -> object:
        return model(**({"out": tmp_path} if model is RolloutOptions else {}), **flags).cache_choice()

    assert choice(subagent_cache=Path("c")) == Path("c") and choice(no_subagent_cache=True) == "off"
    assert choice() is None
    with pytest.raises(UserError, match="contradict each other"):
        choice(subagent_cache=Path("c"), no_subagent_cache=True)
