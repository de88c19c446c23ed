"""Rollout's seams on their own: each module exports what it defines, nothing is imported through the
package, and the runner and the TRL adapter seed an episode alike."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

from agent_swarm.orchestrator.rollout.episodes import EpisodeJob, episode_crash
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.records import Task

ROOT = Path(__file__).resolve().parents[2]
SEAMS = ("collection", "config", "episodes", "executors", "trl")


def test_each_seam_exports_what_it_defines_and_nothing_is_imported_through_the_package() -> None:
    for seam in SEAMS:
        mod = importlib.import_module(f"agent_swarm.orchestrator.rollout.{seam}")
        names = list(mod.__all__)
        assert len(names) == len(set(names)), seam  # their order: ruff (RUF022)
        for n in names:
            obj = getattr(mod, n)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                assert obj.__module__ == mod.__name__, f"{seam}.{n} comes from {obj.__module__}"
    assert importlib.import_module("agent_swarm.orchestrator.rollout").__all__ == []
    through = [
        f"{p.relative_to(ROOT)}: {', '.join(a.name for a in node.names)}"
        for top in ("orchestrator", "experiments", "tests", "examples", "scripts", "bench")
        for p in (ROOT / top).rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module == "agent_swarm.orchestrator.rollout"
        if any(a.name not in SEAMS for a in node.names)
    ]
    assert not through, f"names imported from agent_swarm.orchestrator.rollout instead of their module: {through}"


def test_a_job_seeds_only_the_orchestrators_sampling_and_names_its_failures() -> None:
    base = SwarmConfig()
    job = EpisodeJob(Task(id="t", prompt="p"), 2, 1234)
    seeded = job.seeded(base)
    assert seeded.orchestrator_sampling.seed == 1234
    assert seeded.model_copy(update={"orchestrator_sampling": base.orchestrator_sampling}) == base
    crash = episode_crash(job, "boom", "runtime")
    assert (crash.kind, crash.group_id, crash.sample_index, crash.seed, crash.episode_id, crash.record) == (
        "episode",
        "t",
        2,
        1234,
        "t-s2",
        None,
    )
