"""The shipped test doubles: scripted and function backends."""

from __future__ import annotations

import pytest

from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.errors import ScriptError
from agent_swarm.swarm.function_backend import render_prompt, render_response
from agent_swarm.swarm.messages import AssistantMessage, UserMessage
from agent_swarm.swarm.testing import FunctionBackend, ScriptedBackend, call


def req(text: str = "hi", agent: str = "") -> ModelRequest:
    return ModelRequest(messages=(UserMessage(content=text),), agent_id=agent)


async def test_scripted_backend_plays_turns_in_order_and_records_calls() -> None:
    b = ScriptedBackend(["one", call("t", x=1), [call("a"), call("b")]])
    assert (await b.complete(req("q1"))).text == "one"
    c2 = await b.complete(req("q2"))
    assert c2.tool_calls[0].name == "t" and c2.tool_calls[0].arguments == {"x": 1}
    assert c2.finish_reason == "tool_calls"
    c3 = await b.complete(req("q3"))
    assert [c.name for c in c3.tool_calls] == ["a", "b"]
    assert [r.messages[0].content for r in b.calls] == ["q1", "q2", "q3"]
    b.assert_consumed()
    with pytest.raises(ScriptError, match="ran out of turns after 3"):
        await b.complete(req())


def test_unconsumed_turns_fail() -> None:
    b = ScriptedBackend(["a", "b"])
    with pytest.raises(ScriptError, match="2 unconsumed"):
        b.assert_consumed()
    with pytest.raises(ScriptError, match="unconsumed"), ScriptedBackend(["left over"]):
        pass


async def test_routed_script_and_unknown_route() -> None:
    b = ScriptedBackend({"a": ["from a"], "b": ["from b"]})
    assert (await b.complete(req(agent="b"))).text == "from b"
    assert (await b.complete(req(agent="a"))).text == "from a"
    with pytest.raises(ScriptError, match="no turns for route 'c'"):
        await b.complete(req(agent="c"))


async def test_exceptions_in_scripts_are_raised() -> None:
    b = ScriptedBackend([RuntimeError("down")])
    with pytest.raises(RuntimeError, match="down"):
        await b.complete(req())


async def test_function_backend_sync_and_async() -> None:
    async def fn(r: ModelRequest) -> Completion:
        return Completion(text=r.messages[-1].content.upper())

    b = FunctionBackend(fn, model="f")
    out = await b.complete(req("abc"))
    assert out.text == "ABC" and out.model == "f" and len(b.calls) == 1
    assert (await FunctionBackend(lambda r: Completion(text="s")).complete(req())).text == "s"


async def test_fake_tokens_are_prefix_stable_across_turns() -> None:
    b = ScriptedBackend([call("t", x=1), "done"])
    r1 = req("task")
    c1 = await b.complete(r1)
    msgs = (*r1.messages, AssistantMessage(content=c1.text, tool_calls=c1.tool_calls))
    c2 = await b.complete(ModelRequest(messages=msgs))
    assert c1.prompt_token_ids is not None and c1.token_ids is not None and c2.prompt_token_ids is not None
    assert c2.prompt_token_ids[: len(c1.prompt_token_ids) + len(c1.token_ids)] == c1.prompt_token_ids + c1.token_ids
    assert render_prompt(msgs).startswith(render_prompt(r1.messages) + render_response(c1.text, c1.tool_calls))
    assert c1.logprobs is not None and len(c1.logprobs) == len(c1.token_ids)
    assert c1.usage.completion_tokens == len(c1.token_ids)


def test_bad_script_items_are_rejected() -> None:
    with pytest.raises(ScriptError, match="scripted turn must be"):
        ScriptedBackend([[1, 2]])  # type: ignore[list-item]
