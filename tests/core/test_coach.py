"""Coaching as one object: the same coach serves the swarm and the single arm, the single-parallel arm
runs several direct calls per turn, and a one-fact question may be answered without sub-agents."""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
from pathlib import Path

import pytest

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.orchestrator.coach import (
    _ASKS_FOR_SUBAGENTS,
    COACHES,
    CoachState,
    NoCoach,
    SmallModelCoach,
    listed_items,
    one_part,
)
from agent_swarm.subagents.coach import (
    LAST_STEP_NOTICE,
    TASK_NOTICE,
    NoStepCoach,
    SmallModelStepCoach,
    StepView,
    hold_after_first,
)
from agent_swarm.swarm.backend import ModelRequest
from agent_swarm.swarm.errors import ConfigError, ErrorType
from agent_swarm.swarm.messages import AssistantMessage, ToolMessage, UserMessage
from agent_swarm.swarm.records import AgentDefinition, EpisodeStatus
from agent_swarm.swarm.testing import ScriptedBackend, Turn, call
from agent_swarm.tools import tool

SMALL = "qwen2.5-coder-1.5b"
ROOT = Path(__file__).resolve().parents[2]


@tool
def search(query: str) -> str:
    """Search the documents."""
    return f"[1] doc/{query.lower().replace(' ', '_')} | {query}"


@tool
def fetch(doc_id: str) -> str:
    """Open a document."""
    raise ValueError(f"no document {doc_id!r}")


def notice(request: ModelRequest) -> str:
    """The user turn the model reads last (a coach's notice), or '' when its last message is another kind."""
    last = request.messages[-1]
    return last.content if isinstance(last, UserMessage) else ""


def shown(request: ModelRequest) -> list[str]:
    """The tool results the model sees for its latest turn."""
    msgs = list(request.messages)
    last = max(i for i, m in enumerate(msgs) if isinstance(m, AssistantMessage))
    return [m.content for m in msgs[last + 1 :] if isinstance(m, ToolMessage)]


# -- one protocol for every arm ---------------------------------------------------------------------


@pytest.mark.parametrize("subagents", [True, False])
async def test_both_arms_get_the_last_turn_notice(subagents: bool) -> None:
    policy = ScriptedBackend([[call("search", query="Drari Robotics")], "best effort"])
    config = SwarmConfig(max_critical_steps=2, subagents=subagents)
    record = await Orchestrator(policy, config, tools=[search]).run("Who founded Drari Robotics?")
    policy.assert_consumed()
    final = policy.calls[1]
    assert final.tool_choice == "none" and notice(final).startswith("No budget is left for")
    assert notice(final).endswith("Answer the user now with the results you have, in the form the task asks for.")
    assert ("sub-agents" in notice(final)) is subagents  # a single agent is not told about sub-agents
    assert record.status is EpisodeStatus.BUDGET_EXHAUSTED and record.answer == "best effort"


@pytest.mark.parametrize("subagents", [True, False])
async def test_an_agent_resending_the_same_searches_is_told_so_and_then_answers(subagents: bool) -> None:
    # A single agent sent the same four searches in five turns in a row, identical results each
    # time, until its context overflowed and the episode failed with no answer.
    turn = [call("search", query=q) for q in ("Drari Robotics", "Velo Foods", "Kestrel AG", "Ombra")]
    policy = ScriptedBackend([turn, turn, turn, "Drari: 2019"])
    config = SwarmConfig(max_critical_steps=30, subagents=subagents)
    record = await Orchestrator(policy, config, tools=[search]).run("When were these founded: ...")
    policy.assert_consumed()
    for request in policy.calls[2:]:
        repeats = shown(request)
        assert len(repeats) == 4 and all(
            s.startswith("You already made exactly this call and it returned") for s in repeats
        )
        # the result itself stays in view below the notice (a 1.5B told only "as before (above)" answered
        # "I'm sorry, but I can't assist with that." on the controls dev split)
        assert all(s.endswith(r.content) for s, r in zip(repeats, record.stages[0].tool_results, strict=True))
    assert policy.calls[2].tool_choice == "auto"  # one repeat is allowed: a re-read can be legitimate
    final = policy.calls[3]
    assert final.tool_choice == "none" and notice(final).startswith("Stop calling tools: your last calls repeated")
    assert record.status is EpisodeStatus.COMPLETED and record.answer == "Drari: 2019"
    assert record.stages[1].tool_results[0].content.startswith("[1] doc/drari_robotics")  # the record keeps results


async def test_a_call_repeated_once_between_new_ones_does_not_stop_the_episode() -> None:
    again = [[call("search", query="Drari")], [call("search", query="Velo")], [call("search", query="Drari")]]
    policy = ScriptedBackend([*again, [call("search", query="Ombra")], "done"], model=SMALL)
    record = await Orchestrator(policy, SwarmConfig(subagents=False), tools=[search]).run("Find them.")
    policy.assert_consumed()
    assert shown(policy.calls[3])[0].startswith("You already made exactly this call")
    assert [r.tool_choice for r in policy.calls] == ["required", "auto", "auto", "auto", "auto"]
    assert record.status is EpisodeStatus.COMPLETED and record.answer == "done"


@pytest.mark.parametrize("subagents", [True, False])
async def test_both_arms_stop_a_loop_of_repeated_failures_with_the_same_notice(subagents: bool) -> None:
    bad = call("fetch", doc_id="1234567890")
    policy = ScriptedBackend([[bad], [bad], [bad], "best effort"])
    config = SwarmConfig(max_critical_steps=30, subagents=subagents)
    record = await Orchestrator(policy, config, tools=[fetch]).run("Open the Drari Robotics page.")
    policy.assert_consumed()
    assert shown(policy.calls[2])[0].startswith("You already made exactly this call and it failed")
    assert policy.calls[3].tool_choice == "none" and notice(policy.calls[3]).startswith("Stop calling tools")
    assert record.status is EpisodeStatus.STUCK and record.error_type == ErrorType.ACTION_LOOP


async def test_a_new_result_of_the_same_call_is_not_a_repeat() -> None:
    counter = iter(range(10))

    @tool
    def tick() -> str:
        """The next number."""
        return str(next(counter))

    policy = ScriptedBackend([[call("tick")], [call("tick")], "1"])
    record = await Orchestrator(policy, SwarmConfig(subagents=False), tools=[tick]).run("tick twice")
    policy.assert_consumed()
    assert shown(policy.calls[2]) == ["1"] and policy.calls[2].tool_choice == "auto"
    assert record.status is EpisodeStatus.COMPLETED


async def test_a_small_single_agent_with_tools_acts_first_and_runs_one_call_per_turn() -> None:
    two = [call("search", query="Drari Robotics"), call("search", query="Velo Foods")]
    policy = ScriptedBackend([two, [call("search", query="Velo Foods")], "Drari, Velo"], model=SMALL)
    record = await Orchestrator(policy, SwarmConfig(subagents=False), tools=[search]).run("Find Drari and Velo.")
    policy.assert_consumed()
    assert [r.tool_choice for r in policy.calls] == ["required", "auto", "auto"]  # tool-first, as its sub-agents
    assert [r.parallel_tool_calls for r in policy.calls[:2]] == [False, False]
    first = record.stages[0].tool_results
    assert [r.error_type for r in first] == [None, ErrorType.ONE_CALL_PER_TURN]
    assert "call one tool per turn" in shown(policy.calls[1])[1]
    # The held call sent again (as it was told) runs, and is not named a repeat of a failure.
    assert shown(policy.calls[2])[0].startswith("[1] doc/velo_foods")
    assert record.dag.critical_steps == 3


async def test_the_single_parallel_arm_runs_every_direct_call_of_a_turn() -> None:
    two = [call("search", query="Drari Robotics"), call("search", query="Velo Foods")]
    policy = ScriptedBackend([two, "Drari, Velo"], model=SMALL)
    config = SwarmConfig(subagents=False, parallel_tool_calls=True)
    record = await Orchestrator(policy, config, tools=[search]).run("Find Drari and Velo.")
    policy.assert_consumed()
    assert policy.calls[0].tool_choice == "required" and policy.calls[0].parallel_tool_calls
    assert [r.is_error for r in record.stages[0].tool_results] == [False, False]
    assert record.dag.critical_steps == 2
    # ... and a capable model's single agent is parallel unless told one call per turn.
    policy = ScriptedBackend([two, [call("search", query="Velo Foods")], "Drari, Velo"])
    config = SwarmConfig(subagents=False, parallel_tool_calls=False)
    record = await Orchestrator(policy, config, tools=[search]).run("Find Drari and Velo.")
    assert record.stages[0].tool_results[1].error_type == ErrorType.ONE_CALL_PER_TURN
    assert policy.calls[0].tool_choice == "auto" and not policy.calls[0].parallel_tool_calls


# -- controls against spurious parallelism -------------------------------------------------------------


async def test_a_small_model_answers_a_one_fact_question_itself_where_nobody_has_tools() -> None:
    policy = ScriptedBackend(["Lisbon"], model=SMALL)
    record = await Orchestrator(policy).run("What is the capital of Portugal?")
    policy.assert_consumed()
    assert policy.calls[0].tool_choice == "auto" and policy.calls[0].offered() == ()  # an answer only
    assert notice(policy.calls[0]) == 'Answer this yourself now, in plain text: "What is the capital of Portugal?"'
    assert {t.name for t in policy.calls[0].tools} == {"create_subagent", "assign_task"}  # still listed
    assert record.status is EpisodeStatus.COMPLETED and record.answer == "Lisbon"
    assert record.subagent_results == () and record.dag.critical_steps == 1


@pytest.mark.parametrize(
    "task",
    [
        "Find the capital cities of France and Japan. Give each country to its own sub-agent.",
        "Find the capital cities of France and Japan.",
        "Look up:\n- sodium\n- zinc",
    ],
)
async def test_a_small_model_still_must_act_first_on_a_list_task(task: str) -> None:
    fan_out = [call("assign_task", agent="worker", task=f"part {i}") for i in range(2)]
    policy = ScriptedBackend([fan_out, "done"], model=SMALL)
    workers = ScriptedBackend({"worker-0-0": ["a"], "worker-0-1": ["b"]})
    record = await Orchestrator(policy, subagent_backend=workers).run(task)
    assert policy.calls[0].tool_choice == "required" and record.stages[0].width == 2


async def test_a_small_orchestrator_is_shown_one_call_per_item_before_its_first_turn_only() -> None:
    # The 1.5B handed the whole list to one sub-agent first in every wide-research task (dev seed 3: 10 of
    # 10); the split refusal then showed it these calls, a turn later.
    task = "Find the founding years of Drari Robotics and Velo Foods."
    first = [call("assign_task", agent="researcher", task=f"Find the founding years of {c}.") for c in ("x", "y")]
    policy = ScriptedBackend([first, "done"], model=SMALL)
    workers = ScriptedBackend(["1999", "2004"], model=SMALL)
    researcher = AgentDefinition(name="researcher", system_prompt="look it up")
    record = await Orchestrator(policy, agents=[researcher], subagent_backend=workers).run(task)
    policy.assert_consumed()
    shown_first = notice(policy.calls[0])
    assert shown_first.startswith("This task lists several items.")
    calls = [json.loads(line) for line in shown_first.splitlines()[1:]]
    assert calls == [
        {"name": "assign_task", "arguments": {"agent": "researcher", "task": f"Find the founding years of {c}."}}
        for c in ("Drari Robotics", "Velo Foods")
    ]
    assert "This task lists several items." not in notice(policy.calls[1])
    assert [s.width for s in record.stages] == [2, 0]
    # the single arm, a one-part task and a task that says how to use sub-agents are shown no calls
    single = ScriptedBackend(["done"], model=SMALL)
    await Orchestrator(single, SwarmConfig(subagents=False)).run(task)
    one = ScriptedBackend(["Jane Austen"], model=SMALL)
    await Orchestrator(one).run("Who wrote the book Pride and Prejudice?")
    told = ScriptedBackend(["done"], model=SMALL)
    await Orchestrator(told).run(task + " Give each company to its own sub-agent.")
    two_types = ScriptedBackend(["done"], model=SMALL)
    coder = AgentDefinition(name="coder", system_prompt="write code")
    await Orchestrator(two_types, agents=[coder, researcher]).run(task)
    for backend in (single, one, told, two_types):
        assert not any("This task lists" in str(m.content) for m in backend.calls[0].messages)


@pytest.mark.parametrize(
    "task",
    [
        "Who wrote the book Pride and Prejudice?",
        "Who wrote 'War and Peace'?",
        "What is the capital of Trinidad and Tobago?",
    ],
)
async def test_a_title_with_and_is_one_fact_not_a_list(task: str) -> None:
    # Not forced to act: the small model may answer the one fact itself.
    policy = ScriptedBackend(["Jane Austen"], model=SMALL)
    record = await Orchestrator(policy).run(task)
    assert policy.calls[0].tool_choice == "auto" and record.subagent_results == ()
    # Given to one sub-agent whole (a sub-agent with tools it lacks), it runs: no split notice makes
    # two tasks of one title.
    policy = ScriptedBackend([[call("assign_task", agent="worker", task=task)], "Jane Austen"], model=SMALL)
    config = SwarmConfig(orchestrator_tools=[], subagent_tools=["search"])
    workers = ScriptedBackend(["Jane Austen"])
    record = await Orchestrator(policy, config, tools=[search], subagent_backend=workers).run(task)
    policy.assert_consumed()
    assert [s.width for s in record.stages] == [1, 0] and record.answer == "Jane Austen"


async def test_a_small_model_with_tools_must_act_first_even_on_one_fact() -> None:
    policy = ScriptedBackend([[call("search", query="Drari Robotics")], "2019"], model=SMALL)
    await Orchestrator(policy, tools=[search]).run("When was Drari Robotics founded?")
    assert policy.calls[0].tool_choice == "required"


async def test_a_small_orchestrator_with_tools_looks_a_one_part_task_up_itself_first() -> None:
    task = "When was Drari Robotics founded?"
    policy = ScriptedBackend([[call("search", query="Drari Robotics")], "2019"], model=SMALL)
    record = await Orchestrator(policy, tools=[search]).run(task)
    policy.assert_consumed()
    first, second = policy.calls
    # The prompt lists every tool (the prefix stays); the choice is narrowed to its own tools.
    assert {t.name for t in first.tools} == {"create_subagent", "assign_task", "search"}
    assert first.allowed_tools == ("search",) and first.tool_choice == "required"
    assert [t.name for t in first.offered()] == ["search"]
    assert second.allowed_tools is None and record.answer == "2019" and record.subagent_results == ()


async def test_an_assignment_a_backend_let_through_while_withheld_is_refused_then_offered_after_a_look() -> None:
    task = "When was Drari Robotics founded?"
    turns: list[Turn] = [
        [call("assign_task", agent="worker", task=task)],  # a backend without a grammar let it through
        [call("search", query="Drari Robotics")],
        [call("assign_task", agent="worker", task="Check the founding year of Drari Robotics.")],
        "2019",
    ]
    policy = ScriptedBackend(turns, model=SMALL)
    workers = ScriptedBackend(["2019"])
    record = await Orchestrator(policy, tools=[search], subagent_backend=workers).run(task)
    policy.assert_consumed()
    workers.assert_consumed()
    refused = record.stages[0].tool_results[0]
    assert refused.error_type == ErrorType.TOOL_WITHHELD and "assign_task is not offered" in refused.content
    assert [c.allowed_tools for c in policy.calls] == [("search",), ("search",), None, None]
    assert [s.width for s in record.stages] == [0, 0, 1, 0] and len(record.subagent_results) == 1


@pytest.mark.parametrize(
    ("model", "task", "subagents", "orchestrator_tools"),
    [
        (SMALL, "Find the founding years of Drari Robotics and Velo Foods.", True, None),  # a list task
        (SMALL, "When was Drari Robotics founded?", True, []),  # no tools of its own: it must delegate
        (SMALL, "When was Drari Robotics founded?", False, None),  # the single arm has nothing to withhold
        ("gpt-4o", "When was Drari Robotics founded?", True, None),  # capable models are not coached
        (SMALL, "Use a sub-agent to find when Drari Robotics was founded.", True, None),  # asked for in words
        (SMALL, "Create a sub-agent named w with create_subagent, then assign it: what is 2+2?", True, []),
    ],
)
async def test_nothing_is_withheld_where_looking_first_does_not_apply(
    model: str, task: str, subagents: bool, orchestrator_tools: list[str] | None
) -> None:
    policy = ScriptedBackend(["2019"], model=model)
    config = SwarmConfig(subagents=subagents, orchestrator_tools=orchestrator_tools)
    await Orchestrator(policy, config, tools=[search]).run(task)
    assert policy.calls[0].allowed_tools is None


@pytest.mark.parametrize(
    "task", ["What is the capital of Portugal?", "Which country sent the largest delegation to the 1900 Olympics?"]
)
async def test_with_no_tools_anywhere_an_assignment_let_through_is_told_to_answer_not_to_look_up(task: str) -> None:
    policy = ScriptedBackend([[call("assign_task", agent="worker", task=task)], "Lisbon"], model=SMALL)
    record = await Orchestrator(policy).run(task)
    policy.assert_consumed()
    refused = record.stages[0].tool_results[0]
    assert refused.error_type == ErrorType.TOOL_WITHHELD
    assert refused.content.endswith("answer it now in plain text.") and "tools" not in refused.content
    assert policy.calls[0].allowed_tools == () and record.subagent_results == ()


def test_a_request_offers_the_allowed_tools_and_none_when_tools_are_off() -> None:
    specs = (search.spec, fetch.spec)
    request = ModelRequest(messages=(UserMessage(content="x"),), tools=specs, allowed_tools=("fetch",))
    assert [t.name for t in request.offered()] == ["fetch"]
    assert dataclasses.replace(request, allowed_tools=None).offered() == specs
    assert dataclasses.replace(request, tool_choice="none").offered() == ()
    built = ModelRequest(messages=(UserMessage(content="x"),), tools=specs, allowed_tools=["fetch"])  # type: ignore[arg-type]
    assert built.allowed_tools == ("fetch",)  # validated into a tuple where it enters


# -- choosing a coach ------------------------------------------------------------------------------------


def test_the_coach_follows_the_profile_and_the_config_overrides_it() -> None:
    assert isinstance(Orchestrator(ScriptedBackend([], model=SMALL)).coach, SmallModelCoach)
    assert type(Orchestrator(ScriptedBackend([], model="gpt-4o")).coach) is NoCoach
    small_single = Orchestrator(ScriptedBackend([], model=SMALL), SwarmConfig(subagents=False, system_prompt="Go."))
    assert isinstance(small_single.coach, SmallModelCoach)  # the single arm gets the swarm's coaching
    # A swarm run that replaces the protocol prompt drops the tactics written for it, unless named.
    own = SwarmConfig(system_prompt="Be brief.")
    assert type(Orchestrator(ScriptedBackend([], model=SMALL), own).coach) is NoCoach
    named = own.model_copy(update={"coach": "small"})
    assert isinstance(Orchestrator(ScriptedBackend([], model="gpt-4o"), named).coach, SmallModelCoach)
    with pytest.raises(ConfigError, match=r"coach in the config: .*'tiny'"):
        Orchestrator(ScriptedBackend([]), SwarmConfig(coach="tiny"))
    assert set(COACHES.names) == {"none", "small"}


def test_a_small_models_step_coach_calls_a_tool_first_and_answers_last() -> None:
    coach = SmallModelStepCoach()
    choices = [coach.tool_choice(StepView(i, 4, True, i > 0)) for i in range(4)]
    assert choices == ["required", "auto", "auto", "none"]
    assert coach.notices(StepView(3, 4, True, True), "none") == (LAST_STEP_NOTICE,)
    assert coach.notices(StepView(3, 4, True, False), "none") == ()
    assert coach.tool_choice(StepView(0, 4, False, False)) == "auto"  # no tools: nothing to force
    assert coach.tool_choice(StepView(0, 1, True, False)) == "auto"  # one step: it must answer in it
    assert not coach.parallel_tool_calls
    calls = [call("search", query="a"), call("fetch", doc_id="b"), call("fetch", doc_id="c")]
    assert set(coach.review(calls)) == {calls[1].id, calls[2].id} == set(hold_after_first(calls))
    capable = NoStepCoach()
    assert capable.tool_choice(StepView(0, 4, True, False)) == "auto" and capable.review(calls) == {}


# -- the question again, after a small model's own tool results on a one-part task --------------------


@pytest.mark.parametrize("subagents", [True, False])
async def test_a_small_model_is_asked_the_question_again_after_its_own_tool_results(subagents: bool) -> None:
    task = "In which year was Drari Robotics founded? Look it up; do not guess."
    policy = ScriptedBackend([[call("search", query="Drari Robotics")], "1999"], model=SMALL)
    await Orchestrator(policy, SwarmConfig(subagents=subagents), tools=[search]).run(task)
    policy.assert_consumed()
    assert notice(policy.calls[0]) == task
    assert notice(policy.calls[1]) == f'If the results above answer the question "{task}", answer it now in plain text.'
    # a capable model is not coached
    policy = ScriptedBackend([[call("search", query="Drari Robotics")], "1999"], model="gpt-4o")
    await Orchestrator(policy, SwarmConfig(subagents=False), tools=[search]).run(task)
    assert isinstance(policy.calls[1].messages[-1], ToolMessage)


async def test_a_small_model_is_given_a_task_of_several_parts_again_after_a_stage_of_several_results() -> None:
    # The 1.5B answered a table task in prose, or dropped the key column, after its sub-agents' reports.
    task = "When were Drari Robotics and Velo Foods founded? Answer with one markdown table | company | founded |."
    again = (
        f'The results above are in. If they answer every part of the task "{task}", answer it now in plain text, '
        "in the form it asks for; call a tool only for a part they do not answer."
    )
    parts = ("When was Drari Robotics founded?", "When was Velo Foods founded?")
    policy = ScriptedBackend(
        [[call("assign_task", agent="worker", task=t) for t in parts], "| Drari Robotics | 1999 |"], model=SMALL
    )
    workers = ScriptedBackend(["1999", "2004"], model=SMALL)
    await Orchestrator(policy, SwarmConfig(), subagent_backend=workers).run(task)
    policy.assert_consumed()
    assert notice(policy.calls[1]) == again
    # single-parallel: two direct results at once; then a stage of errors only is not followed by it
    turns = [[call("search", query="Drari Robotics"), call("search", query="Velo Foods")], [call("fetch", doc_id="v")]]
    policy = ScriptedBackend([*turns, "| Drari Robotics | 1999 |"], model=SMALL)
    config = SwarmConfig(subagents=False, parallel_tool_calls=True)
    await Orchestrator(policy, config, tools=[search, fetch]).run(task)
    policy.assert_consumed()
    assert notice(policy.calls[1]) == again and isinstance(policy.calls[2].messages[-1], ToolMessage)


@pytest.mark.parametrize("subagents", [True, False])
async def test_one_result_of_a_task_of_several_parts_is_not_followed_by_the_task(subagents: bool) -> None:
    # Told "answer every part in the form asked" after its first look-up, the 1.5B single agent answered at
    # once and invented the other rows (dev).
    task = "When were Drari Robotics and Velo Foods founded? Answer with one markdown table | company | founded |."
    turns: list[Turn] = [
        [call("search", query="Drari Robotics")],
        [call("search", query="Velo Foods")],
        "| Drari Robotics | 1999 |\n| Velo Foods | 2004 |",
    ]
    policy = ScriptedBackend(turns, model=SMALL)
    await Orchestrator(policy, SwarmConfig(subagents=subagents), tools=[search]).run(task)
    policy.assert_consumed()
    assert all(isinstance(r.messages[-1], ToolMessage) for r in policy.calls[1:])


WIDE = (
    "Build a table of these 4 people: Brobron Landsou, Brubo Gurkrupend, Bago Distebe, Puschi Sadaisturk.\n"
    "For each one give: role (occupation), email. Look everything up in the document collection with the search "
    "and open tools; do not guess.\nAnswer with one markdown table with exactly these columns: | person | role | "
    "email |, one row per person found, the person written exactly as given above."
)
KEYLESS = (
    "| person | role | email |\n|---|---|---|\n| Pharmacist | b.landsou18@quana.example |\n| Editor | p.s@k.example |"
)
NAMED = (
    "| person | role | email |\n|---|---|---|\n| Brobron Landsou | pharmacist | b.l@q.example |\n"
    "| “Puschi Sadaisturk” | editor | p.s@k.example |\n| BAGO  distebe | x | y |"
)


def test_a_table_naming_at_most_half_of_the_listed_items_goes_back_once() -> None:
    # Dev seed 1: the 1.5B's table put a value in the key column of every row (its sub-agents' reports
    # had no name column), and the scorer, matching rows by key, gave it 0.
    coach = SmallModelCoach()
    assert listed_items(WIDE) == ["Brobron Landsou", "Brubo Gurkrupend", "Bago Distebe", "Puschi Sadaisturk"]
    state = CoachState()
    sent = coach.review_answer(state, KEYLESS, WIDE)
    assert sent == (
        "Your table names 0 of the 4 items the task lists (Brobron Landsou, Brubo Gurkrupend, Bago Distebe, "
        "Puschi Sadaisturk). Answer the task again, in the form it asks for, with each item written as the task "
        "gives it beside its own results."
    )
    assert coach.review_answer(state, KEYLESS, WIDE) is None  # once per episode
    # more than half the names (case, quotes and spacing aside) is enough: some may be missing from the collection
    assert coach.review_answer(CoachState(), NAMED, WIDE) is None
    assert coach.review_answer(CoachState(), NAMED.split("\n| BAGO")[0], WIDE) is not None  # 2 of 4
    # a one-part task, a list of numbers only, and a capable model's coach: never sent back
    assert coach.review_answer(CoachState(), "42", "What is 17 + 25?") is None
    assert coach.review_answer(CoachState(), "42 and 12", "Compute 17 + 25 and 3 * 4.") is None
    # prose is left alone, named or not: a bare "done" after tool calls, "Paris and Tokyo"
    assert coach.review_answer(CoachState(), "Pharmacist, b.landsou18@quana.example", WIDE) is None
    assert coach.review_answer(CoachState(), "Paris and Tokyo", "Find the capitals of France and Japan.") is None
    assert NoCoach().review_answer(CoachState(), KEYLESS, WIDE) is None


@pytest.mark.parametrize("subagents", [True, False])
async def test_both_arms_answer_again_when_the_table_names_none_of_the_items(subagents: bool) -> None:
    task = "When were Drari Robotics and Velo Foods founded? Answer with one markdown table | company | founded |."
    turns: list[Turn] = [[call("search", query="Drari Robotics")], "| 1999 |\n| 2004 |", "| Drari Robotics | 1999 |"]
    policy = ScriptedBackend(turns, model=SMALL)
    record = await Orchestrator(policy, SwarmConfig(subagents=subagents), tools=[search]).run(task)
    policy.assert_consumed()
    assert notice(policy.calls[2]).startswith("Your table names 0 of the 2 items the task lists (Drari Robotics, Velo")
    assert isinstance(policy.calls[2].messages[-2], AssistantMessage)  # the answer sent back stays in view
    assert policy.calls[2].messages[-2].content == "| 1999 |\n| 2004 |"
    assert record.status is EpisodeStatus.COMPLETED and record.answer == "| Drari Robotics | 1999 |"
    assert [s.kind for s in record.stages] == ["tools", "retry", "answer"]
    assert record.dag.critical_steps == 3


async def test_an_answer_is_not_sent_back_when_no_budget_is_left_for_another_turn() -> None:
    task = "When were Drari Robotics and Velo Foods founded?"
    policy = ScriptedBackend([[call("search", query="Drari Robotics")], "| 1999 |\n| 2004 |"], model=SMALL)
    record = await Orchestrator(policy, SwarmConfig(max_critical_steps=2), tools=[search]).run(task)
    policy.assert_consumed()  # the last turn's answer is final, named or not
    assert record.answer == "| 1999 |\n| 2004 |" and record.status is EpisodeStatus.BUDGET_EXHAUSTED
    policy = ScriptedBackend(["| 1999 |\n| 2004 |"], model=SMALL)
    record = await Orchestrator(policy, SwarmConfig(max_critical_steps=1)).run(task)
    assert record.answer == "| 1999 |\n| 2004 |" and len(policy.calls) == 1


async def test_a_small_models_subagent_is_told_its_task_again_after_a_tool_result() -> None:
    task = "In which year was Drari Robotics founded?"
    policy = ScriptedBackend([[call("assign_task", agent="worker", task=task)], "1999"], model=SMALL)
    workers = ScriptedBackend([[call("search", query="Drari Robotics")], "1999"], model=SMALL)
    config = SwarmConfig(orchestrator_tools=[], subagent_tools=["search"])
    record = await Orchestrator(policy, config, tools=[search], subagent_backend=workers).run(task)
    workers.assert_consumed()
    assert record.subagent_results[0].report == "1999"
    assert notice(workers.calls[1]) == TASK_NOTICE.format(task=task)
    # the step coach: after a tool result on a one-part task, not on a list task, not on the last step
    coach = SmallModelStepCoach(one_part=one_part)
    assert coach.notices(StepView(1, 4, True, True, task), "auto") == (TASK_NOTICE.format(task=task),)
    assert coach.notices(StepView(1, 4, True, True, "Find the capitals of France and Japan."), "auto") == ()
    assert coach.notices(StepView(1, 4, True, False, task), "auto") == ()
    assert coach.notices(StepView(3, 4, True, True, task), "none") == (LAST_STEP_NOTICE,)
    assert SmallModelStepCoach().notices(StepView(1, 4, True, True, task), "auto") == ()


async def test_an_empty_orchestrator_tool_list_gives_it_no_tools_of_its_own() -> None:
    policy = ScriptedBackend(["done"], model="gpt-4o")
    await Orchestrator(policy, SwarmConfig(orchestrator_tools=[]), tools=[search]).run("Hi.")
    assert {t.name for t in policy.calls[0].tools} == {"create_subagent", "assign_task"}  # None would add search
    policy = ScriptedBackend(["done"], model="gpt-4o")
    await Orchestrator(policy, SwarmConfig(), tools=[search]).run("Hi.")
    assert "search" in {t.name for t in policy.calls[0].tools}


def test_no_coaching_names_are_left_in_the_protocol_modules() -> None:
    names = re.compile(
        r"delegate|split_nudge|distinct|tool_first|one_call|must_act|stuck|FINAL_NOTICE|ALREADY_DONE", re.I
    )
    for path in ("orchestrator/engine.py", "orchestrator/admission.py", "subagents/loop.py", "subagents/turns.py"):
        hits = [line for line in (ROOT / path).read_text().splitlines() if names.search(line)]
        assert hits == [], f"{path} names coaching tactics: {hits}"


def test_no_committed_yardstick_task_asks_for_subagents_in_words() -> None:
    # The coach's exception for tasks that ask for sub-agents in words never applies to the yardstick's
    # controls (their tasks never ask for parallelism), so the committed controls runs are unaffected.
    tasks = [
        json.loads(line)
        for path in sorted((ROOT / "experiments" / "results").glob("yardstick-*/**/tasks.jsonl.gz"))
        for line in gzip.decompress(path.read_bytes()).decode().splitlines()
    ]
    controls = [t["prompt"] for t in tasks if t["metadata"].get("workload") == "controls"]
    assert len(controls) >= 150  # test seeds 1126-1129 and the dev runs
    assert [p for p in controls if _ASKS_FOR_SUBAGENTS.search(p)] == []
