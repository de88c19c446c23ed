"""Hot-path objects are plain dataclasses; data is validated where it enters and checked where it leaves."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.orchestrator.store import read_episode, write_episode
from agent_swarm.swarm.backend import ModelRequest
from agent_swarm.swarm.messages import AssistantMessage, MessageAdapter, ToolCall, ToolMessage, UserMessage
from agent_swarm.swarm.records import EpisodeRecord, StepRecord, SubagentResult, dump_record
from agent_swarm.swarm.testing import ScriptedBackend, call
from agent_swarm.tools import tool


@tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


def _episode() -> EpisodeRecord:
    policy = ScriptedBackend(
        [
            [
                call("create_subagent", name="w", system_prompt="p", tools=["add"]),
                call("assign_task", agent="w", task="t1"),
                call("assign_task", agent="w", task="t2"),
            ],
            "done",
        ]
    )
    workers = ScriptedBackend({"w-0-0": [[call("add", a=1, b=2)], "3"], "w-0-1": [[call("add", a="x", b=2)], "?"]})
    return Orchestrator(policy, SwarmConfig(), tools=[add], subagent_backend=workers).run_sync("go", episode_id="e")


def test_an_episode_record_goes_out_and_comes_back_validated_and_equal(tmp_path) -> None:  # type: ignore[no-untyped-def]
    record = _episode()
    subs = record.subagent_results
    assert [r.status.value for r in subs] == ["completed", "completed"] and len(subs[0].step_records) == 2
    assert subs[1].step_records[0].tool_results[0].is_error  # "x" is not an int: the tool refused it
    back = read_episode(write_episode(record, tmp_path))
    assert back == record
    transcript = back.subagent_results[0].transcript
    assert [type(m) for m in transcript] == [type(m) for m in subs[0].transcript]
    assert isinstance(transcript[2], AssistantMessage) and isinstance(transcript[2].tool_calls[0], ToolCall)
    assert isinstance(back.subagent_results[0].step_records[0], StepRecord)


def test_a_record_holding_a_wrong_type_is_refused_on_the_way_out() -> None:
    record = _episode()
    stage = record.stages[0]
    bad_sub = dataclasses.replace(stage.subagents[0], steps="two")  # type: ignore[arg-type]
    bad = record.model_copy(update={"stages": (stage.model_copy(update={"subagents": (bad_sub,)}),)})
    with pytest.raises(PydanticSerializationError):
        dump_record(bad)


def test_a_record_read_from_json_is_validated() -> None:
    text = dump_record(_episode()).replace('"index":0,"kind":"subagent"', '"index":"zero","kind":"subagent"', 1)
    with pytest.raises(ValidationError, match="index"):
        EpisodeRecord.model_validate_json(text)


def test_messages_are_validated_where_they_enter() -> None:
    m = MessageAdapter.validate_python({"role": "tool", "tool_call_id": "c", "name": "add", "content": "3"})
    assert m == ToolMessage(tool_call_id="c", name="add", content="3")
    for bad in ({"role": "user"}, {"role": "user", "content": "x", "colour": "red"}, {"role": "robot", "content": "x"}):
        with pytest.raises(ValidationError):
            MessageAdapter.validate_python(bad)
    request = ModelRequest(messages=({"role": "user", "content": "hi"},))  # type: ignore[arg-type]
    assert request.messages == (UserMessage(content="hi"),)
    with pytest.raises(ValidationError):
        ModelRequest(messages=({"role": "user", "content": 3},))  # type: ignore[arg-type]
    with pytest.raises(ValidationError):  # a model's tool call is validated when the backend builds it
        ToolCall(id="c", name="add", arguments="not an object")  # type: ignore[arg-type]


def _slotted(obj: object) -> bool:
    return dataclasses.is_dataclass(obj) and not hasattr(obj, "__dict__")


def test_hot_path_objects_are_plain_slotted_values_and_picklable() -> None:
    """The objects built once per step, tool call or sub-agent are plain slotted dataclasses (no
    per-instance dict; not frozen, whose ``__init__`` sets every field through ``object.__setattr__``),
    compared by value, and they cross processes (Ray placement)."""
    record = _episode()
    result = record.subagent_results[0]
    step = result.step_records[0]
    request = ModelRequest(messages=(UserMessage(content="q"),))
    said = next(m for m in result.transcript if isinstance(m, AssistantMessage))
    told = next(m for m in result.transcript if isinstance(m, ToolMessage))
    hot: tuple[Any, ...] = (result, step, step.tool_results[0], step.tool_results[0].call, request, said, told)
    for obj in hot:
        assert _slotted(obj), type(obj).__name__
        assert not type(obj).__dataclass_params__.frozen, type(obj).__name__
    assert step == dataclasses.replace(step) and step != dataclasses.replace(step, index=7)
    assert pickle.loads(pickle.dumps(result)) == result
    assert isinstance(result, SubagentResult)


def test_completions_and_usage_are_validated_where_a_backend_builds_them() -> None:
    from agent_swarm.swarm.backend import Completion, Usage

    c = Completion(
        tool_calls=[{"id": "c", "name": "add", "arguments": {"a": 1}}],  # type: ignore[arg-type]
        usage={"prompt_tokens": "3", "completion_tokens": 2.0},  # type: ignore[arg-type]
        token_ids=[1, 2],  # type: ignore[arg-type]
    )
    assert c.tool_calls == (ToolCall(id="c", name="add", arguments={"a": 1}),) and c.token_ids == (1, 2)
    assert c.usage == Usage(prompt_tokens=3, completion_tokens=2) and c.usage.total_tokens == 5
    for bad in (
        {"finish_reason": "bored"},
        {"finish_reason": ["stop"]},
        {"usage": {"prompt_tokens": "x"}},
        {"logprobs": ("x",)},
    ):
        with pytest.raises(ValidationError):
            Completion(**bad)
    assert _slotted(c) and _slotted(c.usage)
    assert pickle.loads(pickle.dumps(c)) == c
