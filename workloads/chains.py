"""Deep questions as chains of look-ups, and their gold policies (deep-lookup, train-mix's fictional chains).

A deep question (K2.5's "depth" prompts) names B independent entities; for each, a chain of hops —
search for a value, open the document whose title starts as expected, read the next value from its
text — ends in a number, and the answer is the entity whose number is best (the largest first-order
total, the earliest-born chief executive). :class:`Chain` describes one such question shape;
:func:`chain_gold` gives its gold policies in both modes: swarm (one researcher per entity, all in one
stage, then compare) and single (every chain in turn). The policies read the real tools' output, so an
environment that lost a link cannot reach reward 1. :func:`chain_episode` is the episode of any deep
question (its ``ANSWER:`` line names the pick and the value that picks it: the ``pick`` verifier).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.function_backend import FunctionBackend, call
from agent_swarm.swarm.messages import ToolMessage
from agent_swarm.swarm.records import EpisodeRecord, Task
from agent_swarm.swarm.verifiers.match import PickArgs, pick_verdict
from agent_swarm.tools.registry import Tool
from agent_swarm.workloads.base import Episode, GoldPolicy, Mode, Score, tool_messages, user_text
from agent_swarm.workloads.wide import AGENT, LABEL_RE, NOT_FOUND, Title, own_hit, parse_report

__all__ = ["Chain", "Hop", "chain_episode", "chain_gold", "follow"]


@dataclass(frozen=True)
class Hop:
    """One link: search ``query(value)``, open the hit titled as ``own_title(value)``, and
    ``read`` the next value from the opened text (None: the chain breaks)."""

    query: Callable[[str], str]
    own_title: Callable[[str], Title]
    read: Callable[[str], str | None]


@dataclass(frozen=True)
class Chain:
    """A deep question's shape: the hops from an entity to its number, and how the answer is chosen."""

    key: str  # the report's name of the entity ("customer")
    value: str  # the report's name of the number ("first_order_total")
    task: Callable[[str], str]  # a researcher's task for one entity (names it in single quotes)
    hops: tuple[Hop, ...]
    largest: bool  # the answer is the entity with the largest number (else the smallest)
    line: Callable[[str, float], str]  # how the answer states one entity's number
    stated: Callable[[float], str]  # the number as the ANSWER line states it after the pick ("1945", "$512.30")


def follow(chain: Chain, label: str, seen: Sequence[ToolMessage]) -> tuple[Completion | None, float | None, int]:
    """One entity's chain over the tool results ``seen`` so far: (the next call or None, the number once
    known, the tool results this chain consumed)."""
    value, used = label, 0
    for hop in chain.hops:
        if len(seen) <= used:
            return Completion(tool_calls=(call("search", query=hop.query(value), k=5),)), None, used
        doc = own_hit(seen[used], hop.own_title(value))
        used += 1
        if doc is None:
            return None, None, used
        if len(seen) <= used:
            return Completion(tool_calls=(call("open", doc_id=doc),)), None, used
        nxt = hop.read(seen[used].content)
        used += 1
        if nxt is None:
            return None, None, used
        value = nxt
    try:
        return None, float(value.replace(",", "")), used
    except ValueError:
        return None, None, used


def _answer(chain: Chain, numbers: Mapping[str, float]) -> Completion:
    if not numbers:
        return Completion(text=f"ANSWER: {NOT_FOUND}")
    pick = max if chain.largest else min
    best = pick(numbers, key=lambda k: numbers[k])
    lines = [*(chain.line(k, v) for k, v in numbers.items()), f"ANSWER: {best} ({chain.stated(numbers[best])})"]
    return Completion(text="\n".join(lines))


def _researcher(request: ModelRequest, chain: Chain) -> Completion:
    m = LABEL_RE.search(user_text(request))
    if m is None:
        return Completion(text="My task names nothing in quotes; nothing done.")
    nxt, number, _ = follow(chain, m.group(1), tool_messages(request))
    if nxt is not None:
        return nxt
    return Completion(text=f"{chain.key}: {m.group(1)}\n{chain.value}: {number if number is not None else NOT_FOUND}")


def _swarm(request: ModelRequest, chain: Chain, labels: Sequence[str]) -> Completion:
    reports = tool_messages(request, "assign_task")
    if reports or request.tool_choice == "none":
        numbers = {}
        for msg in reports:
            rep = parse_report(msg.content) or {}
            try:
                numbers[rep[chain.key]] = float(rep[chain.value])
            except (KeyError, ValueError):
                continue
        return _answer(chain, numbers)
    calls = [call("assign_task", agent=AGENT, task=chain.task(label)) for label in labels]
    return Completion(text=f"{len(calls)} independent branches.", tool_calls=tuple(calls))


def _single(request: ModelRequest, chain: Chain, labels: Sequence[str]) -> Completion:
    seen = tool_messages(request)
    pos, numbers = 0, {}
    for label in labels:
        nxt, number, used = follow(chain, label, seen[pos:])
        if nxt is not None:
            return nxt
        pos += used
        if number is not None:
            numbers[label] = number
    return _answer(chain, numbers)


def chain_episode(task: Task, mode: Mode, *, tools: tuple[Tool, ...], swarm: str) -> Episode:
    """The episode of a deep question over ``tools``: the researcher sub-agent type, ``swarm`` as swarm
    mode's instructions, the ``pick`` scorer of the ``ANSWER:`` line (the candidate and the value that
    picks it), budgets for B chains."""
    args = PickArgs.model_validate(task.verifier_args)
    expected = args.expected

    def scorer(record: EpisodeRecord) -> Score:
        # The task's own verifier (one implementation of the metric for task files and episodes).
        v = pick_verdict(record.answer or "", args)
        return Score(
            metric=v.score, success=v.passed, details={**v.details, "expected": expected}, items={"answer": v.score}
        )

    b = len(task.metadata["labels"])
    return Episode.one_agent(
        task,
        mode,
        tools=tools,
        agent=AGENT,
        system_prompt="You answer one look-up question by following references through a document "
        "collection with the search and open tools (check document titles). Report the facts you found "
        "as 'name: value' lines.",
        instructions={
            "swarm": swarm,
            "single": "You are a research assistant. Work alone with the search and open tools, then answer.",
        },
        scorer=scorer,
        config=SwarmConfig(max_critical_steps=4 * b + 8, max_subagent_steps=10, max_subagents_per_stage=max(16, b)),
    )


def chain_gold(chain: Chain, labels: Sequence[str], mode: Mode, *, latency_s: float = 0.0) -> GoldPolicy:
    """The gold policies of a deep question over ``labels`` in ``mode``."""
    if mode == "swarm":
        orch = FunctionBackend(lambda r: _swarm(r, chain, labels), model="gold-orchestrator", delay=latency_s)
    else:
        orch = FunctionBackend(lambda r: _single(r, chain, labels), model="gold-single", delay=latency_s)
    return GoldPolicy(orch, FunctionBackend(lambda r: _researcher(r, chain), model="gold-subagent", delay=latency_s))
