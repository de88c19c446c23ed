"""Packaging: one top-level name (`agent_swarm`), ours alone, and the public surface is explicit and sorted."""

from __future__ import annotations

import importlib
import importlib.metadata as md
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ["orchestrator", "subagents", "swarm", "tools", "workloads"]  # folders here, agent_swarm.* installed


def test_pyproject_lists_packages_explicitly_and_never_ships_tests_or_traces() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = data["tool"]["setuptools"]["packages"]["find"]["include"]
    assert include == ["agent_swarm", "agent_swarm.*"]  # the folders, through agent_swarm/'s symlinks
    assert data["project"]["scripts"]["swarm"] == "agent_swarm.orchestrator.cli:main"


@pytest.mark.slow
def test_built_wheel_holds_our_packages_only(tmp_path: Path) -> None:
    """Build the real wheel: one top-level package, agent_swarm, holding the folders as real files (not
    symlinks), their subpackages and data; tests/ and traces/ never ship."""
    import subprocess
    import sys
    import zipfile

    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next(tmp_path.glob("agent_swarm-*.whl"))
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    # one package, plus the hook that names agent_swarm when an old name is imported (_agent_swarm_moved.py)
    assert tops == {"agent_swarm", "_agent_swarm_moved.py", "_agent_swarm_moved.pth"}
    assert {f"agent_swarm/{p}/__init__.py" for p in OURS} <= set(names)
    assert "agent_swarm/orchestrator/engine.py" in names and "agent_swarm/swarm/py.typed" in names
    assert any(n.startswith("agent_swarm/swarm/backends/") for n in names)
    assert any(n.startswith("agent_swarm/workloads/data/") for n in names)
    engine = archive.getinfo("agent_swarm/orchestrator/engine.py")
    assert engine.file_size == (ROOT / "orchestrator" / "engine.py").stat().st_size  # the file, not a link
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "swarm = agent_swarm.orchestrator.cli:main" in archive.read(entry_points).decode()


@pytest.mark.parametrize("name", ["agent_swarm", "traces", "tests"])
def test_no_other_installed_distribution_claims_our_top_level_names(name: str) -> None:
    claimants = set(md.packages_distributions().get(name, []))
    assert claimants <= {"agent-swarm"}, f"{name!r} is also installed by {sorted(claimants - {'agent-swarm'})}"


@pytest.mark.parametrize(
    "module",
    [
        "agent_swarm.swarm",
        "agent_swarm.orchestrator",
        "agent_swarm.orchestrator.cluster",
        "agent_swarm.subagents",
        "agent_swarm.tools",
    ],
)
def test_public_exports_are_sorted_unique_and_resolvable(module: str) -> None:
    mod = importlib.import_module(module)
    names = list(mod.__all__)
    assert names == sorted(names), f"{module}.__all__ is not sorted"
    assert len(names) == len(set(names))
    for n in names:
        assert hasattr(mod, n), f"{module}.{n} is exported but missing"


def test_core_surface() -> None:
    from agent_swarm import orchestrator, subagents, swarm, tools

    assert {"Orchestrator", "SwarmConfig"} <= set(orchestrator.__all__)
    assert {"AgentDefinition", "SubagentRun"} <= set(subagents.__all__)
    assert {"Tool", "ToolRegistry", "Toolset", "tool"} <= set(tools.__all__)
    assert {
        "Completion",
        "ModelBackend",
        "ModelRequest",
        "EpisodeRecord",
        "SwarmError",
        "UserError",
        "AgentError",
        "dag_stats",
        "critical_steps_formula",
        "Task",
    } <= set(swarm.__all__)
    from agent_swarm.swarm import testing

    assert {"ScriptedBackend", "FunctionBackend", "call"} <= set(testing.__all__)


def test_ray_stays_optional_nothing_imports_it_until_a_cluster_runs() -> None:
    code = (
        "import sys\n"
        "import agent_swarm.orchestrator.cli, agent_swarm.orchestrator.cluster\n"
        "import agent_swarm.orchestrator.cluster.sim, agent_swarm.orchestrator.placement\n"
        "print('ray' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_library_code_never_imports_the_otel_sdk() -> None:
    offenders = []
    for pkg in ["swarm", "subagents", "tools", "workloads"]:
        for f in (ROOT / pkg).rglob("*.py"):
            if "opentelemetry.sdk" in f.read_text():
                offenders.append(str(f.relative_to(ROOT)))
    assert offenders == []


def test_imports_point_one_way() -> None:
    """swarm <- tools <- workloads <- subagents <- orchestrator."""
    allowed = {
        "swarm": set(),
        "tools": {"swarm"},
        "workloads": {"swarm", "tools"},
        "subagents": {"swarm", "tools", "workloads"},
    }
    bad = []
    for pkg, ok in allowed.items():
        for f in (ROOT / pkg).rglob("*.py"):
            for line in f.read_text().splitlines():
                s = line.strip()
                for other in set(OURS) - ok - {pkg}:
                    new = f"agent_swarm.{other}"
                    forms = (f"from {new}.", f"from {new} ", f"import {new}", f"from agent_swarm import {other}")
                    if s.startswith(forms):
                        bad.append(f"{f.relative_to(ROOT)}: {s}")
    assert bad == []


def test_shipped_modules_name_no_paths_of_a_developers_machine() -> None:
    """Build scripts that read a checkout or a data directory live in scripts/, which never ships."""
    machine = ("/work/", "/home/", "/Users/")
    offenders = [
        str(f.relative_to(ROOT))
        for pkg in OURS
        for f in (ROOT / pkg).rglob("*.py")
        if any(p in f.read_text(encoding="utf-8") for p in machine)
    ]
    assert offenders == []
