"""Everything chosen by name goes through one generic registry, with one behaviour for typos and clashes."""

from __future__ import annotations

import pytest

from agent_swarm.orchestrator.backend_factory import BACKENDS, build_backend
from agent_swarm.swarm.errors import ConfigError, UnknownNameError
from agent_swarm.swarm.registry import Registry
from agent_swarm.swarm.rl import ADVANTAGES, SCHEDULES
from agent_swarm.swarm.verifiers import VERIFIERS, verifier_names
from agent_swarm.workloads import WORKLOADS, get_workload, workload_names


def test_registry_add_get_replace_and_typos() -> None:
    reg: Registry[int] = Registry("widget")
    reg.add("b", 2)
    assert reg.register("a")(1) == 1
    assert reg.get("a") == 1 and reg.names == ("a", "b") and list(reg) == ["a", "b"] and len(reg) == 2
    assert "a" in reg and "c" not in reg
    with pytest.raises(ConfigError, match="widget 'a' is already registered"):
        reg.add("a", 3)
    reg.add("a", 3, replace=True)
    assert reg.get("a") == 3
    with pytest.raises(UnknownNameError, match="unknown widget 'c'; known: a, b"):
        reg.get("c")


def test_every_named_kind_uses_the_one_registry() -> None:
    pytest.importorskip("torch")
    from agent_swarm.swarm.rl.losses import LOSSES

    for reg in (VERIFIERS, WORKLOADS, BACKENDS, ADVANTAGES, SCHEDULES, LOSSES):
        assert isinstance(reg, Registry)
    assert list(VERIFIERS.names) == verifier_names()
    assert list(WORKLOADS.names) == workload_names()
    assert set(BACKENDS.names) == {"local", "openai", "vllm", "transformers", "scripted"}
    assert get_workload("starter").name == "starter"


def test_unknown_backend_kind_lists_the_registered_kinds() -> None:
    with pytest.raises(UnknownNameError, match="unknown backend 'gpt'; known: local, openai, scripted"):
        build_backend("gpt")
