"""The OpenAI-compatible backend: vLLM's token extras, tool calls, and the request it sends.

Transports are injected (httpx.MockTransport), never patched. The response bodies have the shapes
vLLM 0.32 and llama.cpp's server really return (see shared notes, local-models.md §2.3).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import zlib
from typing import Any

import anyio
import httpx
import pytest

from agent_swarm.swarm.backend import ModelRequest, SamplingParams, ToolSpec
from agent_swarm.swarm.backends.openai_http import OpenAIBackend, RetryPolicy
from agent_swarm.swarm.errors import BackendError, BackendTimeoutError, BackendUnavailableError, ConfigError
from agent_swarm.swarm.messages import AssistantMessage, ToolCall, ToolMessage, UserMessage

WEATHER = ToolSpec(name="get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}})
REQ = ModelRequest(messages=(UserMessage(content="Weather in Paris and Oslo?"),), tools=(WEATHER,))
FAST = RetryPolicy(max_retries=3, base_delay=0.001, max_delay=0.01)


def vllm_body(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "model": "smol",
        "prompt_token_ids": [1, 9690, 198, 2683],
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "token_ids": [57, 5248, 2],
                "logprobs": {
                    "content": [
                        {"token": "token_id:57", "logprob": -0.5, "bytes": [73], "top_logprobs": []},
                        {"token": "token_id:5248", "logprob": -0.25, "bytes": [39], "top_logprobs": []},
                        {"token": "token_id:2", "logprob": -0.125, "bytes": [], "top_logprobs": []},
                    ]
                },
                "message": {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "chatcmpl-tool-a",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        },
                        {
                            "id": "chatcmpl-tool-b",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                        },
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7},
    }
    body["choices"][0].update(over)
    return body


def backend(handler: Any, **kw: Any) -> tuple[OpenAIBackend, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        out: httpx.Response = handler(request)
        return out

    client = httpx.AsyncClient(transport=httpx.MockTransport(record))
    kw.setdefault("retry", FAST)
    return OpenAIBackend("http://vllm.test/v1", "smol", client=client, **kw), seen


async def test_vllm_response_gives_exact_ids_logprobs_and_parallel_calls() -> None:
    b, seen = backend(lambda r: httpx.Response(200, json=vllm_body()), flavour="vllm")
    c = await b.complete(REQ)
    assert c.prompt_token_ids == (1, 9690, 198, 2683)
    assert c.token_ids == (57, 5248, 2) and c.logprobs == (-0.5, -0.25, -0.125)
    assert [(t.id, t.arguments) for t in c.tool_calls] == [
        ("chatcmpl-tool-a", {"city": "Paris"}),
        ("chatcmpl-tool-b", {"city": "Oslo"}),
    ]
    assert c.finish_reason == "tool_calls" and c.usage.total_tokens == 7 and c.parse_error is None
    sent = json.loads(seen[0].content)
    assert seen[0].url.path == "/v1/chat/completions"
    assert sent["return_token_ids"] is True and sent["return_tokens_as_token_ids"] is True
    assert sent["logprobs"] is True and sent["parallel_tool_calls"] is True and sent["tool_choice"] == "auto"
    assert sent["tools"] == [WEATHER.to_openai()] and sent["model"] == "smol"
    # A caller that wants one call per reply says so to the server (OpenAI's parallel_tool_calls).
    await b.complete(dataclasses.replace(REQ, parallel_tool_calls=False))
    assert json.loads(seen[1].content)["parallel_tool_calls"] is False


async def test_token_ids_from_logprob_strings_when_token_ids_are_absent() -> None:
    body = vllm_body()
    del body["choices"][0]["token_ids"]
    b, _ = backend(lambda r: httpx.Response(200, json=body), flavour="vllm")
    assert (await b.complete(REQ)).token_ids == (57, 5248, 2)


async def test_a_lone_broken_call_from_the_server_stays_in_the_turn_with_its_error() -> None:
    """Not a turn-level parse error: the server split the call out, so it goes back to the model as
    it was (with its error as the tool's answer) instead of vanishing from the conversation."""
    bad = vllm_body(
        message={
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "x", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": '}}
            ],
        }
    )
    b, _ = backend(lambda r: httpx.Response(200, json=bad), flavour="vllm")
    c = await b.complete(REQ)
    assert c.parse_error is None and [(t.id, t.name, t.raw_arguments) for t in c.tool_calls] == [
        ("x", "get_weather", '{"city": ')
    ]
    assert "not valid JSON" in (c.tool_calls[0].error or "")
    assert c.tool_calls[0].to_openai()["function"]["arguments"] == '{"city": '


def _calls_body(*arguments: str) -> dict[str, Any]:
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "get_weather", "arguments": a}}
        for i, a in enumerate(arguments)
    ]
    return vllm_body(message={"role": "assistant", "content": None, "tool_calls": calls})


async def test_one_broken_call_among_valid_ones_stays_in_place_with_its_error() -> None:
    body = _calls_body('{"city": "Paris"}', '{"city": ', '{"city": "Oslo"}')
    b, _ = backend(lambda r: httpx.Response(200, json=body), flavour="vllm")
    c = await b.complete(REQ)
    assert c.parse_error is None
    assert [(t.id, t.arguments, t.error is None) for t in c.tool_calls] == [
        ("c0", {"city": "Paris"}, True),
        ("c1", {}, False),
        ("c2", {"city": "Oslo"}, True),
    ]
    bad = c.tool_calls[1].error or ""
    assert "not valid JSON" in bad and '{\\"city\\": ' in bad  # what the model wrote is kept


async def test_a_broken_call_among_valid_ones_is_answered_with_an_error_in_the_episode() -> None:
    """Regression: the bad call used to vanish; the stage ran 2 of 3 calls."""
    from agent_swarm.orchestrator import Orchestrator, SwarmConfig
    from agent_swarm.swarm.records import EpisodeStatus
    from agent_swarm.tools.registry import tool

    turns = iter(
        [
            _calls_body('{"city": "Paris"}', '{"city": "Oslo"', '{"city": "Rome"}'),
            vllm_body(message={"role": "assistant", "content": "done"}, finish_reason="stop"),
        ]
    )
    b, seen = backend(lambda r: httpx.Response(200, json=next(turns)), flavour="vllm")

    @tool
    def get_weather(city: str) -> str:
        """Weather for a city."""
        return f"sunny in {city}"

    record = await Orchestrator(b, SwarmConfig(subagents=False), tools=[get_weather]).run("weather?")
    assert record.status is EpisodeStatus.COMPLETED and record.answer == "done"
    (turn, _) = record.turns
    assert [t.id for t in turn.tool_calls] == ["c0", "c1", "c2"] and turn.tool_calls[1].error
    results = record.stages[0].tool_results
    assert [(r.call.id, r.is_error) for r in results] == [("c0", False), ("c1", True), ("c2", False)]
    assert results[1].error_type == "ModelOutputError" and "not run" in results[1].content
    # The model saw all three calls and an answer to each, the broken one as an error.
    sent = json.loads(seen[1].content)["messages"]
    assert [c["id"] for c in sent[2]["tool_calls"]] == ["c0", "c1", "c2"]
    assert [m["content"][:12] for m in sent[3:]] == ["sunny in Par", "error: this ", "sunny in Rom"]


async def test_a_broken_call_goes_back_verbatim_so_the_next_prompt_extends_the_last_one() -> None:
    """Regression (found by the soak): a call whose arguments did not parse went back to the
    server as ``{}``, so the next prompt's token ids no longer extended the previous prompt + response:
    the turn was flagged as drifted and the episode could not become a trajectory (3 of the first 70
    soak episodes). The server here tokenizes each message word by word, as a template does."""
    from agent_swarm.orchestrator import Orchestrator, SwarmConfig
    from agent_swarm.swarm.records import EpisodeStatus
    from agent_swarm.swarm.rl.rewards import PARLReward
    from agent_swarm.swarm.rl.trajectory import build_trajectory
    from agent_swarm.tools.registry import tool

    def ids(text: str) -> list[int]:
        return [100 + zlib.crc32(w.encode()) % 50_000 for w in text.split()]

    def said(m: dict[str, Any]) -> str:
        calls = [f"{c['id']} {c['function']['name']} {c['function']['arguments']}" for c in m.get("tool_calls") or []]
        return " ".join([m.get("content") or "", *calls])

    replies = iter(
        [
            _calls_body('{"city": "Paris"}', '{"city": "Oslo', '{"city": "Rome"}')["choices"][0]["message"],
            {**_calls_body('{"city": "Ber')["choices"][0]["message"], "content": "Nearly there."},  # alone
            {"role": "assistant", "content": "done"},
        ]
    )

    def answer(request: httpx.Request) -> httpx.Response:
        messages = json.loads(request.content)["messages"]
        prompt = [i for m in messages for i in ids(f"<{m['role']}> {said(m)} <end>")] + ids("<assistant>")
        message = next(replies)
        out = ids(said(message)) + ids("<end>")
        body = vllm_body(
            message=message,
            finish_reason="tool_calls" if message.get("tool_calls") else "stop",
            token_ids=out,
            logprobs={"content": [{"token": f"token_id:{t}", "logprob": -0.5} for t in out]},
        )
        body["prompt_token_ids"] = prompt
        return httpx.Response(200, json=body)

    b, seen = backend(answer, flavour="vllm")

    @tool
    def get_weather(city: str) -> str:
        """Weather for a city."""
        return f"sunny in {city}"

    orch = Orchestrator(b, SwarmConfig(subagents=False), tools=[get_weather], reward_fn=PARLReward())
    record = await orch.run("weather?")
    assert record.status is EpisodeStatus.COMPLETED and record.answer == "done"
    resent = json.loads(seen[1].content)["messages"][2]["tool_calls"][1]["function"]
    assert resent == {"name": "get_weather", "arguments": '{"city": "Oslo'}  # what the model wrote
    alone = json.loads(seen[2].content)["messages"]
    assert (
        alone[-2]["content"] == "Nearly there."
        and alone[-2]["tool_calls"][0]["function"]["arguments"] == '{"city": "Ber'
    )
    assert alone[-1]["role"] == "tool" and "not valid JSON" in alone[-1]["content"]  # answered as the call's result
    assert record.drift_count == 0 and not any(t.drift for t in record.turns)
    assert len(build_trajectory(record).turns) == 3  # before: TrajectoryError, "turn 1 drifted"
    # Records keep the raw text only where there is one.
    dumped = json.loads(record.model_dump_json())["turns"][0]["tool_calls"]
    assert ["raw_arguments" in c for c in dumped] == [False, True, False]


async def test_fenced_json_in_content_is_parsed_when_the_server_parser_found_nothing() -> None:
    text = 'Calling it.\n```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```'
    body = vllm_body(message={"role": "assistant", "content": text, "tool_calls": []}, finish_reason="stop")
    b, _ = backend(lambda r: httpx.Response(200, json=body), flavour="vllm")
    c = await b.complete(REQ)
    assert [t.arguments for t in c.tool_calls] == [{"city": "Paris"}]
    assert c.text == "Calling it." and c.finish_reason == "tool_calls"


async def test_an_unfinished_call_in_content_is_dropped_only_when_the_server_cut_the_output() -> None:
    text = (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "argu'
    )
    cut = vllm_body(message={"role": "assistant", "content": text, "tool_calls": []}, finish_reason="length")
    b, _ = backend(lambda r: httpx.Response(200, json=cut), flavour="vllm")
    c = await b.complete(REQ)
    assert [t.arguments for t in c.tool_calls] == [{"city": "Paris"}] and c.parse_error is None
    whole = vllm_body(message={"role": "assistant", "content": text, "tool_calls": []}, finish_reason="stop")
    b, _ = backend(lambda r: httpx.Response(200, json=whole), flavour="vllm")
    c = await b.complete(REQ)
    assert c.tool_calls == () and c.parse_error is not None and "invalid" in c.parse_error


async def test_history_with_tool_calls_and_results_goes_over_the_wire() -> None:
    b, seen = backend(lambda r: httpx.Response(200, json=vllm_body()), flavour="openai")
    call = ToolCall(id="c1", name="get_weather", arguments={"city": "Paris"})
    req = dataclasses.replace(
        REQ,
        messages=(
            *REQ.messages,
            AssistantMessage(content="", tool_calls=(call,)),
            ToolMessage(tool_call_id="c1", name="get_weather", content="sunny"),
        ),
        sampling=SamplingParams(temperature=0.2, max_tokens=5, seed=3, stop=("\n\n",)),
    )
    await b.complete(req)
    sent = json.loads(seen[0].content)
    assert sent["messages"][1]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "sunny"}
    assert (sent["temperature"], sent["max_tokens"], sent["seed"], sent["stop"]) == (0.2, 5, 3, ["\n\n"])
    assert "return_token_ids" not in sent  # a plain OpenAI server would reject vLLM's extras


async def test_tool_choice_none_sends_no_tools() -> None:
    b, seen = backend(lambda r: httpx.Response(200, json=vllm_body()), flavour="vllm")
    await b.complete(dataclasses.replace(REQ, tool_choice="none"))
    assert "tools" not in json.loads(seen[0].content)


async def test_constrained_actions_send_a_json_schema() -> None:
    content = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}'
    body = vllm_body(message={"role": "assistant", "content": content}, finish_reason="stop")
    b, seen = backend(lambda r: httpx.Response(200, json=body), constrain_actions=True)
    c = await b.complete(REQ)
    assert json.loads(seen[0].content)["response_format"]["type"] == "json_schema"
    assert [t.arguments for t in c.tool_calls] == [{"city": "Oslo"}]


async def test_model_name_is_asked_from_the_server_when_not_given() -> None:
    def handler(r: httpx.Request) -> httpx.Response:
        if r.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "served-smol"}]})
        return httpx.Response(200, json=vllm_body())

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    b = OpenAIBackend("http://vllm.test", "", client=client)
    await b.complete(REQ)
    assert b.model == "served-smol"


# -- faults -------------------------------------------------------------------------------------------


async def test_429_and_5xx_are_retried_then_succeed() -> None:
    codes = iter([429, 503, 500])

    def handler(r: httpx.Request) -> httpx.Response:
        code = next(codes, 200)
        return httpx.Response(
            code,
            json=vllm_body() if code == 200 else {"error": "busy"},
            headers={"retry-after": "0"} if code == 429 else {},
        )

    b, seen = backend(handler)
    c = await b.complete(REQ)
    assert len(seen) == 4 and c.token_ids == (57, 5248, 2)


async def test_answered_requests_are_freed_without_waiting_for_the_cyclic_gc() -> None:
    """Each response (its body, its request: the whole prompt) is freed when the call returns, not
    left in httpx's response <-> stream cycle for a full GC pass: a long rollout's memory grew with
    them under the CLI's GC settings (bench/README.md, Soak)."""
    codes = iter([500, 200, 429, 200] * 10)

    def handler(r: httpx.Request) -> httpx.Response:
        code = next(codes)
        return httpx.Response(code, json=vllm_body() if code == 200 else {"error": "busy"})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    b = OpenAIBackend("http://vllm.test/v1", "smol", client=client, retry=FAST)
    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            assert (await b.complete(REQ)).token_ids == (57, 5248, 2)
        # type(), not isinstance(): no attribute lookup on whatever objects other modules left (proxies warn)
        left = sum(type(o) in (httpx.Response, httpx.Request) for o in gc.get_objects())
    finally:
        gc.enable()
        await client.aclose()
    assert left == 0


async def test_persistent_5xx_raises_unavailable_naming_the_last_error() -> None:
    b, seen = backend(lambda r: httpx.Response(502, text="bad gateway"))
    with pytest.raises(BackendUnavailableError, match=r"after 4 attempt.*HTTP 502: bad gateway"):
        await b.complete(REQ)
    assert len(seen) == 4


async def test_client_errors_are_not_retried() -> None:
    b, seen = backend(
        lambda r: httpx.Response(400, json={"error": "auto tool choice requires --enable-auto-tool-choice"})
    )
    with pytest.raises(BackendError, match=r"HTTP 400.*enable-auto-tool-choice"):
        await b.complete(REQ)
    assert len(seen) == 1


@pytest.mark.parametrize("body", [b"<html>oops</html>", b'["not", "an", "object"]', b'{"choices": []}'])
async def test_garbage_answers_are_backend_errors(body: bytes) -> None:
    b, _ = backend(lambda r: httpx.Response(200, content=body))
    with pytest.raises(BackendError):
        await b.complete(REQ)


@pytest.mark.parametrize("body", [b"<html>502 bad gateway</html>", b'{"choices": [{"message"', b"[1, 2]"])
async def test_a_200_whose_body_is_not_a_json_object_is_retried_like_a_5xx(body: bytes) -> None:
    answers = iter([httpx.Response(200, content=body), httpx.Response(200, json=vllm_body())])
    b, seen = backend(lambda r: next(answers))
    c = await b.complete(REQ)
    assert len(seen) == 2 and c.token_ids == (57, 5248, 2)


async def test_a_body_that_stays_broken_names_the_body_and_what_to_check() -> None:
    b, seen = backend(lambda r: httpx.Response(200, content=b"<html>login</html>"))
    with pytest.raises(BackendError, match=r"after 4 attempt.*not JSON: '<html>login</html>'.*OpenAI-compatible"):
        await b.complete(REQ)
    assert len(seen) == 4


async def test_a_backoff_sleep_holds_no_limiter_slot() -> None:
    """With one slot, a request waiting out a Retry-After must not block another request."""
    order: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        who = json.loads(r.content)["messages"][0]["content"]
        order.append(who)
        if who == "first" and order.count("first") == 1:
            return httpx.Response(503, text="busy", headers={"retry-after": "1"})
        return httpx.Response(200, json=vllm_body())

    b, _ = backend(handler, max_concurrency=1, retry=RetryPolicy(max_retries=2, base_delay=0.01, max_delay=5))
    done: dict[str, float] = {}

    async def ask(who: str) -> None:
        await b.complete(ModelRequest(messages=(UserMessage(content=who),)))
        done[who] = anyio.current_time() - t0

    t0 = anyio.current_time()
    async with anyio.create_task_group() as tg:
        tg.start_soon(ask, "first")
        await anyio.sleep(0.05)
        tg.start_soon(ask, "second")
    assert order == ["first", "second", "first"]
    assert done["second"] < 0.5 <= 1.0 <= done["first"]


async def test_a_hung_request_is_cut_at_the_timeout_and_frees_its_slot() -> None:
    """A transport that never answers (or trickles forever) is bounded by ``timeout`` per attempt."""
    calls = 0

    async def handler(r: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if json.loads(r.content)["messages"][0]["content"] == "hang":
            await anyio.sleep(30)
        return httpx.Response(200, json=vllm_body())

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    b = OpenAIBackend(
        "http://vllm.test", "smol", client=client, timeout=0.3, max_concurrency=1, retry=RetryPolicy(1, 0.01, 0.01)
    )
    t0 = anyio.current_time()
    with pytest.raises(BackendTimeoutError, match=r"after 2 attempt.*within 0\.3 s"):
        await b.complete(ModelRequest(messages=(UserMessage(content="hang"),)))
    assert anyio.current_time() - t0 < 6  # two 0.3 s attempts, not the 30 s hang (holds at load 4)
    assert (await b.complete(REQ)).token_ids == (57, 5248, 2) and calls == 3


async def test_connection_errors_are_retried_then_reported() -> None:
    def handler(r: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=r)

    b, seen = backend(handler)
    with pytest.raises(BackendUnavailableError, match="connection failed"):
        await b.complete(REQ)
    assert len(seen) == 4


async def test_slow_server_times_out() -> None:
    def handler(r: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=r)

    b, seen = backend(handler, retry=RetryPolicy(max_retries=1, base_delay=0.001), timeout=0.5)
    with pytest.raises(BackendTimeoutError, match=r"no answer within 0\.5 s"):
        await b.complete(REQ)
    assert len(seen) == 2


async def test_concurrency_cap_per_endpoint() -> None:
    in_flight = peak = 0

    async def handler(r: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await anyio.sleep(0.02)
        in_flight -= 1
        return httpx.Response(200, json=vllm_body())

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    b = OpenAIBackend("http://vllm.test", "smol", client=client, max_concurrency=3)
    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(b.complete, REQ)
    assert peak == 3


def test_bad_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="http"):
        OpenAIBackend("localhost:8000")
    with pytest.raises(ConfigError, match="max_concurrency"):
        OpenAIBackend("http://x", max_concurrency=0)


async def test_constrained_final_turn_allows_only_an_answer_and_unwraps_it() -> None:
    body = vllm_body(message={"role": "assistant", "content": '{"answer": "Paris and Oslo"}'}, finish_reason="stop")
    b, seen = backend(lambda r: httpx.Response(200, json=body), constrain_actions=True)
    c = await b.complete(dataclasses.replace(REQ, tool_choice="none"))
    schema = json.loads(seen[0].content)["response_format"]["json_schema"]["schema"]
    assert schema["required"] == ["answer"] and "tools" not in json.loads(seen[0].content)
    assert c.text == "Paris and Oslo" and c.tool_calls == ()


async def test_allowed_tools_narrow_the_constrained_schema() -> None:
    body = vllm_body(message={"role": "assistant", "content": '{"answer": "sunny"}'}, finish_reason="stop")
    b, seen = backend(lambda r: httpx.Response(200, json=body), constrain_actions=True)
    other = ToolSpec(name="get_time", parameters={"type": "object", "properties": {}})
    await b.complete(dataclasses.replace(REQ, tools=(*REQ.tools, other), allowed_tools=("get_time",)))
    await b.complete(dataclasses.replace(REQ, tools=(*REQ.tools, other)))
    narrowed, free = (json.dumps(json.loads(r.content)["response_format"]) for r in seen)
    assert '"get_time"' in narrowed and f'"{REQ.tools[0].name}"' not in narrowed
    assert '"get_time"' in free and f'"{REQ.tools[0].name}"' in free


async def test_chat_spans_name_the_server() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agent_swarm.orchestrator import Orchestrator
    from agent_swarm.swarm.backend import Completion
    from agent_swarm.swarm.testing import FunctionBackend

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    b, _ = backend(lambda r: httpx.Response(200, json=vllm_body()), flavour="vllm")
    assert b.base_url == "http://vllm.test"
    # Every orchestrator turn is a chat span on this backend.
    await Orchestrator(b, tracer_provider=provider, subagent_backend=FunctionBackend(lambda r: Completion())).run("x")
    chat = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    assert chat and chat[0].attributes is not None
    assert chat[0].attributes["server.address"] == "vllm.test"
    assert chat[0].attributes["gen_ai.provider.name"] == "openai"
