"""Span trees of real episodes, read from the in-memory exporter.

The golden tree (``traces/golden/scripted_episode.json``) pins names, kinds, parents, statuses and the
GenAI/swarm attributes of a scripted episode with two parallel stages, a failing sub-agent and a tool
error. Regenerate it after an intended change with ``SWARM_UPDATE_GOLDEN=1 pytest tests/traces``.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from agent_swarm.orchestrator.engine import Orchestrator
from agent_swarm.swarm.backend import Completion, ModelRequest, SamplingParams
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import BackendUnavailableError, ToolError
from agent_swarm.swarm.events import EpisodeFinished, Event
from agent_swarm.swarm.messages import ToolMessage, UserMessage
from agent_swarm.swarm.testing import FunctionBackend, ScriptedBackend, call
from agent_swarm.swarm.tracing import CONTENT_LIMIT, Telemetry
from agent_swarm.tools.registry import Tool

GOLDEN = Path(__file__).resolve().parents[2] / "traces" / "golden" / "scripted_episode.json"

# Attributes whose values are stable across runs (no timings, ids of the run, or token counts).
STABLE = (
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.agent.name",
    "gen_ai.agent.id",
    "gen_ai.conversation.id",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.response.finish_reasons",
    "gen_ai.tool.name",
    "gen_ai.tool.type",
    "gen_ai.tool.call.id",
    "error.type",
    "swarm.episode.id",
    "swarm.episode.status",
    "swarm.task.id",
    "swarm.stage.index",
    "swarm.stage.kind",
    "swarm.stage.width",
    "swarm.stage.critical_steps",
    "swarm.stage.critical_steps_so_far",
    "swarm.stage.failed_subagents",
    "swarm.agent.status",
    "swarm.agent.steps",
    "swarm.dag.critical_steps",
    "swarm.dag.total_steps",
    "swarm.dag.speedup",
)

CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Peru": "Lima", "Chile": "Santiago", "Kenya": "Nairobi"}


def lookup(country: str) -> str:
    """Capital of a country.

    Args:
        country: the country's English name.
    """
    if country not in CAPITALS:
        raise ToolError(f"no country named {country!r}")
    return CAPITALS[country]


def scripted_orchestrator(**kw: Any) -> tuple[Orchestrator, ScriptedBackend, ScriptedBackend]:
    """Two parallel stages; one sub-agent's tool call fails (it recovers), one sub-agent's model fails."""
    orch = ScriptedBackend(
        [
            [
                call(
                    "create_subagent",
                    id="c-create",
                    name="researcher",
                    system_prompt="Look up one capital with the lookup tool.",
                    tools=["lookup"],
                ),
                call("assign_task", id="c-a1", agent="researcher", task="Capital of France?"),
                call("assign_task", id="c-a2", agent="researcher", task="Capital of Atlantis?"),
            ],
            [
                call("assign_task", id="c-a3", agent="researcher", task="Capital of Japan?"),
                call("assign_task", id="c-a4", agent="researcher", task="Capital of Peru?"),
                call("lookup", id="c-direct", country="Chile"),
            ],
            "France: Paris; Japan: Tokyo; Chile: Santiago; Atlantis and Peru unknown.",
        ],
        model="scripted-orchestrator",
    )
    subs = ScriptedBackend(
        {
            "researcher-0-0": [call("lookup", id="t-france", country="France"), "Paris"],
            "researcher-0-1": [call("lookup", id="t-atlantis", country="Atlantis"), "unknown"],
            "researcher-1-0": [call("lookup", id="t-japan", country="Japan"), "Tokyo"],
            "researcher-1-1": [BackendUnavailableError("model server at http://gpu:8000 refused the connection")],
        },
        model="scripted-subagent",
    )
    o = Orchestrator(
        orch, SwarmConfig(max_critical_steps=20), tools=[Tool(lookup, blocking=False)], subagent_backend=subs, **kw
    )
    return o, orch, subs


def normalise(spans: tuple[ReadableSpan, ...]) -> dict[str, Any]:
    """The span tree as one nested dict. A stage's children run in parallel, so they are sorted by
    identity (name, agent id, tool call id); everything else is sequential and kept in time order."""
    children: dict[int | None, list[ReadableSpan]] = {}
    for s in spans:
        children.setdefault(s.parent.span_id if s.parent else None, []).append(s)

    def node(s: ReadableSpan) -> dict[str, Any]:
        kids = children.get(s.context.span_id, [])
        if s.name.startswith("stage "):
            kids = sorted(
                kids,
                key=lambda k: (
                    k.name,
                    str(k.attributes.get("gen_ai.agent.id", "")),
                    str(k.attributes.get("gen_ai.tool.call.id", "")),
                ),
            )
        else:
            kids = sorted(kids, key=lambda k: k.start_time)
        attrs = {k: _plain(s.attributes[k]) for k in STABLE if k in s.attributes}
        return {
            "name": s.name,
            "kind": s.kind.name,
            "status": s.status.status_code.name,
            "attributes": attrs,
            "children": [node(k) for k in kids],
        }

    roots = children.get(None, [])
    assert len(roots) == 1, [r.name for r in roots]
    return node(roots[0])


def _plain(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def test_scripted_episode_matches_the_golden_span_tree(memory: Any) -> None:
    o, orch, subs = scripted_orchestrator(tracer_provider=memory.provider)
    record = o.run_sync("Capitals of France, Atlantis, Japan, Peru and Chile", episode_id="golden-episode")
    orch.assert_consumed()
    subs.assert_consumed()
    assert record.status.value == "completed"
    tree = normalise(memory.exporter.get_finished_spans())
    if os.environ.get("SWARM_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(tree, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    assert tree == json.loads(GOLDEN.read_text(encoding="utf-8"))


def test_failures_set_error_status_and_error_type(memory: Any) -> None:
    o, _, _ = scripted_orchestrator(tracer_provider=memory.provider)
    o.run_sync("Capitals", episode_id="e1")
    spans = memory.exporter.get_finished_spans()
    errors = {
        (s.name, s.attributes.get("gen_ai.agent.id") or s.attributes.get("gen_ai.tool.call.id")): s.attributes.get(
            "error.type"
        )
        for s in spans
        if s.status.status_code.name == "ERROR"
    }
    assert errors == {
        ("execute_tool lookup", "t-atlantis"): "ToolError",
        ("chat scripted-subagent", None): "BackendUnavailableError",
        ("invoke_agent researcher", "researcher-1-1"): "BackendUnavailableError",
    }
    failed_agent = next(s for s in spans if s.attributes.get("gen_ai.agent.id") == "researcher-1-1")
    assert failed_agent.attributes["swarm.agent.status"] == "failed"
    assert "refused the connection" in (failed_agent.status.description or "")


def test_usage_on_spans_adds_up_to_the_record(memory: Any) -> None:
    o, _, _ = scripted_orchestrator(tracer_provider=memory.provider)
    record = o.run_sync("Capitals", episode_id="e2")
    spans = memory.exporter.get_finished_spans()
    chats = [s for s in spans if s.name.startswith("chat ")]
    orch_chats = [s for s in chats if s.attributes["gen_ai.request.model"] == "scripted-orchestrator"]
    assert sum(s.attributes["gen_ai.usage.input_tokens"] for s in orch_chats) == record.usage.prompt_tokens
    sub_out = sum(s.attributes.get("gen_ai.usage.output_tokens", 0) for s in chats if s not in orch_chats)
    assert sub_out == record.subagent_usage.completion_tokens > 0
    root = next(s for s in spans if s.parent is None)
    assert root.attributes["gen_ai.usage.input_tokens"] == record.usage.prompt_tokens
    assert root.attributes["swarm.dag.critical_steps"] == record.dag.critical_steps


def test_trace_id_and_episode_id_link_both_ways(memory: Any) -> None:
    o, _, _ = scripted_orchestrator(tracer_provider=memory.provider)
    record = o.run_sync("Capitals", episode_id="link-me")
    spans = memory.exporter.get_finished_spans()
    root = next(s for s in spans if s.parent is None)
    # record -> trace
    assert record.trace_id == format(root.context.trace_id, "032x")
    assert {format(s.context.trace_id, "032x") for s in spans} == {record.trace_id}
    # trace -> record
    assert root.name == "invoke_agent orchestrator"
    assert root.attributes["gen_ai.conversation.id"] == root.attributes["swarm.episode.id"] == record.episode_id


def test_each_episode_is_its_own_trace(memory: Any) -> None:
    o, _, _ = scripted_orchestrator(tracer_provider=memory.provider)
    first = o.run_sync("Capitals", episode_id="a")
    o2, _, _ = scripted_orchestrator(tracer_provider=memory.provider)
    second = o2.run_sync("Capitals", episode_id="b")
    assert first.trace_id and second.trace_id and first.trace_id != second.trace_id


def test_reward_components_land_on_the_episode_span(memory: Any) -> None:
    from agent_swarm.swarm.records import RewardRecord

    async def reward(record: Any) -> RewardRecord:
        return RewardRecord(total=0.75, r_perf=0.5, r_parallel=1.0, r_finish=0.75, lambda1=0.25, lambda2=0.1)

    o, _, _ = scripted_orchestrator(tracer_provider=memory.provider, reward_fn=reward)
    o.run_sync("Capitals", episode_id="r")
    root = next(s for s in memory.exporter.get_finished_spans() if s.parent is None)
    assert root.attributes["swarm.reward.total"] == 0.75
    assert root.attributes["swarm.reward.r_finish"] == 0.75
    assert root.attributes["swarm.reward.lambda1"] == 0.25


# -- parents under parallel execution --------------------------------------------------------------


async def test_wide_fan_out_spans_sit_under_their_own_agent_and_stage(memory: Any) -> None:
    """32 sub-agents in each of two stages, 3 steps each, random latencies so their steps interleave.
    Each chat/tool span is traced back to the agent that really made the call (recorded inside the
    backend and the tool, from the *current* span) and must hang under that agent's span, which must
    hang under its own stage's span, never under a sibling."""
    width, rng = 32, random.Random(7)
    chat_owner: dict[int, str] = {}
    tool_owner: dict[int, str] = {}

    async def orchestrator(request: ModelRequest) -> Completion:
        done = [m for m in request.messages if isinstance(m, ToolMessage)]
        if len(done) == 0:
            calls = [call("create_subagent", name="w", system_prompt="work", tools=["work"])]
            calls += [call("assign_task", agent="w", task=f"job {i}") for i in range(width)]
            return Completion(tool_calls=tuple(calls))
        if len(done) == width + 1:
            return Completion(tool_calls=tuple(call("assign_task", agent="w", task=f"job {i}b") for i in range(width)))
        return Completion(text="done")

    async def worker(request: ModelRequest) -> Completion:
        chat_owner[trace.get_current_span().get_span_context().span_id] = request.agent_id
        await anyio.sleep(rng.random() * 0.004)
        results = [m for m in request.messages if isinstance(m, ToolMessage)]
        if len(results) < 2:
            return Completion(tool_calls=(call("work", agent=request.agent_id),))
        return Completion(text="ok")

    async def work(agent: str) -> str:
        """Do some work.

        Args:
            agent: who asks.
        """
        tool_owner[trace.get_current_span().get_span_context().span_id] = agent
        await anyio.sleep(rng.random() * 0.004)
        return "worked"

    o = Orchestrator(
        FunctionBackend(orchestrator, model="orch"),
        SwarmConfig(max_subagents_per_stage=width, max_critical_steps=20),
        tools=[Tool(work)],
        subagent_backend=FunctionBackend(worker, model="sub"),
        tracer_provider=memory.provider,
    )
    record = await o.run("fan out")
    assert record.dag.stage_widths[:2] == (width, width)
    spans = {s.context.span_id: s for s in memory.exporter.get_finished_spans()}

    def parent(s: ReadableSpan) -> ReadableSpan:
        assert s.parent is not None
        return spans[s.parent.span_id]

    assert len(chat_owner) == 2 * width * 3 and len(tool_owner) == 2 * width * 2
    for owners in (chat_owner, tool_owner):
        for span_id, agent_id in owners.items():
            agent_span = parent(spans[span_id])
            assert agent_span.name == "invoke_agent w"
            assert agent_span.attributes["gen_ai.agent.id"] == agent_id
            stage_span = parent(agent_span)
            assert stage_span.attributes["swarm.stage.index"] == int(agent_id.split("-")[1])
    # and the stages really interleaved their agents (otherwise this test proves nothing)
    agents = [s for s in spans.values() if s.name == "invoke_agent w"]
    stage0 = sorted((s for s in agents if parent(s).attributes["swarm.stage.index"] == 0), key=lambda s: s.start_time)
    assert stage0[1].start_time < stage0[0].end_time
    per_stage = Counter(parent(s).attributes["swarm.stage.index"] for s in agents)
    assert per_stage == {0: width, 1: width}


# -- cost and content ------------------------------------------------------------------------------


def test_disabled_telemetry_creates_no_spans_and_no_trace_id(memory: Any) -> None:
    o, _, _ = scripted_orchestrator(telemetry=Telemetry(enabled=False))
    record = o.run_sync("Capitals")
    assert record.trace_id is None
    assert memory.exporter.get_finished_spans() == ()
    t = Telemetry(enabled=False)
    assert t.chat(model="m") is t.stage(index=0, kind="k", width=1, critical_so_far=0)  # one shared no-op


def test_content_is_off_by_default(memory: Any) -> None:
    o, _, _ = scripted_orchestrator(tracer_provider=memory.provider)
    o.run_sync("Capitals")
    for s in memory.exporter.get_finished_spans():
        assert not any(
            k.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.system", "gen_ai.tool.call.a", "gen_ai.tool.call.r"))
            for k in s.attributes
        ), s.name


def test_content_capture_uses_the_genai_message_shape(memory: Any) -> None:
    o, _, _ = scripted_orchestrator(tracer_provider=memory.provider, capture_content=True)
    o.run_sync("Capitals of France and friends")
    spans = memory.exporter.get_finished_spans()
    first = min((s for s in spans if s.name == "chat scripted-orchestrator"), key=lambda s: s.start_time)
    inputs = json.loads(first.attributes["gen_ai.input.messages"])
    assert inputs == [{"role": "user", "parts": [{"type": "text", "content": "Capitals of France and friends"}]}]
    assert json.loads(first.attributes["gen_ai.system_instructions"])[0]["type"] == "text"
    out = json.loads(first.attributes["gen_ai.output.messages"])
    assert out[0]["finish_reason"] == "tool_calls"
    assert {p["name"] for p in out[0]["parts"] if p["type"] == "tool_call"} == {"create_subagent", "assign_task"}
    tool = next(s for s in spans if s.attributes.get("gen_ai.tool.call.id") == "t-atlantis")
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"country": "Atlantis"}
    assert "no country named" in tool.attributes["gen_ai.tool.call.result"]


def test_huge_content_is_capped_and_stays_valid_json(memory: Any) -> None:
    huge = "x" * (CONTENT_LIMIT * 4)
    backend = ScriptedBackend(["ok"], model="m")
    o = Orchestrator(backend, tracer_provider=memory.provider, capture_content=True)
    o.run_sync(huge + " and some ünïcödé " + "y" * CONTENT_LIMIT)
    chat = next(s for s in memory.exporter.get_finished_spans() if s.name == "chat m")
    value = chat.attributes["gen_ai.input.messages"]
    assert len(value.encode("utf-8")) <= CONTENT_LIMIT
    parsed = json.loads(value)
    assert parsed[0]["role"] == "user" and "truncated" in parsed[0]["parts"][0]["content"]


def test_chat_spans_carry_server_and_sampling_from_the_backend(memory: Any) -> None:
    class RemoteBackend(FunctionBackend):
        base_url = "http://gpu-box:8000/v1"
        provider_name = "openai"

    backend = RemoteBackend(lambda r: Completion(text="hi"), model="qwen")
    cfg = SwarmConfig(orchestrator_sampling=SamplingParams(temperature=0.6, top_p=0.9, max_tokens=77, seed=3))
    Orchestrator(backend, cfg, tracer_provider=memory.provider).run_sync("hello")
    chat = next(s for s in memory.exporter.get_finished_spans() if s.name == "chat qwen")
    a = chat.attributes
    assert (a["server.address"], a["server.port"], a["gen_ai.provider.name"]) == ("gpu-box", 8000, "openai")
    assert (a["gen_ai.request.temperature"], a["gen_ai.request.top_p"]) == (0.6, 0.9)
    assert (a["gen_ai.request.max_tokens"], a["gen_ai.request.seed"]) == (77, 3)
    assert chat.kind.name == "CLIENT" and tuple(a["gen_ai.response.finish_reasons"]) == ("stop",)


async def test_cancelled_episode_ends_every_span_as_cancelled(memory: Any) -> None:
    async def slow(request: ModelRequest) -> Completion:
        if request.agent_id == "orchestrator":
            task = next(m.content for m in request.messages if isinstance(m, UserMessage))
            return Completion(
                tool_calls=(
                    call("create_subagent", name="s", system_prompt="p"),
                    call("assign_task", agent="s", task=task),
                )
            )
        await anyio.sleep(30)
        return Completion(text="never")

    backend = FunctionBackend(slow, model="m")
    events: list[Event] = []
    o = Orchestrator(backend, tracer_provider=memory.provider, observers=[events.append])
    with anyio.move_on_after(0.3):
        await o.run("wait forever")
    spans = memory.exporter.get_finished_spans()
    root = next(s for s in spans if s.parent is None)
    assert root.status.status_code.name == "ERROR" and root.attributes["swarm.episode.status"] == "cancelled"
    agent = next(s for s in spans if s.name == "invoke_agent s")
    assert agent.attributes["swarm.agent.status"] == "cancelled" and agent.status.status_code.name == "ERROR"
    finished = events[-1]  # the cancelled episode's record, delivered to the observers
    assert isinstance(finished, EpisodeFinished)
    assert finished.record.trace_id == format(root.context.trace_id, "032x")


def test_a_sampled_out_episode_records_no_trace_id() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    o, _, _ = scripted_orchestrator(tracer_provider=TracerProvider(sampler=ALWAYS_OFF))
    record = o.run_sync("Capitals")
    assert record.status.value == "completed" and record.trace_id is None  # no id pointing at nothing


def test_spans_opened_inside_a_tool_nest_under_its_execute_tool_span(memory: Any) -> None:
    """What an MCP client does: it traces through the OTel API from inside the tool; a blocking tool
    runs in a worker thread and must still see its execute_tool span as the parent."""
    tracer = memory.provider.get_tracer("mcp-client")

    def probe(x: str) -> str:
        """Call a remote tool.

        Args:
            x: the argument.
        """
        with tracer.start_as_current_span("tools/call probe"):
            return x

    async def aprobe(x: str) -> str:
        """Call a remote tool (async).

        Args:
            x: the argument.
        """
        with tracer.start_as_current_span("tools/call aprobe"):
            return x

    backend = ScriptedBackend([[call("probe", x="1"), call("aprobe", x="2")], "done"], model="m")
    Orchestrator(backend, tools=[Tool(probe, blocking=True), Tool(aprobe)], tracer_provider=memory.provider).run_sync(
        "t"
    )
    spans = {s.context.span_id: s for s in memory.exporter.get_finished_spans()}
    for name in ("probe", "aprobe"):
        inner = next(s for s in spans.values() if s.name == f"tools/call {name}")
        assert inner.parent is not None and spans[inner.parent.span_id].name == f"execute_tool {name}"


def test_a_backend_whose_address_is_not_known_yet_still_traces(memory: Any) -> None:
    class NotStarted(FunctionBackend):
        @property
        def base_url(self) -> str:
            raise RuntimeError("the server is not started")

    backend = NotStarted(lambda r: Completion(text="hi"), model="local")
    record = Orchestrator(backend, tracer_provider=memory.provider).run_sync("hello")
    assert record.status.value == "completed"
    chat = next(s for s in memory.exporter.get_finished_spans() if s.name == "chat local")
    assert "server.address" not in chat.attributes


def test_cap_content_keeps_the_latest_messages_as_valid_json() -> None:
    from agent_swarm.swarm.tracing import cap_content

    history = [{"role": "user", "parts": [{"type": "text", "content": f"turn {i} " + "x" * 3000}]} for i in range(400)]
    text = cap_content(history)
    assert len(text.encode("utf-8")) <= CONTENT_LIMIT
    kept = json.loads(text)
    omitted = int(kept[0]["parts"][0]["content"].split()[0].strip("["))
    assert kept[-1]["parts"][0]["content"].startswith("turn 399 ")  # the newest turn survives
    assert omitted + len(kept) - 1 == 400
    small = [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]
    assert json.loads(cap_content(small)) == small


def test_cached_chat_attributes_follow_the_backend_and_the_sampling(memory: Any) -> None:
    """Chat attributes are built once per (model, backend address, sampling object), but a backend whose
    address appears later (a local server starting) and a new sampling object still show up."""

    class Late:
        base_url: str | None = None

    backend, t = Late(), Telemetry(memory.provider)
    cold, warm = SamplingParams(temperature=0.0), SamplingParams(temperature=0.9, stop=("END",))
    for sampling in (cold, cold, warm):
        with t.chat(model="m", backend=backend, sampling=sampling) as span:
            t.completion(span, Completion(text="ok"))
        backend.base_url = "https://gpu-box/v1"
    a, b, c = sorted(memory.exporter.get_finished_spans(), key=lambda s: s.start_time)
    assert "server.address" not in a.attributes and a.attributes["gen_ai.request.temperature"] == 0.0
    assert (b.attributes["server.address"], b.attributes["server.port"]) == ("gpu-box", 443)
    assert c.attributes["gen_ai.request.temperature"] == 0.9
    assert tuple(c.attributes["gen_ai.request.stop_sequences"]) == ("END",)
    assert tuple(c.attributes["gen_ai.response.finish_reasons"]) == ("stop",)


def test_tool_spans_keep_their_own_call_ids_and_agent_results_land_at_once(memory: Any) -> None:
    t = Telemetry(memory.provider)
    with t.agent(name="w", agent_id="w-0", model="m", episode_id="") as agent:
        for call_id in ("c1", "c2"):
            with t.tool(name="work", call_id=call_id):
                pass
        t.agent_result(agent, status="completed", steps=2, input_tokens=7, output_tokens=3)
        agent.set_many({"swarm.agent.note": None, "swarm.agent.extra": 1})
    spans = {s.name + str(s.attributes.get("gen_ai.tool.call.id", "")): s for s in memory.exporter.get_finished_spans()}
    assert set(spans) == {"execute_tool workc1", "execute_tool workc2", "invoke_agent w"}
    a = spans["invoke_agent w"].attributes
    assert (a["swarm.agent.status"], a["swarm.agent.steps"], a["gen_ai.usage.input_tokens"]) == ("completed", 2, 7)
    assert a["swarm.agent.extra"] == 1 and "swarm.agent.note" not in a and "gen_ai.conversation.id" not in a
