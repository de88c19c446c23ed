"""A generation that repeats itself verbatim is stopped early; one that does not is never cut."""

from __future__ import annotations

import gc
import json
import random
from collections.abc import Callable

import anyio
import anyio.lowlevel
import httpx
import pytest

from agent_swarm.swarm.backends.openai_http import OpenAIBackend, RetryPolicy
from agent_swarm.swarm.backends.repeats import RepeatGuard
from agent_swarm.swarm.errors import BackendError, BackendUnavailableError


def _fed_until_stop(guard: RepeatGuard, ids: list[int]) -> int | None:
    for i, t in enumerate(ids):
        if not guard.feed([t]):
            return i + 1
    return None


def test_a_digit_loop_is_stopped_soon_after_the_span() -> None:
    # A 1.5B sub-agent wrote doc_id "123456789012345678901234…" until its 512-token cap.
    ids = [7, 8, 9] + list(range(10)) * 50
    stopped = _fed_until_stop(RepeatGuard(), ids)
    assert stopped is not None and 128 <= stopped <= 3 + 128 + 8


@pytest.mark.parametrize("period", [1, 2, 17, 40])
def test_every_period_up_to_the_limit_is_caught(period: int) -> None:
    block = list(range(1000, 1000 + period))
    assert _fed_until_stop(RepeatGuard(), block * (400 // period + 1)) is not None


def test_output_that_does_not_loop_is_never_cut() -> None:
    rng = random.Random(0)
    assert _fed_until_stop(RepeatGuard(), [rng.randrange(50) for _ in range(5000)]) is None
    # Fan-out: the same call shape again and again with a different item each time is not a loop.
    calls = []
    for item in range(40):
        calls += [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 2000 + item, 21, 22]
    assert _fed_until_stop(RepeatGuard(), calls) is None
    # A block longer than max_period repeating is left alone (a legitimately repeated paragraph).
    para = list(range(3000, 3060))
    assert _fed_until_stop(RepeatGuard(), para * 5) is None


def _fed_text_until_stop(guard: RepeatGuard, text: str, chunk: int) -> int | None:
    """Feed ``text`` ``chunk`` characters at a time (one made-up token id per chunk); where it stopped."""
    for i in range(0, len(text), chunk):
        if not guard.feed([i], text[i : i + chunk]):
            return i + chunk
    return None


def _call(name: str, **args: object) -> str:
    return json.dumps({"name": name, "arguments": args})


@pytest.mark.parametrize("chunk", [1, 3, 7, 50])
def test_a_batch_of_calls_written_again_is_stopped_at_its_second_repeated_call(chunk: int) -> None:
    # A 1.5B orchestrator wrote the same 3 calls 17 times in one turn, bare JSON objects one after the
    # other (about 75 tokens a batch, beyond max_period), until the 1,280-token cap, on a BFCL dev task.
    batch = "".join(_call("calc_area_triangle", base=b, height=h) for b, h in ((10, 5), (15, 7), (20, 10)))
    text = batch * 17
    stopped = _fed_text_until_stop(RepeatGuard(watch_calls=True), text, chunk)
    one = len(_call("calc_area_triangle", base=10, height=5))
    second_repeat_closes = len(batch) + 2 * one  # where the second repeated call in a row ends
    assert stopped is not None and second_repeat_closes <= stopped < second_repeat_closes + chunk
    assert _fed_text_until_stop(RepeatGuard(), text, chunk) is None  # not watched: nothing stops it here
    # between hermes tags, and with a string holding braces and an escaped quote
    odd_call = _call("f", q='a {b} "c')  # braces and a quote (escaped by json.dumps) inside a string
    tagged = "".join(f"<tool_call>\n{odd_call}\n</tool_call>\n" for _ in range(3))
    assert _fed_text_until_stop(RepeatGuard(watch_calls=True), tagged, chunk) is not None


def test_different_calls_and_one_repeated_call_among_new_ones_are_not_a_loop() -> None:
    text = "".join(_call("search", query=f"item {i}") for i in range(40))
    assert _fed_text_until_stop(RepeatGuard(watch_calls=True), text, 5) is None
    # an assignment sent again, then the rest of the list: the calls after it are new work
    calls = [_call("assign_task", task=t) for t in ("a", "b", "a", "c", "d", "b", "e")]
    assert _fed_text_until_stop(RepeatGuard(watch_calls=True), " ".join(calls), 4) is None
    # a brace inside a string does not end the call: "}{" in an argument is no second call, so these two
    # calls are two (not four objects, two of them repeated), and written twice they are a loop
    # braces that are no tool call (code, an empty dict) are never a loop of calls
    code = "x = {}\ny = {}\nz = {}\nint f() { return 0; }\nint g() { return 0; }\nint h() { return 0; }\n"
    assert _fed_text_until_stop(RepeatGuard(watch_calls=True), code, 3) is None
    odd = _call("f", q="x}{y") + _call("f", q="x}{z")
    assert _fed_text_until_stop(RepeatGuard(watch_calls=True), odd, 2) is None
    assert _fed_text_until_stop(RepeatGuard(watch_calls=True), odd + odd, 2) is not None


def _sse(events: list[dict[str, object]]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


async def test_post_stream_stops_reading_when_told_and_returns_the_events_so_far() -> None:
    events = [{"content": str(i), "tokens": [i], "stop": False} for i in range(10)] + [{"stop": True}]

    def handler(request: httpx.Request) -> httpx.Response:
        assert json.loads(request.content)["stream"] is True
        return httpx.Response(200, content=_sse(events), headers={"content-type": "text/event-stream"})

    b = OpenAIBackend("http://llama.test", "m", client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    got = await b.post_stream("/completion", {"stream": True}, lambda e: e["tokens"] != [4])
    assert [e["tokens"] for e in got] == [[0], [1], [2], [3], [4]]
    whole = await b.post_stream("/completion", {"stream": True}, lambda e: True)
    assert len(whole) == 11 and whole[-1] == {"stop": True}


def _served_by(handler: Callable[[httpx.Request], httpx.Response], retry: RetryPolicy) -> OpenAIBackend:
    """A backend whose server is ``handler``, retrying as ``retry`` says."""
    return OpenAIBackend(
        "http://llama.test", "m", client=httpx.AsyncClient(transport=httpx.MockTransport(handler)), retry=retry
    )


async def test_post_stream_retries_like_post_json_and_fails_on_a_bad_stream() -> None:
    calls = {"n": 0}

    def flaky(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] == 1:
            return httpx.Response(503, text="busy")
        return httpx.Response(200, content=_sse([{"content": "a", "tokens": [1], "stop": True}]))

    b = _served_by(flaky, RetryPolicy(max_retries=2, base_delay=0.0))
    assert (await b.post_stream("/completion", {}, lambda e: True))[0]["content"] == "a"
    assert calls["n"] == 2

    def broken(request: httpx.Request) -> httpx.Response:  # an event, then something that is not JSON
        return httpx.Response(200, content=_sse([{"content": "a", "tokens": [1], "stop": False}]) + b"data: <html>\n\n")

    b = _served_by(broken, RetryPolicy(max_retries=0))
    with pytest.raises(BackendError, match="not JSON"):
        await b.post_stream("/completion", {}, lambda e: True)

    # A stream broken part-way is retried from the start: the caller sees only the whole second one.
    tries = {"n": 0}

    def cut_once(request: httpx.Request) -> httpx.Response:
        tries["n"] += 1
        first = _sse([{"content": "a", "tokens": [1], "stop": False}])
        if tries["n"] == 1:
            return httpx.Response(200, content=first + b"data: <html>\n\n")
        return httpx.Response(200, content=first + _sse([{"content": "b", "tokens": [2], "stop": True}]))

    b = _served_by(cut_once, RetryPolicy(max_retries=1, base_delay=0.0))
    assert [e["tokens"] for e in await b.post_stream("/completion", {}, lambda e: True)] == [[1], [2]]

    def empty(request: httpx.Request) -> httpx.Response:  # [DONE] and nothing else
        return httpx.Response(200, content=b"data: [DONE]\n\n")

    b = _served_by(empty, RetryPolicy(max_retries=0))
    with pytest.raises(BackendError, match="without an event"):
        await b.post_stream("/completion", {}, lambda e: True)

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    b = _served_by(down, RetryPolicy(max_retries=1, base_delay=0.0))
    with pytest.raises(BackendUnavailableError, match="refused"):
        await b.post_stream("/completion", {}, lambda e: True)


async def test_streamed_responses_are_freed_without_waiting_for_the_cyclic_gc() -> None:
    # Like post_json's responses (test_openai_http.py): the local engine streams every generation.
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=_sse([{"content": "a", "tokens": [1], "stop": True}]))

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    b = OpenAIBackend("http://llama.test", "m", client=client)
    gc.collect()
    gc.disable()
    try:
        for _ in range(10):
            assert len(await b.post_stream("/completion", {}, lambda e: True)) == 1
        for _ in range(10):  # httpx's inner byte iterators are closed by the loop's async-generator hooks
            await anyio.lowlevel.checkpoint()
        left = sum(type(o) in (httpx.Response, httpx.Request) for o in gc.get_objects())
    finally:
        gc.enable()
        await client.aclose()
    assert left == 0
