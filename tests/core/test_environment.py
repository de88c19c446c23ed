"""Environment variables are read in one place (agent_swarm.orchestrator.environment), typed, and documented."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from agent_swarm import orchestrator
from agent_swarm.orchestrator.environment import BACKEND_OPTION_VARIABLES, VARIABLES, environment
from agent_swarm.swarm.errors import ConfigError

ROOT = Path(orchestrator.__file__).parent
READERS = {ROOT / "environment.py"}
OWN_READERS = {ROOT / "rl" / "verl_episode.py", ROOT / "rl" / "verl_loop.py"}
"""The verl integration reads its own variables (set by verl's launcher for its workers)."""


def _environ_reads(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ("environ", "getenv", "environb")
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ):
            lines.append(node.lineno)
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and {a.name for a in node.names} & {"environ", "getenv"}
        ):
            lines.append(node.lineno)
    return lines


def test_only_the_environment_module_reads_environment_variables() -> None:
    found = {
        f"{p.relative_to(ROOT.parent)}:{line}"
        for p in ROOT.rglob("*.py")
        if p not in READERS | OWN_READERS
        for line in _environ_reads(p)
    }
    assert not found, (
        f"read environment variables through agent_swarm.orchestrator.environment, not os.environ: {sorted(found)}"
    )


def test_every_variable_it_reads_is_documented() -> None:
    source = (ROOT / "environment.py").read_text(encoding="utf-8")
    readers = source.split("class Environment")[1]
    read = set(re.findall(r'"((?:SWARM|XDG|OPENAI)_[A-Z_]+|CI)"', readers))
    assert read <= set(VARIABLES), sorted(read - set(VARIABLES))


def test_values_are_typed_when_used_and_empty_is_unset(tmp_path: Path) -> None:
    env = environment({"SWARM_LOCAL_SLOTS": "4", "SWARM_TIMEOUT": "2.5", "SWARM_LOCAL_CTX": "", "CI": ""})
    assert (env.local_slots, env.timeout_s, env.local_ctx, env.ci) == (4, 2.5, None, False)
    assert env.demo_latency_s(0.05) == 0.05 and environment({"SWARM_DEMO_LATENCY": "0"}).demo_latency_s(0.05) == 0.0
    bad = environment({"SWARM_LOCAL_THREADS": "many"})
    assert bad.local_slots is None  # another variable's bad value fails only where it is used
    with pytest.raises(ConfigError, match=r"SWARM_LOCAL_THREADS='many' must be a number"):
        _ = bad.local_threads


def test_directories_prefer_the_swarm_variable_then_xdg(tmp_path: Path) -> None:
    both = environment({"SWARM_CONFIG_DIR": str(tmp_path / "c"), "XDG_CONFIG_HOME": str(tmp_path / "x")})
    assert both.config_dir == tmp_path / "c"
    assert environment({"XDG_CONFIG_HOME": str(tmp_path / "x")}).config_dir == tmp_path / "x" / "swarm"
    assert environment({"XDG_DATA_HOME": str(tmp_path / "d")}).records_dir == tmp_path / "d" / "swarm" / "records"
    assert environment({"SWARM_API_KEY": "", "OPENAI_API_KEY": "k"}).api_key == "k"


def test_backend_options_come_from_their_variables_typed_and_named() -> None:
    env = environment({"SWARM_LOCAL_SLOTS": "4", "OPENAI_API_KEY": "k", "SWARM_TIMEOUT": "", "SWARM_LOCAL_CTX": "x"})
    assert env.backend_option("slots") == ("SWARM_LOCAL_SLOTS", 4)
    assert env.backend_option("api_key") == ("OPENAI_API_KEY", "k")
    assert environment({"SWARM_API_KEY": "s", "OPENAI_API_KEY": "k"}).backend_option("api_key") == (
        "SWARM_API_KEY",
        "s",
    )
    assert env.backend_option("timeout") is None and env.backend_option("device") is None
    with pytest.raises(ConfigError, match="SWARM_LOCAL_CTX='x' must be a number"):
        env.backend_option("ctx")
    assert environment({"SWARM_LOCAL_KEEP_ALIVE": "0"}).backend_option("keep_alive") == ("SWARM_LOCAL_KEEP_ALIVE", 0.0)
    assert set(BACKEND_OPTION_VARIABLES) == {
        "slots",
        "ctx",
        "threads",
        "keep_alive",
        "timeout",
        "api_key",
        "subagent_base_url",
    }
    assert {v for vs in BACKEND_OPTION_VARIABLES.values() for v in vs} <= set(VARIABLES)
