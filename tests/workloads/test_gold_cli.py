"""Every workload's gold policy scores 1 in both arms through ``swarm eval -b scripted``.

The CLI runs the protocol every arm shares (the coach: one tool call per turn in the single arm, repeat
and stuck detection, the last-turn notice); a gold policy written for a looser engine (several calls in
one turn, the same read twice) scores below 1 there, and SFT data and budget checks built from it are wrong.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app
from agent_swarm.workloads import workload_names

pytest.importorskip("bm25s")  # the look-up workloads search corpora

KNOBS: dict[str, list[str]] = {
    "tau2-batch": ["k=3", "min_actions=1", "max_actions=20"],
    "wide-lookup": ["entities=4", "attributes=2"],
    "deep-lookup": ["branches=3"],
    "train-mix": ["max_entities=6"],
}


@pytest.mark.parametrize("name", workload_names())
def test_gold_scores_one_in_both_arms_through_swarm_eval(name: str, tmp_path: Path) -> None:
    split = "train" if name == "train-mix" else "dev"
    knobs = [a for k in KNOBS.get(name, []) for a in ("--knob", k)]
    args = ["eval", "-w", name, "-b", "scripted", "-n", "10", "--split", split, "--seed", "0", *knobs]
    r = CliRunner().invoke(app, [*args, "--mode", "swarm,single", "--json", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["rows"]
    assert len(rows) == 20
    bad = [(row["task_id"], row["arm"], row["metric"], row["error"]) for row in rows if row["metric"] != 1.0]
    assert not bad, bad
