"""Packaging: our top-level names are ours alone, and the public surface is explicit and sorted."""

from __future__ import annotations

import importlib
import importlib.metadata as md
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ["orchestrator", "subagents", "swarm", "tools", "workloads"]


def test_pyproject_lists_packages_explicitly_and_never_ships_tests_or_traces() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = data["tool"]["setuptools"]["packages"]["find"]["include"]
    assert sorted({p.split(".")[0] for p in include}) == OURS
    assert not any(p.startswith(("tests", "traces", "bench", "experiments")) for p in include)
    assert data["project"]["scripts"]["swarm"] == "orchestrator.cli:main"


@pytest.mark.slow
def test_built_wheel_holds_our_packages_only(tmp_path: Path) -> None:
    """Build the real wheel: subpackages and data ship, tests/ and traces/ never do."""
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
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == set(OURS)
    assert "orchestrator/engine.py" in names and "swarm/py.typed" in names
    assert any(n.startswith("swarm/backends/") for n in names)


@pytest.mark.parametrize("name", [*OURS, "traces", "tests"])
def test_no_other_installed_distribution_claims_our_top_level_names(name: str) -> None:
    claimants = set(md.packages_distributions().get(name, []))
    assert claimants <= {"agent-swarm"}, f"{name!r} is also installed by {sorted(claimants - {'agent-swarm'})}"


@pytest.mark.parametrize("module", ["swarm", "orchestrator", "orchestrator.cluster", "subagents", "tools"])
def test_public_exports_are_sorted_unique_and_resolvable(module: str) -> None:
    mod = importlib.import_module(module)
    names = list(mod.__all__)
    assert names == sorted(names), f"{module}.__all__ is not sorted"
    assert len(names) == len(set(names))
    for n in names:
        assert hasattr(mod, n), f"{module}.{n} is exported but missing"


def test_core_surface() -> None:
    import orchestrator
    import subagents
    import swarm
    import tools

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
    from swarm import testing

    assert {"ScriptedBackend", "FunctionBackend", "call"} <= set(testing.__all__)


def test_ray_stays_optional_nothing_imports_it_until_a_cluster_runs() -> None:
    code = (
        "import sys\n"
        "import orchestrator.cli, orchestrator.cluster, orchestrator.cluster.sim, orchestrator.placement\n"
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
                    if s.startswith((f"from {other}.", f"from {other} ", f"import {other}")):
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
