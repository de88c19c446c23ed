"""The orchestrator protocol a small model can follow: the built-in worker, tolerant names, repeated
failures, token-cap feedback, budget refusals, prompt profiles and clean answers."""

from __future__ import annotations

import json

import pytest

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.orchestrator.admission import admit, resolve_agent
from agent_swarm.orchestrator.coach import SPLIT_NOTICE, lists_items, split_items
from agent_swarm.orchestrator.prompts import DEFAULT_SYSTEM_PROMPT, PROFILES, WORKER, profile_for
from agent_swarm.subagents.coach import LAST_STEP_NOTICE
from agent_swarm.swarm.backend import Completion, ModelRequest, SamplingParams
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.messages import AssistantMessage, SystemMessage, ToolCall, ToolMessage, UserMessage
from agent_swarm.swarm.records import AgentDefinition, AgentStatus, EpisodeStatus
from agent_swarm.swarm.testing import ScriptedBackend, call
from agent_swarm.tools import tool

SMALL = "qwen2.5-coder-0.5b"


def assign(task: str, agent: str = WORKER) -> ToolCall:
    return call("assign_task", agent=agent, task=task)


def tool_messages(request: ModelRequest) -> list[ToolMessage]:
    return [m for m in request.messages if isinstance(m, ToolMessage)]


def last_tool_text(request: ModelRequest) -> list[str]:
    """The tool results the model sees for its latest turn."""
    msgs = list(request.messages)
    last = max(i for i, m in enumerate(msgs) if isinstance(m, AssistantMessage))
    return [m.content for m in msgs[last + 1 :] if isinstance(m, ToolMessage)]


# -- the built-in worker -------------------------------------------------------------------------------


async def test_a_first_turn_can_fan_out_to_the_builtin_worker_without_creating_it() -> None:
    policy = ScriptedBackend([[assign("capital of France?"), assign("capital of Japan?")], "Paris, Tokyo"])
    workers = ScriptedBackend({"worker-0-0": ["Paris"], "worker-0-1": ["Tokyo"]}, delay=0.02)
    record = await Orchestrator(policy, subagent_backend=workers).run("capitals of France and Japan")
    policy.assert_consumed()
    workers.assert_consumed()
    assert record.status is EpisodeStatus.COMPLETED and record.answer == "Paris, Tokyo"
    stage = record.stages[0]
    assert stage.width == 2 and all(r.status is AgentStatus.COMPLETED for r in stage.subagents)
    assert max(r.started for r in stage.subagents) < min(r.ended for r in stage.subagents)  # in parallel
    # The worker's instructions are the profile's, and the orchestrator is told the type exists.
    system = workers.calls[0].messages[0]
    assert isinstance(system, SystemMessage) and system.content == PROFILES["default"].worker_prompt
    assert "- worker" in str(policy.calls[0].messages[0].content)


async def test_the_builtin_worker_may_use_every_grantable_tool_and_can_be_turned_off() -> None:
    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return key.upper()

    policy = ScriptedBackend([[assign("x")], "done"])
    record = await Orchestrator(policy, tools=[lookup], subagent_backend=ScriptedBackend(["x"])).run("go")
    assert {a.name: a.tools for a in record.agents}[WORKER] == ("lookup",)

    policy = ScriptedBackend([[assign("x")], "done"])
    record = await Orchestrator(policy, SwarmConfig(builtin_worker=False)).run("go")
    assert "unknown sub-agent 'worker'" in tool_messages(policy.calls[1])[0].content
    assert record.stages[0].width == 0


# -- tolerant resolution ---------------------------------------------------------------------------------


def test_resolve_agent_corrects_only_unambiguous_slips() -> None:
    agents = {n: AgentDefinition(name=n, system_prompt="p") for n in ("worker", "Tokyo bash", "w", "W2")}
    assert resolve_agent("worker", agents) == ("worker", None)
    name, note = resolve_agent("Tokyo bash-1-0", agents)  # an instance id from the live view
    assert name == "Tokyo bash" and note is not None and "instance id" in note
    name, note = resolve_agent(" WORKER ", agents)
    assert name == "worker" and note is not None
    assert resolve_agent("w2", agents)[0] == "W2"
    assert resolve_agent("nobody", agents) == (None, None)
    assert resolve_agent("nobody-1-0", agents) == (None, None)
    assert resolve_agent(None, agents) == (None, None)
    both = {n: AgentDefinition(name=n, system_prompt="p") for n in ("ab", "AB")}
    assert resolve_agent("Ab", both) == (None, None)  # two case-insensitive matches: ambiguous


async def test_an_instance_id_given_as_agent_runs_its_type_and_the_model_is_told() -> None:
    policy = ScriptedBackend([[assign("a")], [assign("b", agent="worker-0-0")], "done"])
    workers = ScriptedBackend({"worker-0-0": ["ra"], "worker-1-0": ["rb"]})
    record = await Orchestrator(policy, subagent_backend=workers).run("go")
    assert [s.width for s in record.stages[:2]] == [1, 1]
    (seen,) = last_tool_text(policy.calls[2])
    assert seen.startswith("note: 'worker-0-0' is a sub-agent instance id; ran it as type 'worker'")
    assert seen.endswith("rb")


# -- repeated failed calls ----------------------------------------------------------------------------


async def test_a_repeated_failed_call_is_named_as_such_and_a_loop_of_them_stops_the_episode() -> None:
    bad = call("assign_task", agent="ghost", task="t")
    policy = ScriptedBackend([[bad], [bad], [bad], "best effort"])
    record = await Orchestrator(policy, SwarmConfig(max_critical_steps=30)).run("go")
    policy.assert_consumed()
    first, second = last_tool_text(policy.calls[1])[0], last_tool_text(policy.calls[2])[0]
    assert "unknown sub-agent 'ghost'" in first and "already made" not in first
    assert second.startswith("You already made exactly this call and it failed. Do not repeat it")
    assert "unknown sub-agent 'ghost'" in second
    # The third identical failure ends the loop: one last turn without tools, then a clear status.
    final = policy.calls[3]
    assert final.tool_choice == "none"
    last = final.messages[-1]
    assert isinstance(last, UserMessage) and "Stop calling tools" in last.content
    assert record.status is EpisodeStatus.STUCK and record.answer == "best effort"
    assert record.error_type == "ActionLoopError" and "repeated failed calls" in (record.error or "")
    assert record.dag.critical_steps == 4  # the budget of 30 was not burned


async def test_repeats_of_failing_direct_tools_count_and_a_new_call_resets_the_count() -> None:
    @tool
    def div(a: int, b: int) -> float:
        """Divide."""
        return a / b

    zero = call("div", a=1, b=0)
    policy = ScriptedBackend([[zero], [zero], [call("div", a=4, b=2)], [zero], [zero], "2.0"])
    record = await Orchestrator(policy, SwarmConfig(max_critical_steps=30), tools=[div]).run("go")
    policy.assert_consumed()
    assert record.status is EpisodeStatus.STUCK  # stopped at the second run of repeats, not the first
    assert len(record.stages) == 6


# -- the token cap -------------------------------------------------------------------------------------


async def test_output_cut_at_the_token_cap_is_named_in_the_feedback() -> None:
    cut_call = Completion(text='{"name": "assign_task", "argu', parse_error="invalid JSON", finish_reason="length")
    partial = Completion(tool_calls=(assign("a"),), finish_reason="length")
    policy = ScriptedBackend([cut_call, partial, "done"])
    cfg = SwarmConfig(orchestrator_sampling=SamplingParams(max_tokens=64))
    await Orchestrator(policy, cfg, subagent_backend=ScriptedBackend(["ra"])).run("go")
    feedback = policy.calls[1].messages[-1]
    assert isinstance(feedback, UserMessage) and "cut off at the limit of 64 tokens" in feedback.content
    note = policy.calls[2].messages[-1]
    assert isinstance(note, UserMessage) and "cut off at the limit of 64 tokens" in note.content
    assert isinstance(policy.calls[2].messages[-2], ToolMessage)  # after the stage's results


async def test_a_subagent_answer_cut_at_the_token_cap_says_so_in_its_report() -> None:
    policy = ScriptedBackend([[assign("a")], "done"])
    workers = ScriptedBackend([Completion(text="Tokyo, Osaka, Kyoto, Osaka", finish_reason="length")])
    cfg = SwarmConfig(subagent_sampling=SamplingParams(max_tokens=8))
    record = await Orchestrator(policy, cfg, subagent_backend=workers).run("go")
    assert record.subagent_results[0].report == "Tokyo, Osaka, Kyoto, Osaka [cut off at the 8-token limit]"


# -- agent names called as tools, budget refusals, duplicates ----------------------------------------


async def test_an_agent_name_called_as_a_tool_points_to_assign_task() -> None:
    policy = ScriptedBackend([[call("worker", task="capital of Peru?")], "done"])
    await Orchestrator(policy).run("go")
    (msg,) = tool_messages(policy.calls[1])
    assert msg.is_error and "'worker' is a sub-agent type, not a tool. Run it with assign_task" in msg.content
    assert '{"name": "assign_task", "arguments": {"agent": "worker", "task": "capital of Peru?"}}' in msg.content


async def test_no_subagent_is_started_without_critical_budget_for_one_step() -> None:
    # Budget 3: turn 1 (1) + its sub-agent (1) leaves 1 -> turn 2 is the forced final one. With
    # budget 4, turn 2 leaves 1 after generating: its assignment cannot take a step and is refused.
    policy = ScriptedBackend([[assign("a")], [assign("b")], "answer"])
    workers = ScriptedBackend({"worker-0-0": ["ra"]})
    record = await Orchestrator(policy, SwarmConfig(max_critical_steps=4), subagent_backend=workers).run("go")
    policy.assert_consumed()
    assert [s.width for s in record.stages] == [1, 0, 0]
    assert all(r.steps > 0 for r in record.subagent_results)
    (refusal,) = last_tool_text(policy.calls[2])
    assert "no critical-step budget is left to run a sub-agent (3 of 4 critical steps used)" in refusal
    assert "Answer the user now" in refusal
    assert record.dag.critical_steps <= 4


async def test_a_completed_assignment_is_not_rerun_but_samples_in_one_turn_all_run() -> None:
    policy = ScriptedBackend([[assign("a"), assign("a"), assign("b")], [assign("a")], "done"])
    workers = ScriptedBackend({"worker-0-0": ["ra"], "worker-0-1": ["ra2"], "worker-0-2": ["rb"]})
    record = await Orchestrator(policy, subagent_backend=workers).run("go")
    workers.assert_consumed()
    assert [s.width for s in record.stages] == [3, 0, 0]
    (again,) = last_tool_text(policy.calls[2])
    assert "this exact task already completed; its result: [worker-0-1]" in again and "ra2" in again  # the latest


async def test_a_turn_that_only_reassigns_finished_tasks_is_followed_by_the_answer_turn() -> None:
    # A small model re-sent the same six finished assignments three turns in a row, until its
    # context overflowed and the episode failed with every result in hand.
    policy = ScriptedBackend([[assign("a"), assign("b")], [assign("a"), assign("b")], "A and B"])
    workers = ScriptedBackend({"worker-0-0": ["ra"], "worker-0-1": ["rb"]})
    record = await Orchestrator(policy, subagent_backend=workers).run("go")
    policy.assert_consumed()
    assert record.status is EpisodeStatus.COMPLETED and record.answer == "A and B"
    assert [s.width for s in record.stages] == [2, 0, 0]
    last = policy.calls[2]
    assert last.tool_choice == "none"
    notice = last.messages[-1]
    assert isinstance(notice, UserMessage) and "Every task you assigned has already completed" in notice.content
    # A turn with new work beside a finished task is not cut short.
    policy = ScriptedBackend([[assign("a")], [assign("a"), assign("c")], "done"])
    workers = ScriptedBackend({"worker-0-0": ["ra"], "worker-1-0": ["rc"]})
    record = await Orchestrator(policy, subagent_backend=workers).run("go")
    assert [s.width for s in record.stages] == [1, 1, 0] and policy.calls[2].tool_choice == "auto"


@pytest.mark.parametrize("model", [SMALL, "gpt-4o"])
async def test_a_small_models_subagent_with_tools_searches_first_and_answers_last(model: str) -> None:
    @tool
    def search(query: str) -> str:
        """Search the documents."""
        return f"doc about {query}"

    policy = ScriptedBackend([[assign("zip of Ava Lopez")], "Ava Lopez: 92168"], model=model)
    workers = ScriptedBackend(
        {"worker-0-0": [[call("search", query="Ava Lopez")], [call("search", query="Ava")], "zip: 92168"]}
    )
    # the orchestrator has no tools of its own, so a one-part task is the sub-agent's to do
    config = SwarmConfig(max_subagent_steps=3, orchestrator_tools=[])
    record = await Orchestrator(policy, config, tools=[search], subagent_backend=workers).run("go")
    workers.assert_consumed()
    (result,) = record.subagent_results
    assert result.status is AgentStatus.COMPLETED and result.steps == 3
    choices = [r.tool_choice for r in workers.calls]
    # small: a tool call first (not "NOT FOUND" from memory), the answer on the last step of its cap
    assert choices == (["required", "auto", "none"] if model == SMALL else ["auto", "auto", "auto"])
    # ... told so after its last tool result: with its tools withdrawn and no word of it, a 1.5B
    # researcher wrote calls as text or reported NOT FOUND for the document it had just opened
    last = workers.calls[-1].messages
    if model == SMALL:
        assert isinstance(last[-2], ToolMessage) and isinstance(last[-1], UserMessage)
        assert last[-1].content == LAST_STEP_NOTICE and LAST_STEP_NOTICE in str(result.transcript)
    else:
        assert isinstance(last[-1], ToolMessage)


@pytest.mark.parametrize("model", [SMALL, "gpt-4o"])
async def test_a_small_models_subagent_runs_one_tool_call_per_turn(model: str) -> None:
    # A 1.5B researcher wrote search and open in one turn, opening ids it invented ("1234567890")
    # before the search result existed; every open failed and the sub-agents timed out retrying.
    opened: list[str] = []

    @tool
    def search(query: str) -> str:
        """Search the documents."""
        return f"[1] retail/user/{query.lower()}_1 | {query}"

    @tool
    def open_doc(doc_id: str) -> str:
        """Open a document."""
        opened.append(doc_id)
        return "zip: 92168"

    turn = [call("search", query="ava"), call("open_doc", doc_id="1234567890")]
    policy = ScriptedBackend([[assign("zip of Ava")], "Ava: 92168"], model=model)
    workers = ScriptedBackend({"worker-0-0": [turn, [call("open_doc", doc_id="retail/user/ava_1")], "zip: 92168"]})
    config = SwarmConfig(max_subagent_steps=3, orchestrator_tools=[])  # the sub-agent's task (as above)
    record = await Orchestrator(policy, config, tools=[search, open_doc], subagent_backend=workers).run("go")
    workers.assert_consumed()
    # A small model's sub-agent asks its backend for one call per reply (parallel_tool_calls=False).
    assert [r.parallel_tool_calls for r in workers.calls] == [model != SMALL] * 3
    (result,) = record.subagent_results
    assert result.status is AgentStatus.COMPLETED
    first = result.step_records[0].tool_results
    if model != SMALL:  # a capable model's parallel calls all run
        assert opened == ["1234567890", "retail/user/ava_1"] and not any(r.is_error for r in first)
        return
    assert opened == ["retail/user/ava_1"]  # the invented id was never opened
    assert [r.call.name for r in first] == ["search", "open_doc"]  # both calls stay in the record
    assert not first[0].is_error and first[1].is_error and first[1].error_type == "OneCallPerTurn"
    seen = last_tool_text(workers.calls[1])
    assert seen[0].startswith("[1] retail/user/ava_1") and "call one tool per turn" in seen[1]
    assert "search" in seen[1]  # says which result to wait for


def test_admission_is_a_pure_function_of_calls_and_state() -> None:
    agents = {"worker": AgentDefinition(name="worker", system_prompt="p")}
    calls = [assign(f"t{i}") for i in range(4)] + [call("search", q="x"), call("worker", task="t9")]
    plan = admit(calls, agents, stage=2, step_cap=3, max_width=3)
    assert [(a.agent_id, a.task, a.step_cap) for a in plan.assignments] == [
        ("worker-2-0", "t0", 3),
        ("worker-2-1", "t1", 3),
        ("worker-2-2", "t2", 3),
    ]
    assert [c.name for c in plan.direct] == ["search"]
    assert {v[1] for v in plan.refused.values()} == {"WidthLimit", "AgentCalledAsTool"}
    single = admit(calls, agents, stage=0, step_cap=3, max_width=3, subagents=False)
    assert len(single.direct) == len(calls) and not single.assignments


# -- forced final turn, clean answers ------------------------------------------------------------------


async def test_the_forced_final_turn_tells_the_model_to_answer_and_its_answer_is_clean() -> None:
    policy = ScriptedBackend([[assign("a")], '{"answer": "Paris<|im_end|>"}'])
    workers = ScriptedBackend(["Paris"])
    record = await Orchestrator(policy, SwarmConfig(max_critical_steps=3), subagent_backend=workers).run("go")
    final = policy.calls[1]
    assert final.tool_choice == "none"
    notice = final.messages[-1]
    assert isinstance(notice, UserMessage) and notice.content.startswith("No budget is left")
    assert record.status is EpisodeStatus.BUDGET_EXHAUSTED and record.answer == "Paris"
    assert record.turns[-1].text == '{"answer": "Paris<|im_end|>"}'  # the raw output stays on the turn


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("France: Paris. Japan: Tokyo.", "France: Paris. Japan: Tokyo."),
        ('{"answer": "Paris and Tokyo"}', "Paris and Tokyo"),
        ("Paris</tool_response> Please reply in plain text", "Paris"),
        ("<|im_start|>assistant\nParis<|im_end|>\n<|im_start|>user\nthanks", "Paris"),
        ("</tool_call>\nTokyo", "Tokyo"),
        # A loop until the token cap (the last copy cut off) is kept once; short repeats are content.
        (
            "France: Paris. Japan: Tokyo." + " Also Paris, London." * 40 + " Also Par",
            "France: Paris. Japan: Tokyo. Also Paris, London.",
        ),
        ("0, 0, 0, 0, 0, 0", "0, 0, 0, 0, 0, 0"),
        ("Paris. Paris is big.", "Paris. Paris is big."),
    ],
)
async def test_answers_reach_the_user_without_template_tokens_or_json_wrappers(raw: str, clean: str) -> None:
    record = await Orchestrator(ScriptedBackend([raw])).run("go")
    assert record.answer == clean


async def test_a_subagent_report_is_clean_text() -> None:
    policy = ScriptedBackend([[assign("a")], "done"])
    workers = ScriptedBackend(["Rome<|im_end|><|im_start|>user\nmore"])
    record = await Orchestrator(policy, subagent_backend=workers).run("go")
    assert record.subagent_results[0].report == "Rome"
    looping = ScriptedBackend(["Rome is the capital. " + "It is in Italy. " * 20])
    record = await Orchestrator(ScriptedBackend([[assign("a")], "done"]), subagent_backend=looping).run("go")
    assert record.subagent_results[0].report == "Rome is the capital. It is in Italy."


# -- prompt profiles -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "profile"),
    [
        ("qwen2.5-coder-0.5b", "small"),
        ("qwen2.5-coder-1.5b", "small"),
        ("SmolLM2-135M-Instruct.Q4_1", "small"),
        ("Qwen2.5-72B-Instruct", "default"),
        ("llama-3.1-8b", "default"),
        ("gpt-4o", "default"),
        ("scripted", "default"),
    ],
)
def test_the_profile_follows_the_model_size_in_its_name(model: str, profile: str) -> None:
    assert profile_for(model).name == profile
    assert profile_for(model, "default").name == "default"


async def test_a_small_model_gets_the_short_prompt_a_worked_example_and_must_act_first() -> None:
    policy = ScriptedBackend([[assign("a")], "done"], model=SMALL)
    await Orchestrator(policy, subagent_backend=ScriptedBackend(["ra"])).run("the real task: Peru and Chile")
    first = policy.calls[0]
    system = first.messages[0]
    assert isinstance(system, SystemMessage) and system.content.startswith(PROFILES["small"].system_prompt)
    assert len(system.content) < len(DEFAULT_SYSTEM_PROMPT) + 60
    # The worked examples: a one-fact question answered directly in one step, then a list task: one
    # turn of two parallel assign_task calls, their reports, the answer.
    direct, example = first.messages[1:3], first.messages[3:-2]
    assert isinstance(direct[0], UserMessage) and "?" in direct[0].content
    assert isinstance(direct[1], AssistantMessage) and direct[1].content and not direct[1].tool_calls
    assert isinstance(example[1], AssistantMessage) and [c.name for c in example[1].tool_calls] == [
        "assign_task",
        "assign_task",
    ]
    assert {c.arguments["agent"] for c in example[1].tool_calls} == {WORKER}
    assert isinstance(example[-1], AssistantMessage) and not example[-1].tool_calls
    assert first.messages[-2] == UserMessage(content="the real task: Peru and Chile")
    split = first.messages[-1]  # a list task: the calls that give each item its own sub-agent
    assert isinstance(split, UserMessage) and split.content.startswith("This task lists several items.")
    assert first.tool_choice == "required" and policy.calls[1].tool_choice == "auto"
    assert {t.name for t in first.tools} >= {"create_subagent", "assign_task"}
    assert next(t for t in first.tools if t.name == "assign_task").description == PROFILES["small"].assign_description


# -- a whole list task handed to one sub-agent ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "listed"),
    [
        ("Find the capital cities of France and Japan.", True),
        ("What are the currencies of Hungary, Poland, Thailand?", True),
        ("Translate 'house' & 'window'", True),
        ("Look up:\n- sodium\n- zinc", True),
        ("What is the capital of France?", False),
        ("What is 770 - 68?", False),
        # real lists: a plural head, a preposition, names after a colon, quoted titles, long names
        ("What are the capitals of France and Japan?", True),
        ("Give the authors of the books Emma and Dracula.", True),
        ("Who wrote Jane Eyre and Crime and Punishment?", True),
        ("Who wrote 'War and Peace' and 'Emma'?", True),
        ("Who wrote Madame Bovary, The Adventures of Tom Sawyer, Dracula and Oliver Twist?", True),
        ("Give the chemical symbol for each of these elements: chlorine and helium.", True),
        ("Build a table of these 2 companies: Luszeze Biotech, Quessipea Foods.", True),
        ("Look up:\n1. sodium\n2. zinc", True),
        # one title: after a singular head noun, or in quotes; and verbs joined by "and"
        ("Who wrote the book Pride and Prejudice?", False),
        ("Who wrote the book War and Peace?", False),
        ("Who wrote the book The Old Man and the Sea?", False),
        ("Who directed the film Fast and Furious?", False),
        ("Who runs the company Procter & Gamble?", False),
        ("What is the capital of Trinidad and Tobago?", False),
        ("What's the currency of Antigua and Barbuda?", False),
        ("What was the population of Bosnia and Herzegovina in 1990?", False),
        ("What are the capitals of Trinidad and Tobago and Peru?", True),
        ("Find the capital of France and Japan.", True),  # no singular verb: read as written, a list
        ("Watch the series Law and Order.", False),
        ("Who wrote 'Pride and Prejudice'?", False),
        ("Who wrote “War and Peace”?", False),
        ("Write code and test it.", False),
        ("For each one give: zip, orders.", False),
    ],
)
def test_a_list_of_items_is_recognised(text: str, listed: bool) -> None:
    assert lists_items(text) is listed


@pytest.mark.parametrize(
    ("task", "parts"),
    [
        (
            "Find the capitals of India, Kenya, South Korea and Chile.",
            [f"Find the capitals of {c}." for c in ("India", "Kenya", "South Korea", "Chile")],
        ),
        ("Who wrote Jane Eyre and Crime and Punishment?", ["Who wrote Jane Eyre?", "Who wrote Crime and Punishment?"]),
        (
            "How do you say 'red' and 'book' in Spanish?",
            ["How do you say 'red' in Spanish?", "How do you say 'book' in Spanish?"],
        ),
        ("What is 770 - 68, 256 - 87 and 171 + 73?", ["What is 770 - 68?", "What is 256 - 87?", "What is 171 + 73?"]),
        (
            "Symbols of these elements: sodium, zinc and iron.",
            [f"Symbols of these elements: {e}." for e in ("sodium", "zinc", "iron")],
        ),
        ("What is 3.5 + 2 and 4.25 * 2?", ["What is 3.5 + 2?", "What is 4.25 * 2?"]),
        # the count of the whole list does not belong to one item's task
        (
            "Find the capitals of both France and Japan.",
            ["Find the capitals of France.", "Find the capitals of Japan."],
        ),
        (
            "Give the authors of the two books Emma and Dracula.",
            ["Give the authors of the books Emma.", "Give the authors of the books Dracula."],
        ),
        # a list of commas only, with what to do for each item; "search and open tools" is not the list
        (
            "Build a table of these 3 retail customers: Ava Lopez, Ava Hernandez, Amelia Rossi.\n"
            "For each one give: zip, orders. Look everything up with the search and open tools; do not guess.\n"
            "Answer with one markdown table.",
            [
                f"Build a table of these retail customers: {c}. For each one give: zip, orders."
                for c in ("Ava Lopez", "Ava Hernandez", "Amelia Rossi")
            ],
        ),
        # quoted titles stay whole; a title after a singular head noun is no list at all
        ("Who wrote 'War and Peace' and 'Emma'?", ["Who wrote 'War and Peace'?", "Who wrote 'Emma'?"]),
        (
            "Who wrote Madame Bovary, The Adventures of Tom Sawyer and Dracula?",
            [f"Who wrote {b}?" for b in ("Madame Bovary", "The Adventures of Tom Sawyer", "Dracula")],
        ),
        (
            "Give the chemical symbol for each of these elements: chlorine and helium.",
            [f"Give the chemical symbol for each of these elements: {e}." for e in ("chlorine", "helium")],
        ),
        ("Who wrote the book Pride and Prejudice?", None),
        ("Name the founder of the company Procter & Gamble.", None),
        ("What is the capital of Trinidad and Tobago?", None),
        ("Who wrote “War and Peace”?", None),
        ("What is the capital of France?", None),
        ("Write code and test it.", None),
        ("Look everything up with the search and open tools.", None),
        ("For each one give: zip, orders.", None),
        # no list: the pronoun I, examples ending in "etc.", one pair after "between" (BFCL train/dev
        # requests; before 2026-11-28 each gave sub-tasks such as "I prefer a I will pick it up …")
        ("I prefer a SUV and I will pick it up from the airport.", None),
        ("My user ID is 12345, and I want to change my name.", None),
        ("Can you retrieve information like Director, Cast, Awards etc. for the movie?", None),
        ("What is the shortest distance between New York and Los Angeles by bus?", None),
        ("Find the distance between [1, 2] and [3, 4].", None),
        ("Find the distance between Paris, Rome and Oslo.", None),
        # a bracketed or quoted value with commas is one item
        (
            "What is the greatest common divisor of the two pairs of numbers (45, 60) and (81, 27)?",
            [f"What is the greatest common divisor of the pairs of numbers {p}?" for p in ("(45, 60)", "(81, 27)")],
        ),
        ("You are in 'New York, NY' and you want a concert.", None),
        (
            "Look up Drari Robotics (Oslo, Norway), Kel Foods (Lyon, France) and Mox Labs.",
            [f"Look up {c}." for c in ("Drari Robotics (Oslo, Norway)", "Kel Foods (Lyon, France)", "Mox Labs")],
        ),
        ("Who wrote 'Hello, World' and 'Dune'?", ["Who wrote 'Hello, World'?", "Who wrote 'Dune'?"]),
    ],
)
def test_the_items_of_a_list_task_become_one_task_each(task: str, parts: list[str] | None) -> None:
    assert split_items(task) == parts


async def test_a_small_model_handing_a_whole_list_to_one_subagent_is_told_once_to_split_it() -> None:
    task = "Find the capital cities of France and Japan."
    policy = ScriptedBackend(
        [
            [assign(task)],  # the whole list to one sub-agent: refused, nothing runs
            [assign("capital of France?"), assign("capital of Japan?")],
            "France: Paris. Japan: Tokyo.",
        ],
        model=SMALL,
    )
    workers = ScriptedBackend({"worker-1-0": ["Paris"], "worker-1-1": ["Tokyo"]})
    record = await Orchestrator(policy, subagent_backend=workers).run(task)
    policy.assert_consumed()
    workers.assert_consumed()
    assert record.status is EpisodeStatus.COMPLETED and record.answer == "France: Paris. Japan: Tokyo."
    assert [s.width for s in record.stages] == [0, 2, 0]
    # The refusal says why and shows the calls to send instead, one per item of the list.
    (notice,) = last_tool_text(policy.calls[1])
    assert notice.startswith(f"error: {SPLIT_NOTICE}")
    suggested = [json.loads(line) for line in notice.splitlines() if line.startswith("{")]
    assert [c["arguments"]["task"] for c in suggested] == [
        "Find the capital cities of France.",
        "Find the capital cities of Japan.",
    ]
    assert all(
        c == {"name": "assign_task", "arguments": {"agent": WORKER, "task": c["arguments"]["task"]}} for c in suggested
    )
    assert record.stages[0].tool_results[0].error_type == "SplitTask"
    # ... and its next turn must act (a small model otherwise answers from memory).
    assert [r.tool_choice for r in policy.calls] == ["required", "required", "auto"]


async def test_the_split_notice_is_given_once_and_an_unsplit_task_then_runs() -> None:
    task = "Compare Python and Rust."
    policy = ScriptedBackend([[assign(task)], [assign(task)], "Rust is faster than Python."], model=SMALL)
    workers = ScriptedBackend({"worker-1-0": ["Rust is faster."]})
    record = await Orchestrator(policy, subagent_backend=workers).run(task)
    policy.assert_consumed()
    assert [s.width for s in record.stages] == [0, 1, 0] and record.status is EpisodeStatus.COMPLETED
    # The re-assignment is run, and is not reported as a repeat of a failed call.
    assert "repeat" not in str(policy.calls[2].messages[-1].content)


@pytest.mark.parametrize(
    ("model", "task", "first", "width"),
    [
        (
            "gpt-4o",
            "Find the capitals of France and Japan.",
            "Find the capitals of France and Japan.",
            1,
        ),  # default profile
        (SMALL, "What is the capital of France?", "What is the capital of France?", 1),  # not a list
        (SMALL, "Find the capitals of France and Japan.", "What is the capital of France?", 1),  # one item
    ],
)
async def test_no_split_notice_where_nothing_lists_items_or_the_profile_trusts_the_model(
    model: str, task: str, first: str, width: int
) -> None:
    @tool
    def search(query: str) -> str:
        """Search the documents."""
        return query

    # Sub-agents hold a tool the orchestrator lacks, so a small model's one-part task may be delegated.
    config = SwarmConfig(orchestrator_tools=[], subagent_tools=["search"])
    policy = ScriptedBackend([[assign(first)], "France: Paris. Japan: Tokyo."], model=model)
    workers = ScriptedBackend(["Paris"])
    record = await Orchestrator(policy, config, tools=[search], subagent_backend=workers).run(task)
    assert record.stages[0].width == width and record.status is EpisodeStatus.COMPLETED


async def test_a_small_model_looping_over_the_same_assignments_runs_each_task_once() -> None:
    looped = [assign(t) for _ in range(3) for t in ("capital of France?", "capital of Japan?")]
    policy = ScriptedBackend([looped, "France: Paris. Japan: Tokyo."], model=SMALL)
    workers = ScriptedBackend({"worker-0-0": ["Paris"], "worker-0-1": ["Tokyo"]})
    record = await Orchestrator(policy, subagent_backend=workers).run("capitals of France and Japan")
    workers.assert_consumed()
    assert record.stages[0].width == 2 and record.status is EpisodeStatus.COMPLETED
    assert [r.error_type for r in record.stages[0].tool_results] == ["DuplicateTask"] * 4
    assert sum("runs once" in t for t in last_tool_text(policy.calls[1])) == 4
    # A capable model's identical assignments are samples: all run.
    default = ScriptedBackend([[assign("pick a number") for _ in range(3)], "7"])
    record = await Orchestrator(default, subagent_backend=ScriptedBackend(["7", "3", "7"])).run("go")
    assert record.stages[0].width == 3


async def test_the_example_names_the_workloads_own_agent_type_first() -> None:
    researcher = AgentDefinition(name="researcher", system_prompt="look things up")
    policy = ScriptedBackend(["done"], model=SMALL)
    await Orchestrator(policy, SwarmConfig(extra_instructions="Use researcher."), agents=[researcher]).run("x")
    msgs = policy.calls[0].messages
    example_call = next(m for m in msgs if isinstance(m, AssistantMessage) and m.tool_calls)
    assert example_call.tool_calls[0].arguments["agent"] == "researcher"
    assert str(msgs[0].content).endswith("- researcher\n- worker\n\nUse researcher.")


async def test_config_overrides_the_profile_and_a_custom_prompt_drops_the_example() -> None:
    policy = ScriptedBackend(["done"], model=SMALL)
    await Orchestrator(policy, SwarmConfig(prompt_profile="default")).run("x")
    assert str(policy.calls[0].messages[0].content).startswith(DEFAULT_SYSTEM_PROMPT)
    assert len(policy.calls[0].messages) == 2 and policy.calls[0].tool_choice == "auto"

    policy = ScriptedBackend(["done"], model=SMALL)
    await Orchestrator(policy, SwarmConfig(system_prompt="Be brief.", extra_instructions="Extra.")).run("x")
    assert policy.calls[0].messages[0] == SystemMessage(content="Be brief.\n\nExtra.")
    assert len(policy.calls[0].messages) == 2

    with pytest.raises(ConfigError, match="prompt profile 'tiny'"):
        Orchestrator(ScriptedBackend([]), SwarmConfig(prompt_profile="tiny"))


async def test_single_agent_mode_gets_neither_the_protocol_prompt_nor_the_worker() -> None:
    policy = ScriptedBackend(["4"], model=SMALL)
    record = await Orchestrator(policy, SwarmConfig(subagents=False)).run("2+2?")
    msgs = policy.calls[0].messages
    assert len(msgs) == 2 and "sub-agent" not in str(msgs[0].content)
    assert policy.calls[0].tool_choice == "auto" and record.agents == ()


async def test_a_subagent_repeating_a_failed_call_is_told_so() -> None:
    @tool
    def calc(expression: str) -> str:
        """Evaluate arithmetic."""
        raise ValueError(f"not arithmetic: {expression}")

    bad = call("calc", expression="house * 23")
    policy = ScriptedBackend([[assign("Translate 'house' into French.")], "done"])
    workers = ScriptedBackend([[bad], [bad], "maison"])
    record = await Orchestrator(policy, SwarmConfig(max_subagent_steps=4), tools=[calc], subagent_backend=workers).run(
        "go"
    )
    first, second = (m.content for m in tool_messages(workers.calls[2]))
    assert "already made" not in first
    assert second.startswith("You already made exactly this call and it failed. Do not repeat it")
    assert record.subagent_results[0].report == "maison"


@pytest.mark.parametrize(("width", "shown"), [(16, 16), (8, 0)])
async def test_a_small_swarm_is_shown_one_call_per_item_up_to_what_a_stage_admits(width: int, shown: int) -> None:
    # The calls shown before a small swarm's first turn on a list task: one per item while one stage can run
    # them all (a fixed cap of 8 left 16-entity tasks with no calls, and the 1.5B gave the list to one worker).
    names = [f"{w}ex" for w in ("Ab", "Bo", "Cu", "Da", "Ek", "Fo", "Gu", "Ha", "Ir", "Jo", "Ka", "Lu", "Mo", "Ni")]
    names += ["Opex", "Puex"]
    task = f"Find the founding year of these companies: {', '.join(names[:-1])} and {names[-1]}."
    calls = [assign(f"Find the founding year of these companies: {n}.") for n in names]
    policy = ScriptedBackend([calls[:width], "done"], model=SMALL)
    workers = ScriptedBackend({f"worker-0-{i}": ["1999"] for i in range(width)})
    config = SwarmConfig(max_subagents_per_stage=width)
    record = await Orchestrator(policy, config, subagent_backend=workers).run(task)
    assert record.stages[0].width == width
    first = policy.calls[0].messages
    suggested = [
        json.loads(line)["arguments"]["task"]
        for m in first
        if isinstance(m, UserMessage)
        for line in m.content.splitlines()
        if line.startswith('{"name": "assign_task"')
    ]
    assert suggested == [c.arguments["task"] for c in calls][:shown]
