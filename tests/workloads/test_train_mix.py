"""train-mix: the training-task generator (wide, deep, controls), train split only, disjoint from dev/test."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.engine import Orchestrator
from agent_swarm.orchestrator.rl.gold import WorkloadTasks
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.records import Task
from agent_swarm.workloads import get_workload
from agent_swarm.workloads.base import Mode
from agent_swarm.workloads.research import research_world
from agent_swarm.workloads.splits import key_split

pytest.importorskip("bm25s")  # wide tasks and look-ups search generated collections

WL = get_workload("train-mix")


def _items(task: Task) -> set[str]:
    """What a task is made of: entity names (with their kind), customers, facts, expressions."""
    md = task.metadata
    if md.get("family") == "deep" or md["workload"] == "deep-lookup":  # companies of a generated collection
        return {f"{'company' if 'corpus' in md else 'customer'}:{x}" for x in md["labels"]}
    if "items" in md:  # a fact or a sum
        return {f"{md['kind']}:{it['key']}" for it in md["items"]}
    return {f"{md['kind']}:{x}" for x in md["labels"]}


def test_the_mix_has_every_family_in_proportion_and_every_width() -> None:
    tasks = WL.tasks(300, seed=0)
    families = Counter(t.metadata["family"] for t in tasks)
    assert 120 < families["wide"] < 180 and 35 < families["deep"] < 85 and 60 < families["control"] < 120
    widths = {t.metadata["corpus"]["entities"] for t in tasks if t.metadata["family"] == "wide"}
    assert min(widths) == 2 and max(widths) == 16 and len(widths) == 15
    for t in tasks:
        fam, md = t.metadata["family"], t.metadata
        assert md["workload"] == "train-mix" and md["split"] == "train" and t.id.startswith("train-mix-train-s0-")
        if fam == "wide":
            assert md["parts"] == len(md["labels"]) == md["corpus"]["entities"] + md["corpus"]["missing"]
        elif fam == "deep":
            assert md["parts"] == len(md["labels"]) >= 2
        else:
            assert md["parts"] == 1 and md["control"] in ("fact", "arithmetic", "lookup")
    only_controls = WL.tasks(20, seed=1, wide=0, deep=0)
    assert {t.metadata["family"] for t in only_controls} == {"control"}


def test_tasks_are_deterministic_unlimited_and_never_ask_for_sub_agents() -> None:
    a = WL.tasks(40, seed=5)
    assert a == WL.tasks(40, seed=5)
    b = WL.tasks(40, seed=6)
    assert len({t.prompt for t in [*a, *b]}) > 70  # fresh seeds, fresh tasks
    for t in a:
        assert not re.search(r"sub-?agent|assign|delegat|parallel|spawn", t.prompt, re.IGNORECASE), t.prompt
        swarm = WL.episode(t, "swarm").instructions
        assert "assign_task" not in swarm and "parallel" not in swarm and "own instance" not in swarm, swarm


def test_train_only_and_bad_knobs_are_refused() -> None:
    for split in ("dev", "test"):
        with pytest.raises(ConfigError, match="training tasks only"):
            WL.tasks(1, split=split)
    with pytest.raises(ConfigError, match="positive weight"):
        WL.tasks(1, wide=0, deep=0, control=0)
    with pytest.raises(ConfigError, match="min_entities"):
        WL.tasks(1, min_entities=8, max_entities=4)
    task = WL.tasks(1, seed=0)[0]
    with pytest.raises(ConfigError, match="family"):
        WL.episode(task.model_copy(update={"metadata": {**task.metadata, "family": "other"}}), "swarm")


def test_no_training_task_shares_anything_with_a_dev_or_test_task() -> None:
    train = set().union(*(_items(t) for seed in range(3) for t in WL.tasks(150, seed=seed)))
    held: set[str] = set()
    for split in ("dev", "test"):
        for seed in range(3):
            for n in (2, 8, 16):
                held |= set().union(
                    *(_items(t) for t in get_workload("wide-research").tasks(4, seed=seed, split=split, entities=n))
                )
            held |= set().union(*(_items(t) for t in get_workload("controls").tasks(30, seed=seed, split=split)))
            held |= set().union(
                *(_items(t) for t in get_workload("deep-lookup").tasks(10, seed=seed, split=split, branches=3))
            )
    assert len(train) > 1500 and len(held) > 400
    assert not train & held, sorted(train & held)[:5]
    # generated names are train names by construction, not by luck: each hashes to the train split
    names = [x.split(":", 1)[1] for x in train if x.split(":", 1)[0] in ("company", "person", "product")]
    assert len(names) > 1000 and {key_split(n) for n in names} == {"train"}


async def _run(task: Task, mode: Mode) -> float:
    ep = WL.episode(task, mode)
    gold = WL.gold_policy(task, mode)
    orch = Orchestrator(
        gold.orchestrator,
        ep.config,
        tools=ep.tools,
        agents=ep.agents,
        subagent_backend=gold.subagent,
        reward_fn=ep.reward,
    )
    rec = await orch.run(task)
    assert rec.reward is not None
    if task.metadata["family"] == "control":
        assert not rec.subagent_results and rec.reward.details["fanned_out"] == 0.0
    return rec.reward.r_perf


@pytest.mark.parametrize("mode", ["swarm", "single"])
async def test_gold_scores_one_on_every_family(mode: Mode) -> None:
    tasks = WL.tasks(24, seed=2, max_entities=6)
    assert {t.metadata["family"] for t in tasks} == {"wide", "deep", "control"}
    assert [await _run(t, mode) for t in tasks] == [1.0] * 24


def test_swarm_rollout_and_train_configs_use_it(tmp_path: Path) -> None:
    args = ["-w", "train-mix", "-b", "gold", "-n", "4", "-k", "2", "--knob", "max_entities=4", "--json"]
    r = CliRunner().invoke(app, ["rollout", "--quiet", *args, "--out", str(tmp_path / "r")])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["episodes"] == 8 and summary["mean_r_perf"] == 1.0
    spec = WorkloadTasks(workload="train-mix", n=5, seed=3, knobs={"max_entities": 4})
    assert [t.id for t in spec.tasks()] == [f"train-mix-train-s3-{i}" for i in range(5)]


async def test_fictional_chains_need_both_hops_and_have_one_answer() -> None:
    tasks = WL.tasks(6, seed=4, wide=0, control=0, fiction_deep=1.0)
    for task in tasks:
        md = task.metadata
        assert md["family"] == "deep" and md["corpus"]["linked"] and md["parts"] == len(md["labels"]) >= 2
        spec = md["corpus"]
        world = research_world(spec["key"], "company", spec["entities"], spec["distractors"], 0, "train", True)
        people = {d.fields["name"]: d.fields for d in world.documents if d.kind == "person"}
        for company in world.entities:
            ceo = people[company["ceo"]]  # the second hop exists, and says where they work
            assert ceo["employer"] == company["name"] and md["born"][company["name"]] == ceo["born"]
            first = company["ceo"].split(" ")[0]
            assert any(n != company["ceo"] and n.startswith(f"{first} ") for n in people)  # a near-namesake
        assert task.verifier_args["expected"] == min(md["born"], key=lambda c: md["born"][c])
        assert list(md["born"].values()).count(min(md["born"].values())) == 1
        assert "sub-agent" not in task.prompt and "ANSWER:" in task.prompt
        for mode in ("swarm", "single"):
            assert await _run(task, mode) == 1.0


def test_swarm_train_sft_keeps_the_gold_transcript_of_every_task(tmp_path: Path) -> None:
    """SFT's warm start (gold transcripts, exact tokens) takes train-mix tasks of every family."""
    for module in ("torch", "transformers", "peft", "matplotlib"):
        pytest.importorskip(module)
    from agent_swarm.orchestrator.rl.gold import read_examples

    (tmp_path / "train.toml").write_text(
        'run_dir = "run"\nsteps = 1\ntasks_per_step = 1\n[tiny]\nhidden_size = 32\nintermediate_size = 64\n'
        '[[workloads]]\nworkload = "train-mix"\nn = 6\nseed = 1\nknobs = { max_entities = 4 }\n'
        "[sft]\nsteps = 1\nbatch_size = 2\n[rollout]\ngroup_size = 2\n"
    )
    r = CliRunner().invoke(app, ["train", "sft", "--config", str(tmp_path / "train.toml"), "--no-progress"])
    assert r.exit_code == 0, r.output
    examples = read_examples(tmp_path / "run" / "sft" / "data.jsonl")
    assert len(examples) == 6 and all(e.workload == "train-mix" and e.r_perf == 1.0 for e in examples)
    families = {t.id: t.metadata["family"] for t in WL.tasks(6, seed=1, max_entities=4)}
    assert {families[e.task_id] for e in examples} == {"wide", "deep", "control"}
