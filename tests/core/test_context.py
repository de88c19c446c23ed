"""An agent's conversation is fitted to its context by a recorded, deterministic rule: old tool
results shortened to head/tail excerpts, the turn after a cut marked for RL, one last turn when even
that overflows (``context_exhausted`` with the agent's best answer)."""

from __future__ import annotations

import pytest

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.swarm.backend import Completion, ModelRequest, estimate_tokens, prompt_tokens
from agent_swarm.swarm.context import EXCERPT_CHARS, EXHAUSTED_NOTICE, fit_context
from agent_swarm.swarm.errors import ErrorType
from agent_swarm.swarm.messages import Message, SystemMessage, ToolMessage, UserMessage
from agent_swarm.swarm.records import AgentStatus, EpisodeRecord, EpisodeStatus, RewardRecord
from agent_swarm.swarm.rl.trajectory import TrajectoryError, build_trajectory
from agent_swarm.swarm.testing import FunctionBackend, call
from agent_swarm.tools import tool


@tool
def read(n: int) -> str:
    """Read document n."""
    return f"doc {n} begins. " + f"filler {n} " * 150 + f"doc {n} says the value is {n * 11}."


def _reader(docs: int) -> FunctionBackend:
    """A single agent that reads ``docs`` documents, one per turn, then answers with what it can
    still see; told to answer now (tools withdrawn), it answers at once."""

    def turn(request: ModelRequest) -> Completion:
        seen = [m.content for m in request.messages if isinstance(m, ToolMessage)]
        values = [c.rsplit("value is ", 1)[-1].rstrip(".") for c in seen if "value is" in c]
        if request.tool_choice == "none" or len(seen) >= docs:
            return Completion(text="values: " + ", ".join(values))
        return Completion(tool_calls=(call("read", n=len(seen)),))

    return FunctionBackend(turn, model="reader")


async def _single(docs: int, context: int) -> tuple[EpisodeRecord, FunctionBackend]:
    backend = _reader(docs)
    cfg = SwarmConfig(subagents=False, context_tokens=context, max_critical_steps=40)
    record = await Orchestrator(backend, cfg, tools=[read]).run("Read the documents and list their values.")
    return record, backend


async def test_old_tool_results_are_cut_to_excerpts_and_the_agent_answers() -> None:
    record, backend = await _single(8, 4000)
    assert record.status is EpisodeStatus.COMPLETED
    # every value survives: each cut keeps the head and tail of its document
    assert record.answer == "values: " + ", ".join(str(n * 11) for n in range(8))
    cuts = record.context_cuts
    assert cuts and record.context_tokens == 4000
    assert all(c.name == "read" and c.kept == EXCERPT_CHARS and c.chars > 1300 and c.tokens_cut > 0 for c in cuts)
    # the oldest results first, never the latest turn's
    assert [c.message for c in cuts] == sorted(c.message for c in cuts)
    last = backend.calls[-1]
    shortened = [m for m in last.messages if isinstance(m, ToolMessage) and "cut to fit the context" in m.content]
    assert len(shortened) == len({c.message for c in cuts})
    assert estimate_tokens(last) <= 4000 - 1000
    # the turn after each batch of cuts is marked as re-rendered, and only those
    marked = [t.index for t in record.turns if t.context_cut]
    assert marked == sorted({c.turn for c in cuts}) and all(record.turns[i].drift for i in marked)
    assert record.drift_count == len(marked)
    again, _ = await _single(8, 4000)
    assert again.context_cuts == cuts  # deterministic


async def test_rl_never_trains_across_a_shortened_prompt() -> None:
    record, _ = await _single(8, 4000)
    scored = record.model_copy(update={"reward": RewardRecord(total=1.0, r_perf=1.0)})
    with pytest.raises(TrajectoryError, match="shortened to fit the context"):
        build_trajectory(scored)
    uncut, _ = await _single(8, 32_000)
    assert not uncut.context_cuts and not any(t.context_cut for t in uncut.turns)
    build_trajectory(uncut.model_copy(update={"reward": RewardRecord(total=1.0, r_perf=1.0)}))


async def test_an_overflowing_conversation_gets_one_last_turn_and_ends_context_exhausted() -> None:
    record, backend = await _single(40, 2000)
    assert record.status is EpisodeStatus.CONTEXT_EXHAUSTED
    assert record.error_type == ErrorType.CONTEXT_EXHAUSTED and "context of 2000 tokens" in (record.error or "")
    assert record.answer is not None and record.answer.startswith("values: 0, 11")  # its best answer
    last = backend.calls[-1]
    assert last.tool_choice == "none" and last.messages[-1].content == EXHAUSTED_NOTICE
    assert not record.turns[-1].tools_enabled
    assert estimate_tokens(last) <= 2000 - 500


async def test_a_task_that_cannot_fit_at_all_ends_without_a_turn() -> None:
    backend = _reader(1)
    cfg = SwarmConfig(subagents=False, context_tokens=300)
    record = await Orchestrator(backend, cfg, tools=[read]).run("x " * 2000)
    assert record.status is EpisodeStatus.CONTEXT_EXHAUSTED and not backend.calls and not record.turns


def _subagent_reader(request: ModelRequest) -> Completion:
    seen = [m for m in request.messages if isinstance(m, ToolMessage)]
    if request.tool_choice == "none" or len(seen) >= 6:
        return Completion(text=f"read {len(seen)} documents")
    return Completion(tool_calls=(call("read", n=len(seen)),))


@pytest.mark.parametrize(("window", "status"), [(4000, AgentStatus.COMPLETED), (1500, AgentStatus.CONTEXT_EXHAUSTED)])
async def test_a_subagent_fits_its_own_context_from_its_backend(window: int, status: AgentStatus) -> None:
    orch = FunctionBackend(
        lambda r: (
            Completion(text="done")
            if any(isinstance(m, ToolMessage) for m in r.messages)
            else Completion(tool_calls=(call("assign_task", agent="worker", task="read six documents"),))
        ),
        model="orch",
    )
    sub = FunctionBackend(_subagent_reader, model="sub", context_window=window)
    record = await Orchestrator(orch, SwarmConfig(max_subagent_steps=12), tools=[read], subagent_backend=sub).run("go")
    (result,) = record.subagent_results
    assert result.status is status and result.context_cuts and result.report.startswith("read ")
    if status is AgentStatus.CONTEXT_EXHAUSTED:
        assert result.error_type == ErrorType.CONTEXT_EXHAUSTED and result.report != "read 6 documents"


async def test_fit_context_counts_with_the_backends_tokenizer_when_it_has_one() -> None:
    class Counting(FunctionBackend):
        async def count_tokens(self, request: ModelRequest) -> int:
            return sum(len(m.content) for m in request.messages) // 10  # a generous tokenizer

    backend = Counting(lambda r: Completion(text="x"))
    messages: list[Message] = [
        SystemMessage(content="s"),
        UserMessage(content="u"),
        ToolMessage(tool_call_id="a", name="read", content="y" * 6000),
    ]
    request = ModelRequest(messages=tuple(messages))
    assert await prompt_tokens(backend, request) == (600, True)
    fit = await fit_context(backend, messages, request, 1000, turn=3)  # the estimate (2000+) overflows, the count not
    assert not fit.cuts and fit.fits and fit.tokens == 600 and len(messages[2].content) == 6000
