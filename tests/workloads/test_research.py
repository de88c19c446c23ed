"""wide-research: fictional entities in a generated corpus, found only with search/open, scored strictly."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from agent_swarm.orchestrator.engine import Orchestrator
from agent_swarm.swarm.backend import Completion, ModelBackend, ModelRequest
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.records import EpisodeRecord, Task
from agent_swarm.swarm.testing import FunctionBackend
from agent_swarm.tools.builtin.search import Corpus
from agent_swarm.tools.corpora.fictional import ATTRIBUTES, GENERATOR, fictional_world, main
from agent_swarm.workloads import get_workload
from agent_swarm.workloads.base import Mode
from agent_swarm.workloads.research import FICTION, research_world
from agent_swarm.workloads.wide import wide_table

pytest.importorskip("bm25s")  # the 'search' extra; CI installs it

WL = get_workload("wide-research")


async def _run(task: Task, mode: Mode, orch: ModelBackend | None = None) -> EpisodeRecord:
    ep = WL.episode(task, mode)
    gold = WL.gold_policy(task, mode)
    o = Orchestrator(
        orch or gold.orchestrator,
        ep.config,
        tools=ep.tools,
        agents=ep.agents,
        subagent_backend=gold.subagent,
        reward_fn=ep.reward,
    )
    return await o.run(task)


def _answer(task: Task, cell: str | None = None, value: dict[str, str] | None = None) -> float:
    """The workload's score of a table with every asked name and ``cell`` (or ``value[column]``) in each cell."""
    kind = FICTION[task.metadata["kind"]]
    attrs = task.metadata["attrs"]
    rows = [
        {kind.key: lab, **{a: cell if value is None else value[a] for a in attrs}} for lab in task.metadata["labels"]
    ]
    text = wide_table(kind, attrs, rows)
    return WL.episode(task, "single").score(EpisodeRecord.model_construct(answer=text)).metric  # type: ignore[call-arg]


@pytest.mark.parametrize("kind", ["company", "person", "product"])
async def test_gold_reads_every_attribute_through_distractors_in_both_modes(kind: str) -> None:
    m = len(ATTRIBUTES[kind])  # type: ignore[index]
    task = WL.tasks(1, seed=3, split="dev", entities=16, attributes=m, distractors=6, missing=2, kind=kind)[0]
    assert task.metadata["parts"] == 18 and len(task.verifier_args["gold"]) == 16
    swarm = await _run(task, "swarm")
    single = await _run(task, "single")
    for rec in (swarm, single):
        assert rec.reward is not None and rec.reward.r_perf == 1.0, rec.answer
        assert rec.reward.details["success"] is True and rec.reward.details["row_f1"] == 1.0
        assert len(rec.reward.details["items"]) == 16 * m  # one item per looked-up cell, names excluded
    assert swarm.dag.stage_widths[0] == 18
    assert not any(name in (swarm.answer or "") for name in task.metadata["missing"])  # left out
    assert single.dag.critical_steps <= WL.episode(task, "single").config.max_critical_steps


@pytest.mark.parametrize("n", [2, 4, 8, 16])
async def test_the_width_curve_sizes_score_one_with_the_default_knobs(n: int) -> None:
    task = WL.tasks(1, seed=n, split="test", entities=n)[0]
    assert task.metadata["parts"] == n and task.metadata["knobs"]["entities"] == n
    assert (await _run(task, "swarm")).reward.r_perf == 1.0  # type: ignore[union-attr]


def test_a_names_only_or_copied_answer_scores_zero() -> None:
    for task in WL.tasks(6, seed=0, split="dev", entities=4, attributes=3):
        assert _answer(task, "") == 0.0
        assert _answer(task, "?") == 0.0
        assert _answer(task, "NOT FOUND") == 0.0
        label = task.metadata["labels"][0]
        assert _answer(task, label) == 0.0  # the name copied into every cell


def test_no_tool_ablation_the_most_common_values_score_about_zero() -> None:
    """An answer built without the tools: every cell the value most common in 300 other tasks' gold
    (what a model could learn about the distribution), for every asked name."""
    common: dict[str, Counter[str]] = {}
    for task in WL.tasks(300, seed=11, split="train", entities=4, attributes=6, kind="company"):
        for row in task.verifier_args["gold"]:
            for col, v in row.items():
                common.setdefault(col, Counter())[v] += 1
    for kind in ("person", "product"):
        for task in WL.tasks(150, seed=12, split="train", entities=4, attributes=5, kind=kind):
            for row in task.verifier_args["gold"]:
                for col, v in row.items():
                    common.setdefault(col, Counter())[v] += 1
    guess = {col: c.most_common(1)[0][0] for col, c in common.items()}
    scores = [_answer(t, value=guess) for t in WL.tasks(40, seed=5, split="test", entities=8, attributes=3)]
    assert sum(scores) / len(scores) < 0.02, scores


async def test_no_tool_ablation_a_single_agent_answering_from_memory_scores_zero() -> None:
    task = WL.tasks(1, seed=2, split="test", entities=4, attributes=3, kind="company")[0]
    kind = FICTION["company"]

    def guess(request: ModelRequest) -> Completion:  # plausible values, no tool call
        rows = [
            {"company": lab, "founded": "1998", "headquarters": "Springfield", "ceo": "John Smith", "employees": "500"}
            | {"ticker": lab[:4].upper(), "flagship": f"{lab.split()[0]} One"}
            for lab in task.metadata["labels"]
        ]
        return Completion(text=wide_table(kind, task.metadata["attrs"], rows))

    rec = await _run(task, "single", FunctionBackend(guess))
    assert rec.reward is not None and rec.reward.r_perf == 0.0 and not rec.dag.total_steps > 1


def test_tasks_are_deterministic_fresh_per_seed_and_never_ask_for_sub_agents() -> None:
    a = WL.tasks(4, seed=7, split="test", entities=8)
    assert a == WL.tasks(4, seed=7, split="test", entities=8)
    b = WL.tasks(4, seed=8, split="test", entities=8)
    assert not {n for t in a for n in t.metadata["labels"]} & {n for t in b for n in t.metadata["labels"]}
    for task in [*a, *b]:
        text = task.prompt.lower()
        assert not re.search(r"sub-?agent|assign|delegat|parallel|in parallel|spawn|helper", text), task.prompt
    assert "assign_task" not in WL.episode(a[0], "swarm").instructions  # says what exists, not what to do


def test_the_collection_holds_each_entity_its_near_namesake_and_news_items() -> None:
    task = WL.tasks(1, seed=1, split="dev", entities=4, distractors=3, missing=1, kind="person")[0]
    spec = task.metadata["corpus"]
    world = research_world(spec["key"], "person", 4, 3, 1, "dev")
    own = [d.title for d in world.documents if d.id.startswith("person/")]  # an entity's record: "kind/slug"
    news = [d.title for d in world.documents if d.id.startswith("news/")]
    assert len(world.documents) == 4 * (1 + 3) + 4 + 1  # own + distractors, background, a missing name's twin
    for row in task.verifier_args["gold"]:
        name = row["person"]
        assert own.count(name) == 1  # titled by the name alone, as the task writes it
        first = name.split(" ", 1)[0]
        twins = [t for t in own if t.startswith(f"{first} ") and t != name]
        assert twins, name  # a near-namesake with other facts
        assert sum(name in t for t in news) == 2  # news items naming it
    gone = task.metadata["missing"][0]
    assert gone not in own and gone in task.prompt


def _searches(task: Task) -> tuple[str, dict[str, str]]:
    """The results of one search naming every asked entity, and each entity's own search (by its name)."""
    tools = {t.name: t for t in WL.episode(task, "single").tools}
    every = tools["search"].fn(" ".join(task.metadata["labels"]), 20)
    return every, {label: tools["search"].fn(label, 5) for label in task.metadata["labels"]}


def _values(task: Task, text: str) -> int:
    rows = task.verifier_args["gold"]
    return sum(row[a] in text.replace(",", "") or row[a] in text for row in rows for a in task.metadata["attrs"])


def test_one_search_naming_every_entity_shows_no_fact_each_own_search_shows_its_record() -> None:
    # With every hit's snippet, a short record's snippet was the whole record: one search naming all 16
    # entities answered the table in one call (test seed 2011: the single agent in 2 steps at N = 16).
    for task in WL.tasks(6, seed=5, split="dev", entities=16):
        every, own = _searches(task)
        assert _values(task, every) == 0 and "doc_id: " in every
        key = task.metadata["kind"]
        for row in task.verifier_args["gold"]:
            hits = own[row[key]]
            shown = [h for h in hits.split("doc_id: ") if "\n    " in h]
            # its own record, and news items whose titles name it (distractors by design); no near-namesake
            assert [h for h in shown if not h.startswith("news/")] == [h for h in shown if f"| {row[key]} |" in h]
            mine = next(h for h in shown if f"| {row[key]} |" in h)
            assert all(row[a] in mine.replace(",", "") or row[a] in mine for a in task.metadata["attrs"])
    task = WL.tasks(1, seed=5, split="dev", entities=16, snippets="all")[0]
    assert _values(task, _searches(task)[0]) == 32
    task = WL.tasks(1, seed=5, split="dev", entities=4, snippets="none")[0]
    every, own = _searches(task)
    assert _values(task, every + "".join(own.values())) == 0


def test_a_task_file_from_before_the_snippets_knob_keeps_every_snippet() -> None:
    task = WL.tasks(1, seed=5, split="dev", entities=4, snippets="all")[0]
    md = dict(task.metadata)
    md["corpus"] = {k: v for k, v in md["corpus"].items() if k != "snippets"}  # as committed test runs hold it
    old = task.model_copy(update={"metadata": md})
    assert _searches(old) == _searches(task) != _searches(WL.tasks(1, seed=5, split="dev", entities=4)[0])
    tools = {t.name: t for t in WL.episode(WL.tasks(1, seed=5, split="dev")[0], "swarm").tools}
    assert "with a snippet where a title holds the whole query" in tools["search"].description
    with pytest.raises(ConfigError, match="snippets: Input should be 'all', 'named' or 'none'"):
        WL.tasks(1, seed=5, split="dev", snippets="some")


def test_a_task_of_another_generator_version_is_refused() -> None:
    task = WL.tasks(1, seed=0)[0]
    md = dict(task.metadata)
    md["corpus"] = {**md["corpus"], "generator": "fictional-v0"}
    with pytest.raises(ConfigError, match=r"fictional-v0.*regenerate"):
        WL.episode(task.model_copy(update={"metadata": md}), "swarm")
    with pytest.raises(ConfigError, match="attributes=6 is too many"):
        WL.tasks(1, attributes=6, kind="person")


def test_the_corpus_writer_makes_a_user_corpus_for_swarm_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "corpus.jsonl"
    assert main([str(out), "--kind", "company", "--entities", "3", "--seed", "4"]) == 0
    corpus = Corpus.from_jsonl(out)
    world = fictional_world("cli:4", "company", 3)
    assert len(corpus) == len(world.documents) and all(json.loads(line)["id"] for line in out.read_text().splitlines())
    said = capsys.readouterr().out
    assert all(r["name"] in said for r in world.entities) and "--search-corpus" in said


def test_the_generator_is_pinned_to_its_version() -> None:
    """Task files rebuild their collection from (generator version, key): a change to the documents must
    bump GENERATOR, or old task files would be scored against other documents than they were made with."""
    docs = [
        d.model_dump()
        for k in ("company", "person", "product")
        for d in fictional_world("pin", k, 3, distractors=3, missing=1).documents
    ]
    docs += [d.model_dump() for d in fictional_world("pin", "company", 2, linked=True).documents]
    digest = hashlib.sha256(json.dumps(docs, sort_keys=True).encode()).hexdigest()
    pinned = {"fictional-v2": "a215f77b8c0fcf46489012b297b9c942debcb60586c31358a32b57d27af7aee6"}
    assert pinned.get(GENERATOR) == digest, f"the documents changed: bump GENERATOR and pin {digest}"


async def test_deep_research_chains_two_hops_per_company_and_scores_the_answer_line() -> None:
    deep = get_workload("deep-research")
    tasks = deep.tasks(3, seed=1, split="test", branches=5)
    assert tasks == deep.tasks(3, seed=1, split="test", branches=5)
    for task in tasks:
        assert task.metadata["parts"] == 5 and task.metadata["corpus"]["linked"] is True
        born = task.metadata["born"]
        assert task.verifier_args["expected"] == min(born, key=lambda c: born[c])
        assert not re.search(r"sub-?agent|assign|parallel", task.prompt, re.IGNORECASE)
        for mode in ("swarm", "single"):
            ep = deep.episode(task, mode)
            gold = deep.gold_policy(task, mode)
            o = Orchestrator(
                gold.orchestrator,
                ep.config,
                tools=ep.tools,
                agents=ep.agents,
                subagent_backend=gold.subagent,
                reward_fn=ep.reward,
            )
            rec = await o.run(task)
            assert rec.reward is not None and rec.reward.r_perf == 1.0, rec.answer
        right = task.verifier_args["expected"]
        assert task.verifier_args["value"] == born[right]
        wrong = next(c for c in born if c != right)
        scorer = deep.episode(task, "single").score
        for answer, score in (
            (f"ANSWER: {wrong} ({born[wrong]})", 0.0),
            (f"ANSWER: {right}", 0.0),  # the name alone: one of the 5 listed, a guess is right 1 time in 5
            (f"ANSWER: {right} ({born[wrong]})", 0.0),
            (f"ANSWER: {right} ({born[right]} or {born[wrong]})", 0.0),
            (f"ANSWER: {right} ({born[right]})", 1.0),
            (f"{wrong}: born {born[wrong]}\nANSWER: {right}, born {born[right]}", 1.0),
        ):
            record = EpisodeRecord.model_construct(answer=answer)  # type: ignore[call-arg]
            assert scorer(record).metric == score, answer
