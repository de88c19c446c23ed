"""One import name (issue 27.6): everything we ship is ``agent_swarm.*``, so a user's own ``tools.py`` or
``swarm.py`` beside their script, or another ``swarm`` package, shadows nothing of ours. The repository keeps
its folders; ``agent_swarm/`` holds relative symlinks to them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agent_swarm.orchestrator.rl.config import TrainConfig
from agent_swarm.orchestrator.rl.environment import Environment, load_environment
from agent_swarm.swarm.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["orchestrator", "subagents", "swarm", "tools", "workloads"]

USER_SCRIPT = """
import swarm  # the user's own swarm.py, not ours
import tools  # the user's own tools.py, as agent projects often have

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.swarm.testing import ScriptedBackend, call
from agent_swarm.tools import tool

assert swarm.MINE and tools.MINE
policy = ScriptedBackend(
    [
        [
            call("create_subagent", name="w", system_prompt="you look things up", tools=["capital"]),
            call("assign_task", agent="w", task="capital of France?"),
        ],
        "Paris",
    ]
)
workers = ScriptedBackend([[call("capital", country="France")], "Paris"])
orch = Orchestrator(policy, SwarmConfig(), tools=[tool(tools.capital)], subagent_backend=workers)
record = orch.run_sync("What is the capital of France?")
print(record.status.value, record.answer, record.subagent_results[0].steps)
"""


def _user_dir(tmp_path: Path) -> Path:
    (tmp_path / "tools.py").write_text(
        'MINE = True\n\n\ndef capital(country: str) -> str:\n    """The capital of a country."""\n'
        '    return {"France": "Paris"}[country]\n'
    )
    (tmp_path / "swarm.py").write_text("MINE = True\n")
    (tmp_path / "main.py").write_text(textwrap.dedent(USER_SCRIPT))
    return tmp_path


def test_a_user_script_beside_its_own_tools_py_and_swarm_py_runs_an_episode(tmp_path: Path) -> None:
    """The script imports its own ``tools`` and ``swarm`` first (they win: the script's folder comes first on
    ``sys.path``), then ours; under the old top-level names ``import orchestrator`` failed right there
    (``No module named 'tools.registry'; 'tools' is not a package``)."""
    user = _user_dir(tmp_path)
    out = subprocess.run(
        [sys.executable, "main.py"], cwd=user, capture_output=True, text=True, env=dict(os.environ), timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["completed", "Paris", "2"]


def test_the_distribution_has_one_top_level_name_whose_packages_are_the_repository_folders() -> None:
    import agent_swarm

    entries = sorted(p.name for p in (ROOT / "agent_swarm").iterdir() if p.name != "__pycache__")
    assert entries == sorted(["__init__.py", "py.typed", *PACKAGES])
    for name in PACKAGES:
        link = ROOT / "agent_swarm" / name
        assert link.is_symlink() and os.readlink(link) == f"../{name}", name  # relative: any checkout
    assert Path(agent_swarm.__file__).parent.resolve() == (ROOT / "agent_swarm").resolve()


def test_nothing_in_the_tree_uses_the_old_top_level_names() -> None:
    """``scripts/namespace_move.py --check`` finds no import or module path left to move to ``agent_swarm``."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the script lists the tracked files with git ls-files")
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "namespace_move.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def _config(tmp_path: Path) -> TrainConfig:
    return TrainConfig(run_dir=tmp_path / "run")


def test_a_training_environment_named_the_old_way_still_loads_with_a_deprecation_warning(tmp_path: Path) -> None:
    """``environment = "orchestrator.rl.scripted:..."`` (before 0.1's move) loads ours; the warning names the
    new spelling. The scripted environment then asks for workloads: it was reached."""
    old = "orchestrator.rl.scripted:scripted_subagent_environment"
    with (
        pytest.warns(DeprecationWarning, match="agent_swarm.orchestrator.rl.scripted:scripted_subagent_environment"),
        pytest.raises(ConfigError, match=r"agent_swarm\.orchestrator\.rl\.scripted:.* needs \[\[workloads\]\]"),
    ):
        load_environment(old, _config(tmp_path), None)


def test_a_users_own_module_with_one_of_the_old_names_is_imported_as_named(tmp_path: Path) -> None:
    """A ``tools.py`` beside the config whose function is none of ours is the user's."""
    (tmp_path / "tools.py").write_text(
        "from agent_swarm.orchestrator.rl.environment import Environment\n\n\n"
        "def make(config, tokenizer):\n    return Environment(tasks=[])\n"
    )
    saved = sys.modules.pop("tools", None)
    try:
        env = load_environment("tools:make", _config(tmp_path), None, search=[tmp_path])
    finally:
        sys.modules.pop("tools", None)
        if saved is not None:
            sys.modules["tools"] = saved
        if str(tmp_path) in sys.path:
            sys.path.remove(str(tmp_path))
    assert isinstance(env, Environment) and list(env.tasks) == []
