"""The CLI's tracing of very wide stages: an even sample of a stage's sub-agents is traced in full,
nothing in the trace lacks its parent, and sampled-out spans cost the runtime no SDK work."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, Sampler, SamplingResult

from agent_swarm.orchestrator.cli.telemetry_setup import TRACE_FILE, TracingOptions, WideStageSampler, start_tracing
from agent_swarm.orchestrator.engine import Orchestrator
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.records import AgentDefinition, EpisodeRecord
from agent_swarm.swarm.testing import FunctionBackend, call
from agent_swarm.swarm.tracing import Telemetry
from agent_swarm.tools import Tool


def lookup(n: int) -> str:
    """Look a number up.

    Args:
        n: the number
    """
    return f"#{n}"


def wide_episode(width: int, telemetry: Telemetry) -> EpisodeRecord:
    """One stage of ``width`` sub-agents, each making one tool call and then answering."""

    def policy(request: ModelRequest) -> Completion:
        if any(m.role == "tool" for m in request.messages):
            return Completion(text="all looked up")
        return Completion(tool_calls=tuple(call("assign_task", agent="w", task=f"look up {i}") for i in range(width)))

    def worker(request: ModelRequest) -> Completion:
        if request.messages[-1].role == "tool":
            return Completion(text=f"found {request.messages[-1].content}")
        return Completion(tool_calls=(call("lookup", n=len(request.agent_id)),))

    o = Orchestrator(
        FunctionBackend(policy, model="policy"),
        SwarmConfig(max_subagents_per_stage=width, max_concurrency=width),
        tools=[Tool(lookup)],
        agents=[AgentDefinition(name="w", system_prompt="look it up", tools=("lookup",))],
        subagent_backend=FunctionBackend(worker, model="worker"),
        telemetry=telemetry,
    )
    return o.run_sync("look everything up")


def attrs(span: Any) -> dict[str, Any]:
    return {kv.key: kv.value.string_value or kv.value.int_value for kv in span.attributes}


def test_a_wide_stage_traces_an_even_sample_of_its_subagents_each_in_full(
    file_spans: Callable[[Path], list[Any]], tmp_path: Path
) -> None:
    tracing = start_tracing(TracingOptions(traced_subagents=3), out=tmp_path, env={"OTEL_TRACES_EXPORTER": "none"})
    record = wide_episode(10, tracing.telemetry())
    tracing.shutdown()
    assert record.status.value == "completed" and len(record.subagent_results) == 10  # the record has all
    spans = file_spans(tmp_path / record.episode_id / TRACE_FILE)
    ids = {s.span_id for s in spans}
    assert all(s.parent_span_id in ids for s in spans if s.parent_span_id)  # nothing without its parent
    agents = {attrs(s)["gen_ai.agent.id"]: s for s in spans if s.name == "invoke_agent w"}
    assert sorted(agents) == ["w-0-0", "w-0-4", "w-0-8"]  # every ceil(10 / 3) = 4th, spread over the stage
    for agent in agents.values():
        assert attrs(agent)["swarm.agent.stage_width"] == 10 and attrs(agent)["swarm.agent.status"] == "completed"
        kids = sorted(s.name for s in spans if s.parent_span_id == agent.span_id)
        assert kids == ["chat worker", "chat worker", "execute_tool lookup"]
    stage = next(s for s in spans if s.name == "stage 0")
    assert attrs(stage)["swarm.stage.width"] == 10
    assert {s.name for s in spans} == {"invoke_agent orchestrator", "chat policy", "stage 0", "invoke_agent w"} | {
        "chat worker",
        "execute_tool lookup",
    }


def test_stages_no_wider_than_the_limit_and_an_unlimited_cli_trace_every_subagent(
    file_spans: Callable[[Path], list[Any]], tmp_path: Path
) -> None:
    for limit, width in ((3, 3), (None, 10)):
        tracing = start_tracing(
            TracingOptions(traced_subagents=limit), out=tmp_path, env={"OTEL_TRACES_EXPORTER": "none"}
        )
        record = wide_episode(width, tracing.telemetry())
        tracing.shutdown()
        spans = file_spans(tmp_path / record.episode_id / TRACE_FILE)
        assert sum(s.name == "invoke_agent w" for s in spans) == width
        assert sum(s.name == "execute_tool lookup" for s in spans) == width


class CountingSampler(Sampler):
    def __init__(self, base: Sampler) -> None:
        self.base, self.calls = base, 0

    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        self.calls += 1
        return self.base.should_sample(*args, **kwargs)

    def get_description(self) -> str:
        return "counting"


def test_a_sampled_out_episode_records_the_same_and_opens_no_span_below_its_root() -> None:
    """With ``follow_parent_sampling`` (what the CLI sets) the runtime asks the SDK for no span under a
    sampled-out one: the SDK would drop them all anyway. The record is the same either way."""
    records, calls, exported = [], [], []
    for follow in (False, True):
        sampler = CountingSampler(ParentBased(ALWAYS_OFF))
        provider = TracerProvider(sampler=sampler)
        exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        record = wide_episode(6, Telemetry(provider, follow_parent_sampling=follow))
        records.append(record)
        calls.append(sampler.calls)
        exported.append(len(exporter.get_finished_spans()))
    assert exported == [0, 0] and all(r.trace_id is None for r in records)
    assert [r.status for r in records] == [records[0].status] * 2
    assert [len(r.subagent_results) for r in records] == [6, 6]
    assert [s.steps for s in records[0].subagent_results] == [s.steps for s in records[1].subagent_results]
    assert calls[1] == 1 and calls[0] > 6 * 3  # only the episode's root was sampled; before, every span


def test_the_wide_stage_sampler_drops_what_hangs_under_a_sampled_out_span() -> None:
    """Another library's span opened under a sampled-out sub-agent (an HTTP client's, say) is dropped
    with it, even when the base sampler would record it: no span without its parent."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON

    provider = TracerProvider(sampler=WideStageSampler(ALWAYS_ON, per_stage=1))
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("stage 0"):
        for index in range(2):
            attributes = {"swarm.agent.index": index, "swarm.agent.stage_width": 2}
            with tracer.start_as_current_span("invoke_agent w", attributes=attributes):
                with trace.get_tracer("http", tracer_provider=provider).start_as_current_span("GET /v1/chat"):
                    pass
    names = sorted(s.name for s in exporter.get_finished_spans())
    assert names == ["GET /v1/chat", "invoke_agent w", "stage 0"]
