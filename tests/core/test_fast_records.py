"""The runtime's trusted constructors build the same records as validation would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel, Field

from swarm._fast import maker
from swarm.backend import ModelRequest, SamplingParams, Usage
from swarm.messages import AssistantMessage, ToolCall, ToolMessage
from swarm.records import AgentStatus, StepRecord, SubagentResult, ToolResult

CALL = ToolCall(id="c1", name="work", arguments={"x": 1})


@pytest.mark.parametrize(
    ("cls", "values"),
    [
        (AssistantMessage, {"content": "hi", "tool_calls": (CALL,)}),
        (AssistantMessage, {}),
        (ToolMessage, {"tool_call_id": "c1", "name": "work", "content": "ok", "is_error": True}),
        (ModelRequest, {"messages": (AssistantMessage(content="a"),), "sampling": SamplingParams(), "agent_id": "w-0"}),
        (Usage, {"prompt_tokens": 3, "completion_tokens": 4}),
        (ToolResult, {"call": CALL, "content": "ok", "started": 1.0, "ended": 2.5}),
        (StepRecord, {"agent_id": "w", "index": 2, "kind": "subagent", "stage": 0, "started": 1.0, "ended": 2.0}),
        (SubagentResult, {"agent_id": "w", "name": "w", "task": "t", "status": AgentStatus.COMPLETED, "steps": 1}),
    ],
)
def test_trusted_construction_equals_validated_construction(cls: Any, values: dict[str, Any]) -> None:
    fast, checked = maker(cls)(**values), cls(**values)
    assert type(fast) is cls and fast == checked and repr(fast) == repr(checked)
    if isinstance(checked, BaseModel):
        assert fast.model_dump_json() == checked.model_dump_json()
        assert type(checked).model_validate_json(fast.model_dump_json()) == checked
    elif cls is StepRecord:
        assert hash(fast) == hash(checked)  # frozen dataclasses stay hashable


def test_copies_with_updates_do_not_leak_into_other_instances() -> None:
    make = maker(SubagentResult)
    a = make(agent_id="a", name="w", task="t", status=AgentStatus.COMPLETED)
    b = make(agent_id="b", name="w", task="t", status=AgentStatus.COMPLETED)
    c = a.model_copy(update={"report": "changed"})
    assert c.report == "changed" and a.report == "" and b.report == ""
    assert a.model_fields_set == b.model_fields_set == set(SubagentResult.model_fields)


def test_trusted_construction_still_refuses_missing_and_unknown_fields() -> None:
    with pytest.raises(TypeError, match="agent_id"):
        maker(StepRecord)(index=0, kind="subagent", stage=0, started=0.0, ended=0.0)
    with pytest.raises(TypeError, match="colour"):
        maker(ToolMessage)(tool_call_id="c", name="n", content="x", colour="red")
    with pytest.raises(TypeError, match="content"):
        maker(ToolMessage)(tool_call_id="c", name="n")


def test_default_factories_give_each_instance_its_own_value() -> None:
    class M(BaseModel):
        tags: list[str] = Field(default_factory=list)

    @dataclass
    class D:
        tags: list[str] = field(default_factory=list)

    for cls in (M, D):
        a, b = maker(cls)(), maker(cls)()
        a.tags.append("x")
        assert b.tags == []

    class Bad(BaseModel):
        tags: list[str] = []

    with pytest.raises(TypeError, match="default_factory"):
        maker(Bad)


_EPISODE = """
import json
from orchestrator import Orchestrator, SwarmConfig
from swarm.testing import ScriptedBackend, call
from tools import tool

@tool
def add(a: int, b: int) -> int:
    '''Add.'''
    return a + b

policy = ScriptedBackend([[call("create_subagent", name="w", system_prompt="p", tools=["add"]),
                          call("assign_task", agent="w", task="t1"), call("assign_task", agent="w", task="t2")],
                         "done"])
workers = ScriptedBackend({"w-0-0": [[call("add", a=1, b=2)], "3"], "w-0-1": [[call("add", a="x", b=2)], "?"]})
record = Orchestrator(policy, SwarmConfig(), tools=[add], subagent_backend=workers).run_sync("go", episode_id="e")

def scrub(v):
    if isinstance(v, dict):
        return {k: scrub(x) for k, x in v.items()
                if k not in {"started", "ended", "started_at", "wall_time_s", "wall_critical_path_s"}}
    if isinstance(v, list):
        return [scrub(x) for x in v]
    return v

print(json.dumps(scrub(record.model_dump(mode="json")), sort_keys=True))
"""


def test_an_episode_record_is_the_same_with_validation_switched_on() -> None:
    """SWARM_VALIDATE_RECORDS=1 makes every trusted constructor validate; the record must not change."""

    def run(validate: str) -> Any:
        env = {**os.environ, "SWARM_VALIDATE_RECORDS": validate}
        out = subprocess.run([sys.executable, "-c", _EPISODE], env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout)

    fast, checked = run("0"), run("1")
    assert fast == checked
    subs = [r for s in fast["stages"] for r in s["subagents"]]
    assert [r["status"] for r in subs] == ["completed", "completed"] and len(subs[0]["step_records"]) == 2
