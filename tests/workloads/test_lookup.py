"""Wide and deep lookup over the offline τ² corpus with the real BM25 search tools."""

from __future__ import annotations

import re

import pytest

from agent_swarm.orchestrator.engine import Orchestrator
from agent_swarm.orchestrator.eval import arm_config
from agent_swarm.swarm.backend import Completion, ModelBackend, ModelRequest
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.records import EpisodeRecord, Task
from agent_swarm.swarm.testing import FunctionBackend
from agent_swarm.swarm.verifiers import verify
from agent_swarm.workloads import get_workload
from agent_swarm.workloads.base import Mode, Workload

pytest.importorskip("bm25s")  # the 'search' extra; CI installs it

WIDE = get_workload("wide-lookup")
DEEP = get_workload("deep-lookup")


async def _run(
    wl: Workload, task: Task, mode: Mode, orch: ModelBackend | None = None, *, arm: str | None = None
) -> EpisodeRecord:
    """One episode; with ``arm``, as ``swarm eval`` runs that arm (its settings, no sub-agents when single)."""
    ep = wl.episode(task, mode)
    gold = wl.gold_policy(task, mode)
    o = Orchestrator(
        orch or gold.orchestrator,
        ep.config if arm is None else arm_config(ep, arm),
        tools=ep.tools,
        agents=ep.agents if arm is None or mode == "swarm" else (),
        subagent_backend=gold.subagent,
        reward_fn=ep.reward,
    )
    return await o.run(task)


@pytest.mark.parametrize("kind", ["retail_user", "airline_user", "airline_flight", "retail_product"])
async def test_wide_n16_gold_reaches_one_in_both_modes_with_a_4_5x_ratio(kind: str) -> None:
    task = WIDE.tasks(1, seed=2, entities=16, attributes=4, kind=kind)[0]
    swarm = await _run(WIDE, task, "swarm")
    single = await _run(WIDE, task, "single", arm="single")  # the single arm: one call per turn
    parallel = await _run(WIDE, task, "single", arm="single-parallel")  # single-parallel: every call of a turn
    for rec in (swarm, single, parallel):
        assert rec.reward is not None and rec.reward.r_perf == 1.0, rec.answer
        assert rec.reward.details["success"] is True
    assert swarm.dag.stage_widths[0] == 16
    assert single.dag.critical_steps / swarm.dag.critical_steps >= 4.5
    # searches in one turn, opens in the next, then the table: fewer critical steps than the swarm's
    assert parallel.dag.critical_steps == 3 and set(parallel.dag.stage_widths) == {0}


async def test_every_attribute_is_readable_from_the_documents() -> None:
    for kind, m in (("retail_user", 6), ("airline_user", 5), ("airline_flight", 4), ("retail_product", 4)):
        task = WIDE.tasks(1, seed=5, entities=6, attributes=m, kind=kind)[0]
        rec = await _run(WIDE, task, "single")
        assert rec.reward is not None and rec.reward.r_perf == 1.0, (kind, rec.answer)


async def test_distractors_are_left_out_and_a_hallucinated_row_costs_precision() -> None:
    task = WIDE.tasks(1, seed=0, entities=6, attributes=2, distractors=3, kind="retail_user")[0]
    fakes = task.metadata["distractors"]
    assert len(fakes) == 3 and all(f in task.prompt for f in fakes)
    rec = await _run(WIDE, task, "swarm")
    assert rec.reward is not None and rec.reward.r_perf == 1.0
    assert not any(f in (rec.answer or "") for f in fakes)

    gold = WIDE.gold_policy(task, "swarm").orchestrator

    async def hallucinate(request: ModelRequest) -> Completion:
        out = await gold.complete(request)
        if out.tool_calls:
            return out
        return Completion(text=out.text + f"\n| {fakes[0]} | x | y |")

    bad = await _run(WIDE, task, "swarm", FunctionBackend(hallucinate))
    assert bad.reward is not None
    assert bad.reward.details["item_precision"] < 1.0 and bad.reward.details["item_recall"] == 1.0


async def test_task_files_score_the_same_with_the_plain_table_verifier() -> None:
    task = WIDE.tasks(1, seed=4, entities=5, attributes=3)[0]
    rec = await _run(WIDE, task, "swarm")
    assert task.verifier == "table"
    verdict = await verify("table", rec.answer or "", task.verifier_args)
    assert rec.reward is not None and verdict.score == rec.reward.r_perf == 1.0
    verdict = await verify("table", "I could not find anything.", task.verifier_args)
    assert verdict.score == 0.0


async def test_deep_lookup_gold_answers_the_joined_question() -> None:
    for task in DEEP.tasks(3, seed=0, branches=4):
        totals = task.metadata["totals"]
        assert len(set(totals.values())) == 4  # no tie
        swarm = await _run(DEEP, task, "swarm")
        single = await _run(DEEP, task, "single")
        for rec in (swarm, single):
            assert rec.reward is not None and rec.reward.r_perf == 1.0, rec.answer
        assert swarm.dag.stage_widths[0] == 4
        assert single.dag.critical_steps > swarm.dag.critical_steps
        verdict = await verify("pick", swarm.answer or "", task.verifier_args)
        assert verdict.score == 1.0


async def test_deep_lookup_wrong_answer_scores_zero() -> None:
    task = DEEP.tasks(1, seed=1)[0]
    loser = min(task.metadata["totals"], key=task.metadata["totals"].get)
    rec = await _run(DEEP, task, "single", FunctionBackend(lambda r: Completion(text=f"ANSWER: {loser}")))
    assert rec.reward is not None and rec.reward.r_perf == 0.0


async def test_deep_lookup_needs_the_total_that_picks_the_customer_not_a_guessed_name() -> None:
    # A name alone is one of the B candidates the task lists: right 1 time in B without a look-up.
    task = DEEP.tasks(1, seed=1)[0]
    totals = task.metadata["totals"]
    best = max(totals, key=totals.get)
    wrong = min(totals.values())
    for answer, score in (
        (f"ANSWER: {best}", 0.0),
        (f"ANSWER: {best} (${wrong:.2f})", 0.0),
        (f"ANSWER: {best} (${totals[best]:.2f})", 1.0),
        (f"ANSWER: {best}, total ${totals[best]:,.2f}", 1.0),
    ):
        rec = await _run(DEEP, task, "single", _says(answer))
        assert rec.reward is not None and rec.reward.r_perf == score, answer
        assert (await verify("pick", answer, task.verifier_args)).score == score  # the task file's verifier agrees


def test_knobs_are_validated() -> None:
    with pytest.raises(ConfigError, match="attributes"):
        WIDE.tasks(1, attributes=6, kind="airline_flight")
    with pytest.raises(ConfigError, match="kind"):
        WIDE.tasks(1, kind="hotel")
    with pytest.raises(ConfigError, match="branches"):
        DEEP.tasks(1, branches=1)
    a, b = WIDE.tasks(2, seed=9), WIDE.tasks(2, seed=9)
    assert [t.prompt for t in a] == [t.prompt for t in b]
    train = {lab for t in WIDE.tasks(20, seed=0, entities=10, kind="airline_flight") for lab in t.metadata["labels"]}
    test = {
        lab
        for t in WIDE.tasks(20, seed=0, entities=10, kind="airline_flight", split="test")
        for lab in t.metadata["labels"]
    }
    assert not train & test


async def test_count_columns_are_asked_as_counts_and_times_match_as_clock_times() -> None:
    # The gold of payment_methods is how many there are; a prompt that only named the column was
    # answered with the list (the 1.5B swarm: right methods, 0 for the column). A flight's arrival is
    # "22:00:00" in the records and "arrival 22:00:00 EST" in its document: both are right answers.
    users = WIDE.tasks(1, seed=0, entities=2, attributes=6, kind="retail_user")[0]
    assert "orders (how many)" in users.prompt and "payment_methods (how many)" in users.prompt
    assert "user_id (" not in users.prompt and "email (" not in users.prompt
    flights = WIDE.tasks(1, seed=0, entities=3, attributes=4, kind="airline_flight")[0]
    rec = await _run(WIDE, flights, "single")
    assert rec.reward is not None and rec.reward.r_perf == 1.0
    times = re.compile(r"\b\d\d:\d\d:\d\d(?:\+\d)?")
    assert len(times.findall(rec.answer or "")) == 6  # departure and arrival of 3 flights
    zoned = times.sub(lambda m: f"{m[0]} EST", rec.answer or "")  # as the documents write them
    verdict = await verify("table", zoned, flights.verifier_args)
    assert verdict.score == 1.0, zoned
    wrong = times.sub("23:59:59 EST", rec.answer or "")
    verdict = await verify("table", wrong, flights.verifier_args)
    assert verdict.details["column_scores"]["arrival"] == verdict.details["column_scores"]["departure"] == 0.0


def _says(text: str) -> FunctionBackend:
    def answer(request: ModelRequest) -> Completion:
        return Completion(text=text)

    return FunctionBackend(answer)


async def test_deep_lookup_hedging_over_the_candidates_scores_zero() -> None:
    task = DEEP.tasks(1, seed=1)[0]
    totals = task.metadata["totals"]
    names = sorted(totals, key=totals.get)  # the right one last: the old scorer took the last ANSWER line
    for hedge in (
        "\n".join(f"ANSWER: {n} (${totals[n]:.2f})" for n in names),
        f"ANSWER: {' or '.join(names)}",
        f"ANSWER: {names[-1]} (${totals[names[-1]]:.2f} or ${totals[names[0]]:.2f})",
    ):
        rec = await _run(DEEP, task, "single", _says(hedge))
        assert rec.reward is not None and rec.reward.r_perf == 0.0 and rec.reward.details["items"] == {"answer": 0.0}
        assert (await verify("pick", hedge, task.verifier_args)).score == 0.0  # the task file's verifier agrees


async def test_wide_lookup_copying_the_names_scores_zero() -> None:
    # The shipped 0.5B adapter's non-zero wide-lookup episodes: the names in a table, every attribute wrong.
    task = WIDE.tasks(1, seed=0, entities=4, attributes=2, kind="retail_user")[0]
    attrs = task.metadata["attrs"]
    rows = [f"| {lab} | {' | '.join(lab for _ in attrs)} |" for lab in task.metadata["labels"]]
    copied = "\n".join([f"| customer | {' | '.join(attrs)} |", "|---" * (len(attrs) + 1) + "|", *rows])
    names_only = "\n".join(f"- {lab}" for lab in task.metadata["labels"])
    for answer in (copied, names_only, task.prompt):
        rec = await _run(WIDE, task, "single", _says(answer))
        assert rec.reward is not None and rec.reward.r_perf == 0.0, answer
        assert not any(rec.reward.details.get("items", {}).values())


def test_default_knobs_draw_only_kinds_whose_split_pool_fits() -> None:
    for split in ("dev", "test"):  # 16 entities: only the flights pool is that large outside train
        tasks = WIDE.tasks(6, seed=0, split=split)
        assert {t.metadata["kind"] for t in tasks} == {"airline_flight"}
    assert WIDE.tasks(8, seed=3) == WIDE.tasks(8, seed=3)
    with pytest.raises(ConfigError, match="too many"):
        WIDE.tasks(1, split="dev", kind="airline_user")  # a kind asked for by name is not swapped


def test_wide_lookup_search_shows_a_snippet_only_where_the_query_names_the_hit() -> None:
    task = WIDE.tasks(1, seed=0, split="dev", entities=4, attributes=2, kind="airline_user")[0]
    tools = {t.name: t for t in WIDE.episode(task, "single").tools}
    labels = task.metadata["labels"]
    found = tools["search"].fn(" ".join(labels), 20)
    assert "@example.com" not in found  # one search naming every customer shows no record's facts
    for line in found.splitlines():
        assert re.fullmatch(r"doc_id: \S+ \| .+ \| score [\d.]+", line), line
    own = tools["search"].fn(labels[0], 5)  # a look-up by name: the records titled so show their text
    assert re.search(rf"\| {labels[0]} \(airline user \w+\) \| score [\d.]+\n    .*@example\.com", own), own
    md = dict(task.metadata)
    md["knobs"] = {k: v for k, v in md["knobs"].items() if k != "snippets"}  # a task file from before the knob
    old = {t.name: t for t in WIDE.episode(task.model_copy(update={"metadata": md}), "single").tools}
    assert "@example.com" in old["search"].fn(" ".join(labels), 20)
    # The swarm is told what exists, not what to do (as in wide research): no fan-out recipe.
    assert "assign_task" not in WIDE.episode(task, "swarm").instructions
