"""Controls against spurious parallelism: single-fact questions the orchestrator should answer itself.

Three kinds, asked the way people type them, none mentioning sub-agents:

* ``fact`` — one fact a model knows ("What is the capital city of Portugal?"), from the starter's
  tables and splits (:func:`agent_swarm.workloads.starter.fact_items`); no tools;
* ``arithmetic`` — one small sum, difference or product ("What is 47 + 38?"); no tools;
* ``lookup`` — one attribute of one fictional entity ("In which year was Drari Robotics founded?")
  in a generated collection with its near-namesake and a news item (``agent_swarm.tools.corpora.fictional``);
  ``search``/``open`` are the tools, and the orchestrator can call them itself.

The right behaviour is one answer without any sub-agent. Scoring is strict: a fact or a sum is right
only when its value is attributed to the question with no hedge and no competitor
(:func:`agent_swarm.workloads.starter.score_answer`); a lookup is right when the answer holds the value, a segment
holding it does not hedge, and no other candidate is offered (another entity's value of the same
attribute, or for a number any other number). The metric is rightness; ``details["fanned_out"]``
(1.0 when the episode created any sub-agent) is the per-episode fan-out, whose mean is the fan-out
rate (target ≤ 10 %). ``metadata["parts"]`` is 1.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal, get_args

from pydantic import Field

from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.function_backend import FunctionBackend, call
from agent_swarm.swarm.records import EpisodeRecord, Task
from agent_swarm.swarm.verifiers.attribution import clauses, fold, hedged, segments
from agent_swarm.tools.corpora.fictional import ATTRIBUTES, FICTIONAL_KINDS, GENERATOR, FictionalKind
from agent_swarm.workloads.base import Episode, GoldPolicy, Knobs, Mode, Score, Workload, tool_messages
from agent_swarm.workloads.research import FICTION, SWARM_NOTE, research_tools, research_world
from agent_swarm.workloads.splits import key_split, split_rng
from agent_swarm.workloads.starter import KINDS as STARTER_KINDS
from agent_swarm.workloads.starter import fact_items, fact_question, score_answer
from agent_swarm.workloads.wide import AGENT, WIDE_RESEARCHER, own_hit

__all__ = [
    "CONTROL_KINDS",
    "ControlKind",
    "ControlsKnobs",
    "ControlsWorkload",
    "control_episode",
    "control_gold",
    "control_task",
    "lookup_right",
]

NAME = "controls"
ControlKind = Literal["fact", "arithmetic", "lookup"]
CONTROL_KINDS: tuple[ControlKind, ...] = get_args(ControlKind)
FACT_KINDS = tuple(k for k in STARTER_KINDS if k != "arithmetic")

_QUESTIONS: dict[str, str] = {
    "founded": "In which year was {name} founded?",
    "headquarters": "In which town is {name} headquartered?",
    "ceo": "Who is the chief executive of {name}?",
    "employees": "How many people does {name} employ?",
    "ticker": "What is the stock ticker of {name}?",
    "flagship": "What is the best-known product of {name}?",
    "born": "In which year was {name} born?",
    "hometown": "Which town is {name} from?",
    "employer": "Which company does {name} work at?",
    "role": "What is {name}'s occupation?",
    "email": "What is {name}'s email address?",
    "maker": "Which company makes the {name}?",
    "launched": "In which year was the {name} first sold?",
    "price": "How much does the {name} cost, in dollars?",
    "weight_g": "How much does the {name} weigh, in grams?",
    "sku": "What is the SKU of the {name}?",
}
_NUMERIC = frozenset({"founded", "employees", "born", "launched", "price", "weight_g"})
_NUMBER_RE = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")
_SINGLE = "You are a helpful assistant. Answer the question."
_SINGLE_LOOKUP = (
    "You are a research assistant. Work alone: search the name, open the id of the result whose title is "
    "that entity, then answer."
)


class ControlsKnobs(Knobs):
    kinds: tuple[ControlKind, ...] = Field(CONTROL_KINDS, min_length=1, description="fact, arithmetic, lookup")


def _numbers(text: str) -> set[float]:
    return {float(m.group(0).replace(",", "")) for m in _NUMBER_RE.finditer(text)}


_CUES: dict[str, re.Pattern[str]] = {
    attr: re.compile(rf"(?<![^\W\d_]){pattern}", re.IGNORECASE)
    for attr, pattern in {
        "founded": r"(?:found|establish|start|since|year)",
        "employees": r"(?:employ|staff|people|worker|headcount|person)",
        "born": r"(?:born|birth|year|age)",
        "launched": r"(?:sold|launch|releas|introduc|market|year|debut|on sale)",
        "price": r"(?:\$|pric|cost|dollar|usd|sells? for)",
        "weight_g": r"(?:weigh|gram|g\b|kg|mass|heav)",
    }.items()
}
"""Words that say a number is the asked attribute's: another number beside them is a competing value."""
_MAX_OTHER_NUMBERS = 4
"""Other facts an over-complete answer may carry (the rest of the entity's document), each labelled."""
_WORD = re.compile(r"[^\W\d_]{2,}")


def lookup_right(
    answer: str, gold: str, rivals: Sequence[str], *, numeric: bool, question: str = "", attr: str = ""
) -> bool:
    """Whether ``answer`` gives ``gold`` as the one value: it holds it, no segment holding it hedges,
    and it offers no other candidate (a rival value anywhere; for a number, see :func:`_numbers_right`)."""
    if numeric:
        return _numbers_right(answer, gold, rivals, question, _CUES.get(attr))
    g, text = fold(gold), fold(answer)
    holding = [s for s in segments(answer) if g in fold(s)]
    rival_named = any(fold(r) in text for r in rivals if fold(r) != g and g not in fold(r))
    return bool(holding) and not any(map(hedged, holding)) and not rival_named


def _numbers_right(answer: str, gold: str, rivals: Sequence[str], question: str, cue: re.Pattern[str] | None) -> bool:
    """A number look-up: the gold number in an unhedged segment and no rival value. Other numbers (not
    in the question) may stand beside it only as other labelled facts, as in an answer that repeats the
    entity's document ("first sold in 2022. It is priced at $825.39 and weighs 1,148 grams."): at most
    :data:`_MAX_OTHER_NUMBERS`, each in a clause with words that do not name the asked attribute, and
    the gold's clause names it. "2021, 2022", "sold in 2021, 2022" and a dump of numbers do not score."""
    want = float(gold.replace(",", ""))
    allowed = _numbers(question) | {want}
    segs = segments(answer)
    if not any(want in _numbers(s) for s in segs) or any(hedged(s) for s in segs if want in _numbers(s)):
        return False
    rival_values = {float(r.replace(",", "")) for r in rivals if _NUMBER_RE.fullmatch(r.strip())}
    others = _numbers(answer) - allowed
    if others & rival_values:
        return False
    if not others:
        return True
    units = [c for s in segs for c in clauses(s)]
    gold_units = [c for c in units if want in _numbers(c)]
    other_units = [c for c in units if _numbers(c) - allowed]
    return (
        cue is not None
        and len(others) <= _MAX_OTHER_NUMBERS
        and any(cue.search(c) for c in gold_units)
        and all(_WORD.search(c) and not cue.search(c) for c in other_units)
    )


def _arithmetic(rng: random.Random, split: str) -> dict[str, Any]:
    while True:
        op = rng.choice(("+", "-", "*"))
        a, b = (rng.randint(2, 9), rng.randint(11, 99)) if op == "*" else (rng.randint(11, 99), rng.randint(11, 99))
        if op == "-" and a < b:
            a, b = b, a
        key = f"{a} {op} {b}"
        if key_split(key) == split and a != b:
            return {"key": key, "answer": [str(a * b if op == "*" else a + b if op == "+" else a - b)]}


def control_task(
    workload: str, task_id: str, kind: ControlKind, rng: random.Random, *, split: str, seed: int, knobs: dict[str, Any]
) -> Task:
    """One single-fact task of ``kind`` (``train-mix`` makes its controls with it too)."""
    md: dict[str, Any] = {"workload": workload, "control": kind, "parts": 1, "split": split, "seed": seed}
    md["knobs"] = knobs
    if kind == "fact":
        fk = rng.choice(FACT_KINDS)
        item = rng.choice(fact_items(fk, split))
        md |= {"kind": fk, "items": [item]}
        prompt = fact_question(fk, item["key"])
    elif kind == "arithmetic":
        item = _arithmetic(rng, split)
        md |= {"kind": "arithmetic", "items": [item]}
        prompt = f"What is {item['key']}?"
    else:
        ek: FictionalKind = rng.choice(FICTIONAL_KINDS)
        attr = rng.choice(ATTRIBUTES[ek])
        world = research_world(task_id, ek, 1, 2, 0, split)
        rec = world.entities[0]
        others = [d.fields for d in world.documents if d.kind == ek and d.fields.get("name") != rec["name"]]
        spec = FICTION[ek].attr(attr)
        md |= {
            "kind": ek,
            "attr": attr,
            "labels": [rec["name"]],
            "gold": spec.gold(rec),
            "rivals": sorted({spec.gold(o) for o in others} - {spec.gold(rec)}),
            "corpus": {"generator": GENERATOR, "key": task_id, "kind": ek, "entities": 1, "distractors": 2}
            | {"missing": 0, "split": split},
        }
        prompt = _QUESTIONS[attr].format(name=rec["name"]) + " Look it up in the document collection; do not guess."
    return Task(id=task_id, prompt=prompt, metadata=md)


def _scorer(task: Task) -> Callable[[EpisodeRecord], Score]:
    md = task.metadata

    def right(answer: str) -> bool:
        if md["control"] == "lookup":
            numeric = md["attr"] in _NUMERIC
            return lookup_right(
                answer, md["gold"], md["rivals"], numeric=numeric, question=task.prompt, attr=md["attr"]
            )
        return score_answer(answer, md["items"], md["kind"])[0]

    def scorer(record: EpisodeRecord) -> Score:
        ok = right(record.answer or "")
        subs = len(record.subagent_results)
        return Score(
            metric=float(ok),
            success=ok,
            details={"control": md["control"], "fanned_out": float(subs > 0), "subagents": subs},
            items={"answer": float(ok)},
        )

    return scorer


class ControlsWorkload(Workload):
    name = NAME
    metric = "accuracy"
    description = "single-fact questions (a fact, a sum, one look-up) to answer without sub-agents; fan-out rate"
    knobs_model = ControlsKnobs

    def tasks(self, n: int, *, seed: int = 0, split: str = "train", **knobs: Any) -> list[Task]:
        kn = self.request(n, split, knobs, ControlsKnobs)
        rng = split_rng(self.name, split, seed)
        out = []
        for i in range(n):
            tid = f"{self.name}-{split}-s{seed}-{i}"
            kind = kn.kinds[i % len(kn.kinds)]
            out.append(control_task(self.name, tid, kind, rng, split=split, seed=seed, knobs=kn.model_dump()))
        return out

    def episode(self, task: Task, mode: Mode) -> Episode:
        self.check_task(task)
        return control_episode(task, mode)

    def gold_policy(self, task: Task, mode: Mode, *, latency_s: float = 0.0) -> GoldPolicy:
        self.check_task(task)
        return control_gold(task, mode, latency_s=latency_s)


def control_episode(task: Task, mode: Mode) -> Episode:
    """The episode of a control: no tools for a fact or a sum, ``search``/``open`` for a look-up (and the
    researcher sub-agent type, which it should not need)."""
    if task.metadata["control"] == "lookup":
        return Episode.one_agent(
            task,
            mode,
            tools=research_tools(task),
            agent=AGENT,
            system_prompt=WIDE_RESEARCHER,
            instructions={"swarm": SWARM_NOTE, "single": _SINGLE_LOOKUP},
            scorer=_scorer(task),
            config=SwarmConfig(max_critical_steps=8, max_subagent_steps=8, max_subagents_per_stage=8),
        )
    return Episode(
        task=task,
        mode=mode,
        tools=(),
        agents=(),
        instructions="" if mode == "swarm" else _SINGLE,  # what a newcomer's `swarm run` gets
        scorer=_scorer(task),
        config=SwarmConfig(max_critical_steps=6, max_subagent_steps=3, max_subagents_per_stage=8),
    )


def control_gold(task: Task, mode: Mode, *, latency_s: float = 0.0) -> GoldPolicy:
    """The gold policy of a control in either mode: the orchestrator answers itself (a look-up: search,
    open the entity's own document, answer); no sub-agent is ever created."""
    md = task.metadata

    def orchestrator(request: ModelRequest) -> Completion:
        if md["control"] != "lookup":
            return Completion(text=f"{md['items'][0]['key']}: {md['items'][0]['answer'][0]}")
        name = md["labels"][0]
        seen = tool_messages(request)
        if not seen:
            return Completion(tool_calls=(call("search", query=name, k=5),))
        if len(seen) == 1:
            doc = own_hit(seen[0], FICTION[md["kind"]].own_title(name))
            return Completion(tool_calls=(call("open", doc_id=doc),)) if doc else Completion(text="NOT FOUND")
        value = FICTION[md["kind"]].attr(md["attr"]).parse(seen[-1].content) or "NOT FOUND"
        return Completion(text=f"{name}: {value}")

    model = "gold-orchestrator" if mode == "swarm" else "gold-single"
    unused = FunctionBackend(lambda r: Completion(text="a control needs no sub-agent"), model="gold-subagent")
    return GoldPolicy(FunctionBackend(orchestrator, model=model, delay=latency_s), unused)
