"""The one sampling resolver: a role the config file sets keeps its sampling, any other starts from the
command's declared start (family, greedy or config), and the flags given go on top."""

from __future__ import annotations

import pytest

from agent_swarm.orchestrator.cli.sampling import ROLES, resolve_sampling, with_sampling
from agent_swarm.orchestrator.prompts import profile_for
from agent_swarm.swarm.backend import SamplingParams
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import UserError

SMALL = "qwen2.5-1.5b-instruct"
FILE = SwarmConfig.model_validate({"subagent_sampling": {"temperature": 0.0, "top_p": 0.9}})


def test_family_start_is_the_model_familys_sampling() -> None:
    out = resolve_sampling(FILE, file_sets=FILE.model_fields_set, start="family", flags={}, model=SMALL)
    assert out["orchestrator_sampling"] == profile_for(SMALL, None).orchestrator_sampling
    assert out["subagent_sampling"] == FILE.subagent_sampling  # the file's role as written


def test_greedy_start_is_temperature_zero_with_the_seed_and_the_familys_cap() -> None:
    out = resolve_sampling(SwarmConfig(), file_sets=(), start="greedy", flags={}, model=SMALL, seed=5)
    for role in ROLES:
        cap = getattr(profile_for(SMALL, None), role).max_tokens
        assert out[role] == SamplingParams(temperature=0.0, max_tokens=cap or 512, seed=5)
    no_model = resolve_sampling(SwarmConfig(), file_sets=(), start="greedy", flags={}, seed=1)
    assert no_model["orchestrator_sampling"].max_tokens == 512


@pytest.mark.parametrize("start", ["family", "greedy", "config"])
def test_flags_go_on_top_of_every_start(start: str) -> None:
    flags = {"temperature": 0.3, "max_tokens": 77, "seed": None}
    out = resolve_sampling(FILE, file_sets=FILE.model_fields_set, start=start, flags=flags, model=SMALL)  # type: ignore[arg-type]
    assert all((s.temperature, s.max_tokens) == (0.3, 77) for s in out.values())
    assert out["subagent_sampling"].top_p == 0.9


def test_config_start_without_flags_is_the_config_itself() -> None:
    unchanged = resolve_sampling(FILE, file_sets=(), start="config", flags={"temperature": None})
    assert with_sampling(FILE, unchanged) is FILE


def test_with_sampling_puts_the_resolved_sampling_on_both_roles() -> None:
    sampling = resolve_sampling(FILE, file_sets=(), start="config", flags={"temperature": 0.7, "max_tokens": 9})
    out = with_sampling(FILE, sampling)
    assert all((getattr(out, r).temperature, getattr(out, r).max_tokens) == (0.7, 9) for r in ROLES)
    assert out.model_dump(exclude=set(ROLES)) == FILE.model_dump(exclude=set(ROLES))


def test_a_bad_prompt_profile_names_the_config() -> None:
    cfg = SwarmConfig.model_construct(prompt_profile="no-such-profile")
    with pytest.raises(UserError, match="prompt_profile in the config"):
        resolve_sampling(cfg, file_sets=(), start="family", flags={}, model=SMALL)
