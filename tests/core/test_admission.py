"""Admission's every rule, through ``admit`` and ``resolve_agent`` alone (a pure function of the turn's
calls and the episode's state): which call runs, which is refused with which exact message, and what
each admitted sub-agent is given. Written against the surviving mutants of ``bench/mutation.py
admission``."""

from __future__ import annotations

from agent_swarm.orchestrator.admission import admit, resolve_agent
from agent_swarm.swarm.errors import ErrorType
from agent_swarm.swarm.messages import ToolCall
from agent_swarm.swarm.records import AgentDefinition
from agent_swarm.swarm.testing import call


def agents(*names: str) -> dict[str, AgentDefinition]:
    return {n: AgentDefinition(name=n, system_prompt=f"you are {n}") for n in names}


def assign(task: object, agent: object = "worker", id: str | None = None) -> ToolCall:
    return call("assign_task", id=id, agent=agent, task=task)


def test_every_kind_of_call_is_sorted_and_one_refusal_does_not_stop_the_turn() -> None:
    team = agents("worker", "coder")
    broken = ToolCall(id="bad", name="assign_task", arguments={}, error="not JSON")
    calls = [
        broken,  # an unparsed call goes to the tool layer for its error, even an assign_task
        call("create_subagent", id="mk", name="x", system_prompt="p"),  # handled before admission
        assign("t0", id="a0"),
        call("search", id="s", q="x"),
        assign("t1", agent="ghost", id="ghost"),
        assign("", id="empty"),
        assign("   ", id="blank"),
        assign(7, id="number"),
        call("coder", id="as-tool", task="fix it"),
        assign("t2", agent="coder-0-0", id="a1"),  # an instance id: its type runs, the model is told
        assign("t3", agent=" CODER ", id="a2"),
    ]
    plan = admit(calls, team, stage=3, step_cap=2, max_width=5)
    assert [c.id for c in plan.direct] == ["bad", "s"]
    assert plan.direct[0] is broken
    assert [(a.call.id, a.definition, a.task, a.agent_id, a.step_cap, a.note) for a in plan.assignments] == [
        ("a0", team["worker"], "t0", "worker-3-0", 2, None),
        (
            "a1",
            team["coder"],
            "t2",
            "coder-3-1",
            2,
            "'coder-0-0' is a sub-agent instance id; ran it as type 'coder' (pass the type name as agent)",
        ),
        ("a2", team["coder"], "t3", "coder-3-2", 2, "there is no type ' CODER '; ran it as 'coder'"),
    ]
    assert plan.assignments[0].call is calls[2]
    needs_task = ("assign_task needs a non-empty string 'task'", ErrorType.INVALID_ACTION)
    assert plan.refused == {
        "ghost": (
            "unknown sub-agent 'ghost'. Pass one of these types as agent: coder, worker.",
            ErrorType.INVALID_ACTION,
        ),
        "empty": needs_task,
        "blank": needs_task,
        "number": needs_task,
        "as-tool": (
            "'coder' is a sub-agent type, not a tool. Run it with assign_task: "
            '{"name": "assign_task", "arguments": {"agent": "coder", "task": "fix it"}}',
            ErrorType.AGENT_CALLED_AS_TOOL,
        ),
    }


def test_an_agent_called_as_a_tool_is_shown_the_call_to_make_with_its_task_unescaped() -> None:
    team = agents("worker")
    calls = [call("worker", id="u", task="capitale de la Côte d'Ivoire ?"), call("worker", id="n", task=3)]
    refused = admit(calls, team, stage=0, step_cap=1, max_width=1).refused
    assert refused["u"][0].endswith(
        '{"name": "assign_task", "arguments": {"agent": "worker", "task": "capitale de la Côte d\'Ivoire ?"}}'
    )
    assert refused["n"][0].endswith('{"name": "assign_task", "arguments": {"agent": "worker", "task": "..."}}')


def test_with_no_types_yet_an_unknown_agent_is_told_to_create_one() -> None:
    plan = admit([assign("t", id="a")], {}, stage=0, step_cap=1, max_width=1)
    assert plan.refused == {
        "a": (
            "unknown sub-agent 'worker'. Pass one of these types as agent: "
            "(none yet: create one with create_subagent).",
            ErrorType.INVALID_ACTION,
        )
    }


def test_one_step_of_budget_admits_and_none_refuses_with_the_budget_note() -> None:
    team = agents("worker")
    one = admit([assign("t")], team, stage=0, step_cap=1, max_width=1)
    assert [a.step_cap for a in one.assignments] == [1]
    none = admit([assign("t", id="a"), assign("u", id="b")], team, stage=0, step_cap=0, max_width=4)
    assert not none.assignments
    message = (
        "no critical-step budget is left to run a sub-agent{}; this task was not run. "
        "Answer the user now with what you have, in the form the task asks for."
    )
    assert none.refused["a"] == (message.format(""), ErrorType.BUDGET_EXHAUSTED)
    noted = admit([assign("t", id="a")], team, stage=0, step_cap=0, max_width=4, budget_note=" (9 of 10 used)")
    assert noted.refused["a"] == (message.format(" (9 of 10 used)"), ErrorType.BUDGET_EXHAUSTED)


def test_the_width_limit_refuses_exactly_the_assignments_past_it() -> None:
    calls = [assign(f"t{i}", id=f"a{i}") for i in range(4)]
    plan = admit(calls, agents("worker"), stage=1, step_cap=3, max_width=2)
    assert [a.agent_id for a in plan.assignments] == ["worker-1-0", "worker-1-1"]
    full = (
        "stage width limit of 2 sub-agents reached; this assignment was not run. Assign it in a later stage.",
        ErrorType.WIDTH_LIMIT,
    )
    assert plan.refused == {"a2": full, "a3": full}


def test_single_agent_mode_sends_every_call_to_the_tool_layer_and_sub_agents_are_the_default() -> None:
    team = agents("worker")
    calls = [call("create_subagent", name="x"), assign("t"), call("worker", task="t")]
    single = admit(calls, team, stage=0, step_cap=3, max_width=3, subagents=False)
    assert single.direct == calls and not single.assignments and not single.refused
    default = admit(calls, team, stage=0, step_cap=3, max_width=3)
    assert [a.task for a in default.assignments] == ["t"] and len(default.refused) == 1


def test_resolve_agent_returns_the_type_and_the_exact_note() -> None:
    team = agents("worker", "deep-research")
    assert resolve_agent("worker", team) == ("worker", None)
    assert resolve_agent(" worker-12-3 ", team) == (
        "worker",
        "' worker-12-3 ' is a sub-agent instance id; ran it as type 'worker' (pass the type name as agent)",
    )
    assert resolve_agent("deep-research-0-1", team)[0] == "deep-research"
    assert resolve_agent("Deep-Research", team) == (
        "deep-research",
        "there is no type 'Deep-Research'; ran it as 'deep-research'",
    )
    assert resolve_agent("worker-x-1", team) == (None, None)
    assert resolve_agent("research", team) == (None, None)
    assert resolve_agent(3, team) == (None, None)
