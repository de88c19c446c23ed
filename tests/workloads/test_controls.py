"""controls: single-fact questions answered without sub-agents; strict scoring and the fan-out metric."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.engine import Orchestrator
from agent_swarm.orchestrator.eval import run_eval
from agent_swarm.swarm.backend import Completion, ModelBackend, ModelRequest
from agent_swarm.swarm.records import EpisodeRecord, Task
from agent_swarm.swarm.testing import FunctionBackend, call
from agent_swarm.workloads import get_workload
from agent_swarm.workloads.base import Mode, tool_messages
from agent_swarm.workloads.controls import CONTROL_KINDS, lookup_right

pytest.importorskip("bm25s")  # look-up controls search a generated collection

WL = get_workload("controls")


async def _run(
    task: Task, mode: Mode, orch: ModelBackend | None = None, sub: ModelBackend | None = None
) -> EpisodeRecord:
    ep = WL.episode(task, mode)
    gold = WL.gold_policy(task, mode)
    o = Orchestrator(
        orch or gold.orchestrator,
        ep.config,
        tools=ep.tools,
        agents=ep.agents,
        subagent_backend=sub or gold.subagent,
        reward_fn=ep.reward,
    )
    return await o.run(task)


def _task(kind: str, seed: int = 0) -> Task:
    return WL.tasks(1, seed=seed, split="dev", kinds=[kind])[0]


def _score(task: Task, answer: str) -> float:
    return WL.episode(task, "single").score(EpisodeRecord.model_construct(answer=answer, subagent_results=())).metric  # type: ignore[call-arg]


@pytest.mark.parametrize("kind", CONTROL_KINDS)
@pytest.mark.parametrize("mode", ["swarm", "single"])
async def test_gold_answers_right_without_any_sub_agent(kind: str, mode: Mode) -> None:
    for seed in range(3):
        task = _task(kind, seed)
        assert task.metadata["parts"] == 1 and task.metadata["control"] == kind
        rec = await _run(task, mode)
        assert rec.reward is not None and rec.reward.r_perf == 1.0, (task.prompt, rec.answer)
        assert rec.reward.details["fanned_out"] == 0.0 and not rec.subagent_results
        assert rec.dag.critical_steps == (3 if kind == "lookup" else 1)  # one step, or search, open, answer


async def test_fan_out_is_a_per_episode_metric_even_when_the_answer_is_right() -> None:
    task = _task("fact")
    item = task.metadata["items"][0]

    def delegate(request: ModelRequest) -> Completion:
        reports = tool_messages(request, "assign_task")
        if reports or request.tool_choice == "none":
            return Completion(text=f"{item['key']}: {item['answer'][0]}")
        return Completion(tool_calls=(call("assign_task", agent="worker", task=task.prompt),))

    worker = FunctionBackend(lambda r: Completion(text=str(item["answer"][0])))
    rec = await _run(task, "swarm", FunctionBackend(delegate), worker)
    assert rec.reward is not None and rec.reward.r_perf == 1.0
    assert rec.reward.details["fanned_out"] == 1.0 and rec.reward.details["subagents"] == 1


async def test_the_eval_rows_carry_the_fan_out_of_each_episode(tmp_path: Path) -> None:
    tasks = WL.tasks(3, seed=4, split="dev")

    def gold(task: Task, mode: Mode) -> tuple[ModelBackend, ModelBackend]:
        p = WL.gold_policy(task, mode)
        return p.orchestrator, p.subagent

    report = await run_eval(WL, tasks, gold, out_dir=tmp_path, run_id="c", backend_name="gold")
    assert len(report.rows) == 6 and all(r.details["fanned_out"] == 0.0 and r.metric == 1.0 for r in report.rows)


def test_facts_and_sums_are_scored_strictly() -> None:
    fact = next(t for t in WL.tasks(40, seed=1, split="train", kinds=["fact"]) if t.metadata["kind"] == "capital")
    key, answer = fact.metadata["items"][0]["key"], fact.metadata["items"][0]["answer"][0]
    rival = "Tokyo" if answer != "Tokyo" else "Paris"
    assert _score(fact, answer) == 1.0
    assert _score(fact, f"The capital city of {key} is {answer}.") == 1.0
    for bad in (f"{answer} or {rival}", f"Maybe {answer}", rival, f"{answer}, {rival}", f"{rival}/{answer}", ""):
        assert _score(fact, bad) == 0.0, bad
    sum_ = _task("arithmetic")
    expr, value = sum_.metadata["items"][0]["key"], int(sum_.metadata["items"][0]["answer"][0])
    assert _score(sum_, str(value)) == 1.0 and _score(sum_, f"{expr} = {value}") == 1.0
    for bad in (f"{value - 1} or {value}", f"{value - 1}, {value}, {value + 1}", str(value + 1), "I am not sure"):
        assert _score(sum_, bad) == 0.0, bad


def test_a_lookup_is_right_only_with_the_value_alone() -> None:
    task = next(t for t in WL.tasks(30, seed=2, split="train", kinds=["lookup"]) if t.metadata["attr"] == "founded")
    name, gold, rivals = task.metadata["labels"][0], task.metadata["gold"], task.metadata["rivals"]
    assert rivals and gold not in rivals  # the near-namesake's and the news item's years
    assert _score(task, gold) == 1.0 and _score(task, f"{name} was founded in {gold}.") == 1.0
    for bad in (f"{gold} or {int(gold) + 1}", f"{gold}, {rivals[0]}", rivals[0], f"probably {gold}", "NOT FOUND"):
        assert _score(task, bad) == 0.0, bad
    assert lookup_right("Velmora Foods", "Velmora Foods", ["Kesuna Audio"], numeric=False)
    assert not lookup_right("Velmora Foods or Kesuna Audio", "Velmora Foods", ["Kesuna Audio"], numeric=False)
    assert not lookup_right("Velmora Foods; also Kesuna Audio", "Velmora Foods", ["Kesuna Audio"], numeric=False)
    # a product's model number in the question is not a competing number
    assert lookup_right("The Somi R78 weighs 1,462 grams.", "1462", ["5145"], numeric=True, question="the Somi R78")


def test_a_number_look_up_scores_an_over_complete_answer_and_no_competing_value() -> None:
    """Test seed 1126: the single agent answered with the whole document and was marked wrong, because
    any other number counted as a competing value."""
    doc = (
        "The Seten G46 is a drone made by Stydax Shipping, first sold in 2022. It is priced at $825.39 and "
        "weighs 1,148 grams. SKU: SE-85058"
    )
    q = "In which year was the Seten G46 first sold?"
    rivals = ["2000", "2008"]

    def right(answer: str, gold: str = "2022", attr: str = "launched", rv: list[str] = rivals) -> bool:
        return lookup_right(answer, gold, rv, numeric=True, question=q, attr=attr)

    assert right(doc) and right("2022") and right("It was first sold in 2022.")
    assert right(doc, "1148", "weight_g", ["905"]) and right(doc, "825.39", "price", ["12.50"])
    for bad in (
        "2021, 2022",  # two candidates
        "It was first sold in 2021, 2022.",
        "first sold in 2022; some sources say it was released in 2019",  # another launch year
        "first sold in 2022. 2019. 2020.",  # bare numbers beside it
        "first sold in 2022, priced at $1, weighs 2 g, SKU 3, 4 units, 5 colours",  # too many others
        doc.replace("2022", "2000") + " Or 2022.",  # a rival value
        "2022 or 2023",
        "maybe 2022",
        " ".join(str(n) for n in range(1990, 2030)),  # a dump
    ):
        assert not right(bad), bad
    # an attribute with no cue list keeps the strict rule: no other number at all
    assert not lookup_right(doc, "2022", rivals, numeric=True, question=q, attr="unknown")
    assert lookup_right("2022", "2022", rivals, numeric=True, question=q, attr="unknown")


def test_tasks_rotate_kinds_are_deterministic_and_never_ask_for_sub_agents() -> None:
    tasks = WL.tasks(9, seed=3, split="test")
    assert [t.metadata["control"] for t in tasks] == list(CONTROL_KINDS) * 3
    assert tasks == WL.tasks(9, seed=3, split="test")
    for t in tasks:
        assert not re.search(r"sub-?agent|assign|delegat|parallel|spawn", t.prompt, re.IGNORECASE), t.prompt
    assert WL.episode(tasks[0], "swarm").instructions == ""  # a fact: what a newcomer's `swarm run` gets


@pytest.mark.parametrize("name", ["controls", "wide-research"])
def test_swarm_eval_runs_the_gold_policy_of_the_new_workloads(name: str, tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["eval", "-w", name, "-b", "scripted", "-n", "3", "--json", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["split"] == "dev" and len(report["rows"]) == 6 and all(row["metric"] == 1.0 for row in report["rows"])
    fanout = {m: s["fanout_rate"] for m, s in report["summaries"].items()}
    assert fanout == ({"swarm": 0.0, "single": 0.0} if name == "controls" else {"swarm": 1.0, "single": 0.0})


def test_the_terminal_table_counts_one_delegated_sub_agent_as_delegation_not_as_fan_out() -> None:
    """On the controls dev split the swarm answered 2 of 6 questions through one sub-agent each; the
    table's fan-out (>= 2 in a stage) read 0.00, so delegation is its own row."""
    from agent_swarm.orchestrator.eval import EpisodeRow, summarise

    def row(width: int) -> EpisodeRow:
        return EpisodeRow(
            task_id="t", episode_id="e", mode="swarm", status="completed", metric=1.0, success=True,
            critical_steps=1, total_steps=1, wall_time_s=1.0, tokens=1, max_width=width,
        )  # fmt: skip

    summary = summarise("swarm", [row(0), row(1), row(1), row(3)])
    assert summary.delegation_rate == 0.75 and summary.fanout_rate == 0.25
