"""One import name (issue 27.6): everything we ship is ``agent_swarm.*``, so a user's own ``tools.py`` or
``swarm.py`` beside their script, or another ``swarm`` package, shadows nothing of ours. The repository keeps
its folders; ``agent_swarm/`` holds relative symlinks to them."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import shutil
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


# --- the old names fail with an error naming the new path (the .pth hook, _agent_swarm_moved.py) ---------

HOOK = ("_agent_swarm_moved.py", "_agent_swarm_moved.pth")

OLD_IMPORTS = """
import importlib, importlib.util, json
out = {"probe": importlib.util.find_spec("swarm") is None}
for stmt in ["import orchestrator", "from swarm import x", "import subagents.loop",
             "importlib.import_module('tools.registry')", "from workloads import get_workload"]:
    try:
        exec(stmt)
    except ImportError as e:
        out[stmt] = [type(e).__name__, e.name, str(e)]
print(json.dumps(out))
"""

OWN_MODULES = """
import importlib.abc, importlib.util, sys, types
import swarm, tools  # the user's own swarm.py and tools.py


class Workloads(importlib.abc.MetaPathFinder, importlib.abc.Loader):  # a hook the program adds at run time
    def find_spec(self, name, path, target=None):
        return importlib.util.spec_from_loader(name, self) if name == "workloads" else None

    def create_module(self, spec):
        return types.ModuleType(spec.name)

    def exec_module(self, module):
        module.MINE = True


sys.meta_path.append(Workloads())
import workloads

print(swarm.MINE, tools.MINE, workloads.MINE)
"""


def _env_without_checkout() -> dict[str, str]:
    """This environment minus ``PYTHONPATH``: a worktree run puts the checkout, whose top-level folders are the
    old names, on it."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _run(python: str | Path, script: str, cwd: Path, prelude: str = "") -> subprocess.CompletedProcess[str]:
    (cwd / "main.py").write_text(textwrap.dedent(script))
    code = f"{prelude}exec(compile(open('main.py').read(), 'main.py', 'exec'))"
    return subprocess.run(
        [str(python), *(["-S"] if prelude else []), "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=_env_without_checkout(),
        timeout=60,
    )


def _check_old_imports(out: subprocess.CompletedProcess[str]) -> None:
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result.pop("probe") is True  # importlib.util.find_spec still answers None: it probes, never raises
    tops = {
        "import orchestrator": "orchestrator",
        "from swarm import x": "swarm",
        "import subagents.loop": "subagents",
        "importlib.import_module('tools.registry')": "tools",
        "from workloads import get_workload": "workloads",
    }
    assert set(result) == set(tops)
    for stmt, (kind, name, message) in result.items():
        top = tops[stmt]
        assert kind == "ModuleNotFoundError" and name == top, (stmt, kind, name)
        assert message.startswith(f"No module named {top!r}: agent-swarm's modules moved to agent_swarm.{top} ")
        assert f"import agent_swarm.{top}" in message and "docs/namespace.md" in message


def _hook_site(tmp_path: Path) -> Path:
    """A site directory holding this checkout's hook, processed as site-packages are at start-up."""
    site = tmp_path / "site"
    site.mkdir()
    for name in HOOK:
        shutil.copy(ROOT / name, site / name)
    return site


def _user_with_own_modules(tmp_path: Path) -> Path:
    user = tmp_path / "own"
    user.mkdir()
    (user / "swarm.py").write_text("MINE = 'swarm.py'\n")
    (user / "tools.py").write_text("MINE = 'tools.py'\n")
    return user


def test_an_old_import_name_fails_naming_its_new_path(tmp_path: Path) -> None:
    """With the hook (this checkout's ``_agent_swarm_moved.pth``, run as start-up runs site-packages' .pth
    files), an import of an old top-level name that nothing else has is a ``ModuleNotFoundError`` with that
    ``.name`` whose message names ``agent_swarm.<name>``; before it, ``No module named 'orchestrator'``."""
    site = _hook_site(tmp_path)
    user = tmp_path / "user"
    user.mkdir()
    _check_old_imports(
        _run(sys.executable, OLD_IMPORTS, user, prelude=f"import site; site.addsitedir({str(site)!r}); ")
    )


def test_the_hook_never_shadows_a_users_own_module_of_an_old_name(tmp_path: Path) -> None:
    """The finder is the last on ``sys.meta_path`` and asks the finders added after it: the user's
    ``swarm.py`` and ``tools.py`` beside the script, and a finder the program appends, import as before."""
    site = _hook_site(tmp_path)
    user = _user_with_own_modules(tmp_path)
    out = _run(sys.executable, OWN_MODULES, user, prelude=f"import site; site.addsitedir({str(site)!r}); ")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["swarm.py", "tools.py", "True"]


def test_this_interpreters_install_of_agent_swarm_has_the_hook(tmp_path: Path) -> None:
    """The install the suite runs on (CI: ``pip install -e .`` in scripts/dev-setup.sh) carries the hook: a
    plain ``python`` started in an empty folder names the new path."""
    try:
        files = {str(f) for f in md.distribution("agent-swarm").files or []}
    except md.PackageNotFoundError:
        pytest.skip(
            "agent-swarm is not installed in this interpreter (a bare checkout): the hook comes with an install"
        )
    assert set(HOOK) <= files, "this agent-swarm install predates the hook: install it again (pip install -e .)"
    user = tmp_path / "user"
    user.mkdir()
    _check_old_imports(_run(sys.executable, OLD_IMPORTS, user))


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The project's wheel and its PEP 660 editable wheel, built by setuptools as pip builds them."""
    out = tmp_path_factory.mktemp("wheels")
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out / "reg")]
    subprocess.run([*pip, str(ROOT)], check=True, capture_output=True, timeout=600)
    build = "import sys; from setuptools import build_meta; build_meta.build_editable(sys.argv[1])"
    subprocess.run(
        [sys.executable, "-c", build, str(out / "ed")], cwd=ROOT, check=True, capture_output=True, timeout=600
    )
    return {"wheel": next((out / "reg").glob("*.whl")), "editable": next((out / "ed").glob("*.whl"))}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["wheel", "editable"])
def test_both_install_kinds_install_the_hook(kind: str, wheels: dict[str, Path], tmp_path: Path) -> None:
    """``pip install .`` and ``pip install -e .`` put the hook at the root of site-packages (listed in RECORD,
    so uninstalling removes it); a fresh venv then names the new path and still imports a user's own
    modules."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index"]
    # without PYTHONPATH: a checkout on it, with the egg-info a build leaves there, reads as installed already
    env = _env_without_checkout()
    subprocess.run([*install, str(wheels[kind])], check=True, capture_output=True, timeout=300, env=env)
    purelib = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(
        subprocess.run([python, "-c", purelib], capture_output=True, text=True, check=True, env=env).stdout.strip()
    )
    assert all((site / name).is_file() for name in HOOK)
    record = next(site.glob("agent_swarm-*.dist-info")).joinpath("RECORD").read_text().splitlines()
    assert set(HOOK) <= {line.split(",")[0] for line in record}
    user = tmp_path / "user"
    user.mkdir()
    _check_old_imports(_run(python, OLD_IMPORTS, user))
    out = _run(python, "import swarm, tools\nprint(swarm.MINE, tools.MINE)\n", _user_with_own_modules(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["swarm.py", "tools.py"]
