"""Typed backend options per kind: a key a kind does not take, a bad value and an environment fallback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.backend_factory import (
    BACKEND_TABLE_KEYS,
    BACKENDS,
    backend_option_keys,
    build_backend,
    build_backends,
)
from agent_swarm.orchestrator.backend_options import (
    HTTPOptions,
    LocalOptions,
    ScriptedOptions,
    SharedOptions,
    VLLMEngineOptions,
)
from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.cli.backend_spec import BackendSpec
from agent_swarm.swarm.backends.local import LocalBackend
from agent_swarm.swarm.backends.local.cpu import slot_cap
from agent_swarm.swarm.backends.openai_http import LaunchRamp, OpenAIBackend
from agent_swarm.swarm.errors import ConfigError

URL = "http://127.0.0.1:9"

# (kind, model, base_url, an option every other kind takes but this one does not)
KINDS = [
    ("local", "smollm2-135m", None, "api_key"),
    ("openai", "m", URL, "slots"),
    ("vllm", "m", URL, "device"),
    ("vllm", "dir", None, "timeout"),  # in-process vLLM takes no options
    ("transformers", "dir", None, "timeout"),
    ("scripted", None, None, "slots"),
]


def test_the_kinds_and_their_models_are_the_registry() -> None:
    assert set(BACKENDS.names) == {k for k, *_ in KINDS}
    assert backend_option_keys("local") == set(LocalOptions.model_fields)
    assert backend_option_keys("openai") == backend_option_keys("vllm", URL) == set(HTTPOptions.model_fields)
    assert backend_option_keys("vllm") == set(VLLMEngineOptions.model_fields) == set()
    assert backend_option_keys("transformers") == {"device", "dtype"}
    assert backend_option_keys("scripted") == set(ScriptedOptions.model_fields) == set()
    # the config file's [backend] keys: what the registered kinds take, with or without a URL, the shared
    # ones and the named ones, no hints
    taken = set().union(*(backend_option_keys(kind, url) for kind in BACKENDS.names for url in (None, URL)))
    named = {"kind", "model", "base_url", "subagent_backend", "subagent_model"}
    assert set(BACKEND_TABLE_KEYS) == taken | set(SharedOptions.model_fields) | named
    assert {"slots", "api_key", "device", "dtype"} <= BACKEND_TABLE_KEYS
    assert not {"fanout", "progress"} & BACKEND_TABLE_KEYS


@pytest.mark.parametrize(("kind", "model", "url", "key"), KINDS)
def test_every_kind_refuses_a_key_it_does_not_take_naming_the_kind(
    kind: str, model: str | None, url: str | None, key: str
) -> None:
    option: dict[str, Any] = {key: 3}
    with pytest.raises(ConfigError) as err:
        build_backends(kind, model, url, **option)
    message = str(err.value)
    assert f"backend option {key} = 3 is not taken by backend kind {kind!r}" in message
    assert "remove it or change the kind; valid keys:" in message and "\n" not in message
    for valid in sorted(backend_option_keys(kind, url)):
        assert valid in message.split("valid keys:")[1]


def test_openai_with_local_slots_fails_where_it_was_silently_ignored() -> None:
    # The old factory checked keys against the union of every kind's, so this built an OpenAIBackend.
    with pytest.raises(ConfigError, match=r"slots = 4 is not taken by backend kind 'openai', only by local"):
        build_backends("openai", "m", URL, slots=4)
    with pytest.raises(ConfigError, match=r"device = 'cuda' is not taken by backend kind 'local'"):
        build_backends("local", "smollm2-135m", device="cuda")


def test_an_unknown_key_suggests_the_closest_valid_one() -> None:
    with pytest.raises(
        ConfigError, match=r"unknown backend option slot = 3 for backend kind 'local' \(did you mean 'slots'\?\)"
    ):
        build_backends("local", "smollm2-135m", slot=3)


@pytest.mark.parametrize(
    ("kind", "options", "fragment"),
    [
        (
            "local",
            {"slots": "many"},
            r"backend option slots = 'many' is invalid for backend kind 'local': input should be a valid integer",
        ),
        ("local", {"slots": 0}, r"slots = 0 is invalid for backend kind 'local': input should be greater than 0"),
        ("local", {"ctx": 4.5}, r"ctx = 4.5 is invalid .*valid integer"),
        ("local", {"threads": -1}, r"threads = -1 is invalid"),
        ("local", {"timeout": -3}, r"timeout = -3 is invalid for backend kind 'local': input should be greater than 0"),
        ("local", {"stop_repeats": "sometimes"}, r"stop_repeats = 'sometimes' is invalid .*valid boolean"),
        (
            "openai",
            {"timeout": -3},
            r"timeout = -3 is invalid for backend kind 'openai': input should be greater than 0",
        ),
        ("openai", {"max_concurrency": 0}, r"max_concurrency = 0 is invalid"),
        ("openai", {"max_retries": -1}, r"max_retries = -1 is invalid .*greater than or equal to 0"),
        ("openai", {"retry_base_delay": -0.5}, r"retry_base_delay = -0.5 is invalid"),
        ("openai", {"launch_burst": 0, "launch_rate": 1.0}, r"launch_burst = 0 is invalid"),
        ("openai", {"launch_burst": 5, "launch_rate": 0}, r"launch_rate = 0 is invalid"),
        (
            "openai",
            {"launch_rate": 1.4},
            r"backend kind 'openai': a launch ramp needs both launch_burst and launch_rate",
        ),
        ("openai", {"api_key": 42}, r"api_key = 42 is invalid .*valid string"),
        ("vllm", {"flavour": "tgi"}, r"flavour = 'tgi' is invalid for backend kind 'vllm': input should be 'auto'"),
        ("local", {"orchestrator_adapter": 3}, r"orchestrator_adapter = 3 is invalid .*valid string"),
        ("openai", {"subagent_cache": 3}, r"subagent_cache = 3 is invalid .*path"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_key_the_value_and_the_kind(
    kind: str, options: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ConfigError, match=fragment) as err:
        build_backends(kind, "smollm2-135m" if kind == "local" else "m", None if kind == "local" else URL, **options)
    assert "\n" not in str(err.value)


def test_each_role_gets_the_options_its_kind_takes() -> None:
    # A local orchestrator with sub-agents on a server: slots size the engine, api_key reaches the server.
    orch, sub = build_backends(
        "local", "smollm2-135m", subagent_kind="openai", subagent_base_url=URL, slots=3, api_key="k", timeout=9
    )
    assert isinstance(orch, LocalBackend) and orch.engine.slots == 3 and orch.timeout == 9
    assert isinstance(sub, OpenAIBackend) and sub._headers == {"Authorization": "Bearer k"} and sub.timeout == 9
    # a key neither kind takes names both
    with pytest.raises(
        ConfigError, match=r"backend kind 'local' \(orchestrator\) or 'openai' \(sub-agents\), only by transformers"
    ):
        build_backends("local", "smollm2-135m", subagent_kind="openai", subagent_base_url=URL, device="cuda")


def test_hints_do_not_trip_a_kind_that_has_no_use_for_them() -> None:
    seen: list[object] = []
    orch, _ = build_backends("openai", "m", URL, fanout=12, progress=seen.append)
    assert isinstance(orch, OpenAIBackend)
    one = build_backend("openai", "m", URL, fanout=12, progress=seen.append)
    assert isinstance(one, OpenAIBackend)
    local, _ = build_backends("local", "smollm2-135m", fanout=12)
    # a slot per parallel sub-agent, at most 4 per core (cpu.slot_cap)
    assert isinstance(local, LocalBackend) and local.engine.slots == min(12, slot_cap()) and local.engine.fit_slots
    scripted, _ = build_backends("scripted", fanout=12, progress=seen.append)
    assert scripted.model


def test_the_environment_fills_what_is_not_given_and_given_values_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWARM_TIMEOUT", "7.5")
    monkeypatch.setenv("SWARM_LOCAL_SLOTS", "5")
    monkeypatch.setenv("SWARM_LOCAL_CTX", "2048")
    monkeypatch.setenv("SWARM_LOCAL_THREADS", "2")
    monkeypatch.setenv("OPENAI_API_KEY", "from-openai")
    http, _ = build_backends("openai", "m", URL)
    assert isinstance(http, OpenAIBackend) and http.timeout == 7.5
    assert http._headers == {"Authorization": "Bearer from-openai"}
    monkeypatch.setenv("SWARM_API_KEY", "from-swarm")  # SWARM_API_KEY wins over OPENAI_API_KEY
    given, _ = build_backends("openai", "m", URL, timeout=3, api_key="given")
    assert (
        isinstance(given, OpenAIBackend) and given.timeout == 3 and given._headers == {"Authorization": "Bearer given"}
    )
    env_key, _ = build_backends("openai", "m", URL)
    assert isinstance(env_key, OpenAIBackend) and env_key._headers == {"Authorization": "Bearer from-swarm"}
    local, _ = build_backends("local", "smollm2-135m")
    assert isinstance(local, LocalBackend) and local.timeout == 7.5 and not local.engine.fit_slots
    assert (local.engine.slots, local.engine.ctx_per_slot, local.engine.threads) == (5, 2048, 2)
    mine, _ = build_backends("local", "smollm2-135m", slots=2, ctx=1024, threads=1, timeout=4)
    assert isinstance(mine, LocalBackend) and mine.timeout == 4
    assert (mine.engine.slots, mine.engine.ctx_per_slot, mine.engine.threads) == (2, 1024, 1)


def test_a_bad_environment_value_names_the_variable_and_fails_only_the_kinds_that_read_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SWARM_LOCAL_SLOTS", "0")
    with pytest.raises(
        ConfigError,
        match=r"variable SWARM_LOCAL_SLOTS='0' \(backend option slots\) is invalid for backend kind 'local'",
    ):
        build_backends("local", "smollm2-135m")
    build_backends("openai", "m", URL)  # the openai kind takes no slots, so never reads the variable
    monkeypatch.setenv("SWARM_TIMEOUT", "-3")
    with pytest.raises(ConfigError, match=r"SWARM_TIMEOUT='-3' \(backend option timeout\) is invalid .*greater than 0"):
        build_backends("openai", "m", URL)
    build_backends("openai", "m", URL, timeout=5)  # a given value wins, the variable is not read


def test_a_launch_ramp_and_the_flavour_reach_the_http_backend() -> None:
    b = build_backend("vllm", "m", URL, launch_burst=5, launch_rate=1.4, max_retries=0, retry_base_delay=0)
    assert isinstance(b, OpenAIBackend) and b.ramp == LaunchRamp(burst=5, per_second=1.4) and b.flavour == "vllm"
    assert (b.retry.max_retries, b.retry.base_delay) == (0, 0.0)
    assert (
        isinstance(o := build_backend("openai", "m", URL, flavour="llamacpp"), OpenAIBackend)
        and o.flavour == "llamacpp"
    )


def test_build_backend_takes_only_its_kinds_options() -> None:
    # the options every kind takes are build_backends' (the sub-agents' server, cache and adapter)
    with pytest.raises(ConfigError, match=r"unknown backend option subagent_cache = 'x' for backend kind 'openai'"):
        build_backend("openai", "m", URL, subagent_cache="x")


def test_a_spec_checks_its_options_when_it_is_resolved(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"slots = 4 is not taken by backend kind 'openai'"):
        BackendSpec.resolve({"kind": "openai", "slots": 4}, kind="local", base_url=URL)
    spec = BackendSpec.resolve({"slots": 4, "api_key": "k"}, kind="local", subagent_kind="openai", model="smollm2-135m")
    assert spec.options == {"slots": 4, "api_key": "k"}
    # an agent file's model runs on the sub-agents' kind, with the options that kind takes
    served = BackendSpec.resolve(
        {"slots": 4, "api_key": "k", "subagent_base_url": URL},
        kind="local",
        subagent_kind="openai",
        model="smollm2-135m",
    ).for_subagent_model("big")
    assert (served.kind, served.model, served.base_url, dict(served.options)) == (
        "openai",
        "big",
        URL,
        {"api_key": "k"},
    )
    orch, _ = served.build(fanout=16)
    assert isinstance(orch, OpenAIBackend) and orch.model == "big"
    # local sub-agents under a served orchestrator: no server URL, the local options only
    local = BackendSpec.resolve({"slots": 2, "api_key": "k"}, kind="openai", base_url=URL, subagent_kind="local")
    assert (local.for_subagent_model("smollm2-135m").base_url, dict(local.for_subagent_model("x").options)) == (
        None,
        {"slots": 2},
    )


def test_an_agent_model_runs_on_the_sub_agents_server_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWARM_SUBAGENT_BASE_URL", "http://127.0.0.1:11")
    spec = BackendSpec.resolve({"timeout": 5}, kind="openai", base_url=URL, model="m")
    agent = spec.for_subagent_model("big")
    assert (agent.kind, agent.base_url, dict(agent.options)) == ("openai", "http://127.0.0.1:11", {"timeout": 5})


def test_a_config_file_option_the_kind_does_not_take_fails_the_command(tmp_path: Path) -> None:
    cfg = tmp_path / "swarm.toml"
    cfg.write_text('[backend]\nkind = "openai"\nbase_url = "http://127.0.0.1:9"\nslots = 4\n')
    result = CliRunner().invoke(app, ["run", "-c", str(cfg), "-q", "hello"])
    assert result.exit_code != 0
    assert "slots = 4 is not taken by backend kind 'openai', only by local" in result.output.replace("\n", " ")


def test_automatic_slots_stop_at_four_per_core_and_at_sixteen() -> None:
    assert [slot_cap(c) for c in (1, 2, 3, 4, 64)] == [4, 8, 12, 16, 16]
    wide, _ = build_backends("local", "smollm2-135m", fanout=64)
    assert isinstance(wide, LocalBackend) and wide.engine.slots == slot_cap() <= 16
    narrow, _ = build_backends("local", "smollm2-135m", fanout=2)
    assert isinstance(narrow, LocalBackend) and narrow.engine.slots == 2
    # slots that are set are not capped: a user may know their machine
    pinned, _ = build_backends("local", "smollm2-135m", slots=24, fanout=64)
    assert isinstance(pinned, LocalBackend) and pinned.engine.slots == 24
