"""Behaviour of the episode engine: stages, parallelism, failures as data, budgets, cancellation."""

from __future__ import annotations

import gc

import anyio
import pytest

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.errors import BackendUnavailableError
from agent_swarm.swarm.events import EpisodeFinished, Event, SubagentStarted
from agent_swarm.swarm.messages import ToolCall, ToolMessage
from agent_swarm.swarm.records import AgentDefinition, AgentStatus, EpisodeStatus
from agent_swarm.swarm.testing import FunctionBackend, ScriptedBackend, call, malformed
from agent_swarm.tools import tool


def create(name: str = "w", tools: list[str] | None = None) -> ToolCall:
    return call("create_subagent", name=name, system_prompt=f"you are {name}", tools=tools or [])


def assign(task: str, agent: str = "w") -> ToolCall:
    return call("assign_task", agent=agent, task=task)


def tool_messages(request: ModelRequest) -> list[ToolMessage]:
    return [m for m in request.messages if isinstance(m, ToolMessage)]


async def test_assign_tasks_of_one_turn_run_in_parallel_as_one_stage() -> None:
    policy = ScriptedBackend([[create(), *(assign(f"t{i}") for i in range(6))], "done"])
    workers = ScriptedBackend({f"w-0-{i}": [f"r{i}"] for i in range(6)}, delay=0.05)
    record = await Orchestrator(policy, subagent_backend=workers).run("go")
    policy.assert_consumed()
    workers.assert_consumed()
    assert record.status is EpisodeStatus.COMPLETED and record.answer == "done"
    stage = record.stages[0]
    assert stage.kind == "subagents" and stage.width == 6
    # All six ran at the same time: every one started before any finished.
    assert max(r.started for r in stage.subagents) < min(r.ended for r in stage.subagents)
    # The orchestrator saw each report as the result of its own assign_task call, in call order.
    reports = [m.content for m in tool_messages(policy.calls[1]) if m.name == "assign_task"]
    assert [r.splitlines()[-1] for r in reports] == [f"r{i}" for i in range(6)]
    assert record.dag.critical_steps == 1 + 1 + 1 and record.dag.total_steps == 2 + 6


async def test_failures_are_results_and_siblings_keep_running() -> None:
    slow_ok = ["ok-slow"]

    def boom(_: ModelRequest) -> Completion:
        raise RuntimeError("model crashed")

    workers = ScriptedBackend(
        {
            "w-0-0": [BackendUnavailableError("server returned 503 five times")],
            "w-0-1": [boom],
            "w-0-2": [malformed("{broken"), malformed("{broken"), malformed("{broken")],
            "w-0-3": [call("nope"), call("nope"), call("nope")],  # never answers: hits its step cap
            "w-0-4": slow_ok,
        },
        delay=0.02,
    )
    policy = ScriptedBackend([[create(), *(assign(f"t{i}") for i in range(5))], "summary"])
    cfg = SwarmConfig(max_subagent_steps=3, max_malformed_retries=1)
    record = await Orchestrator(policy, cfg, subagent_backend=workers).run("go")
    statuses = {r.agent_id: r.status for r in record.subagent_results}
    assert statuses == {
        "w-0-0": AgentStatus.FAILED,
        "w-0-1": AgentStatus.FAILED,
        "w-0-2": AgentStatus.FAILED,
        "w-0-3": AgentStatus.BUDGET_EXHAUSTED,
        "w-0-4": AgentStatus.COMPLETED,
    }
    by_id = {r.agent_id: r for r in record.subagent_results}
    assert "503" in (by_id["w-0-0"].error or "")
    assert by_id["w-0-1"].error_type == "RuntimeError"
    assert by_id["w-0-2"].error_type == "ModelOutputError" and by_id["w-0-2"].steps == 2
    assert by_id["w-0-3"].steps == 3
    # The unknown tool came back to the sub-agent as a recoverable tool error, recorded on the step.
    assert by_id["w-0-3"].step_records[0].tool_results[0].is_error
    assert record.status is EpisodeStatus.COMPLETED
    # The orchestrator sees statuses and errors.
    obs = "\n".join(m.content for m in tool_messages(policy.calls[1]))
    assert "status: failed" in obs and "status: budget_exhausted" in obs and "status: completed" in obs
    # Each report names the task it answers, so a parallel stage's reports can be told apart.
    reports = [m.content for m in tool_messages(policy.calls[1]) if m.name == "assign_task"]
    assert len(reports) == 5 and all(f"task: t{i}\n" in r for i, r in enumerate(reports))


async def test_subagent_timeout_is_a_status() -> None:
    async def slow(_: ModelRequest) -> Completion:
        await anyio.sleep(5)
        return Completion(text="late")

    workers = ScriptedBackend({"w-0-0": [slow], "w-0-1": ["fast"]})
    policy = ScriptedBackend([[create(), assign("a"), assign("b")], "done"])
    cfg = SwarmConfig(subagent_timeout_s=0.2)
    with anyio.fail_after(4.5):
        record = await Orchestrator(policy, cfg, subagent_backend=workers).run("go")
    statuses = [r.status for r in record.subagent_results]
    assert statuses == [AgentStatus.TIMEOUT, AgentStatus.COMPLETED]
    late = record.subagent_results[0]
    assert late.error_type == "TimeoutError" and "0.2s" in (late.error or "")
    # cut at its deadline, not at the 5 s model call (a margin that holds at load 4 on 2 cores)
    assert 0.15 < late.ended - late.started < 3.0


async def test_subagent_deadline_starts_when_it_runs_not_while_it_queues() -> None:
    """With one concurrency slot, the second sub-agent waits for the first; waiting does not count
    against its timeout, so both 0.15 s agents finish under a 0.25 s timeout."""

    async def work(_: ModelRequest) -> Completion:
        await anyio.sleep(0.15)
        return Completion(text="ok")

    workers = ScriptedBackend({"w-0-0": [work], "w-0-1": [work], "w-0-2": [work]})
    policy = ScriptedBackend([[create(), assign("a"), assign("b"), assign("c")], "done"])
    cfg = SwarmConfig(subagent_timeout_s=0.25, max_concurrency=1)
    record = await Orchestrator(policy, cfg, subagent_backend=workers).run("go")
    assert [r.status for r in record.subagent_results] == [AgentStatus.COMPLETED] * 3
    starts = sorted(r.started for r in record.subagent_results)
    assert starts[2] - starts[0] > 0.25  # they really queued


async def test_budget_admission_caps_substeps_and_forces_a_last_turn_without_tools() -> None:
    def worker(request: ModelRequest) -> Completion:
        return Completion(tool_calls=(call("nope"),))  # never finishes on its own

    policy = ScriptedBackend([[create(), assign("a")], [assign("b")], "forced answer"])
    cfg = SwarmConfig(max_critical_steps=8, max_subagent_steps=3)
    record = await Orchestrator(policy, cfg, subagent_backend=FunctionBackend(worker)).run("go")
    policy.assert_consumed()
    caps = [r.step_cap for r in record.subagent_results]
    # turn 1 -> 1 used, cap min(3, 8-1-1)=3 -> 4 used; turn 2 -> 5 used, cap min(3, 8-5-1)=2 -> 7 used;
    # one step left: the last turn has tools disabled -> 8 used, exactly the budget.
    assert caps == [3, 2]
    assert [r.status for r in record.subagent_results] == [AgentStatus.BUDGET_EXHAUSTED] * 2
    assert record.dag.critical_steps == cfg.max_critical_steps
    assert record.status is EpisodeStatus.BUDGET_EXHAUSTED and record.answer == "forced answer"
    last = policy.calls[-1]
    assert last.tool_choice == "none"
    assert record.turns[-1].tools_enabled is False
    assert all(r.steps <= r.step_cap for r in record.subagent_results)


@pytest.mark.parametrize("budget", [1, 2, 3, 4, 5, 9, 13])
async def test_episode_never_exceeds_its_critical_budget(budget: int) -> None:
    def orch(request: ModelRequest) -> Completion:
        if request.tool_choice == "none":
            return Completion(text="final")
        first = not tool_messages(request)
        calls = [create()] if first else []
        n = len(tool_messages(request))  # new tasks each turn (a completed task is not run again)
        return Completion(tool_calls=(*calls, assign(f"x{n}"), assign(f"y{n}")))

    def worker(request: ModelRequest) -> Completion:
        done = len(tool_messages(request))
        return Completion(text="r") if done >= 4 else Completion(tool_calls=(call("nope"),))

    cfg = SwarmConfig(max_critical_steps=budget, max_subagent_steps=6)
    record = await Orchestrator(FunctionBackend(orch), cfg, subagent_backend=FunctionBackend(worker)).run("go")
    assert record.dag.critical_steps <= budget
    assert record.status is EpisodeStatus.BUDGET_EXHAUSTED
    assert record.answer == "final"


async def test_width_limit_refuses_excess_assignments() -> None:
    policy = ScriptedBackend([[create(), *(assign(f"t{i}") for i in range(5))], "done"])
    workers = FunctionBackend(lambda r: Completion(text="ok"))
    record = await Orchestrator(policy, SwarmConfig(max_subagents_per_stage=3), subagent_backend=workers).run("x")
    assert record.stages[0].width == 3
    refused = [m for m in tool_messages(policy.calls[1]) if m.is_error]
    assert len(refused) == 2 and "width limit of 3" in refused[0].content


async def test_global_concurrency_limit_bounds_running_subagents() -> None:
    running = 0
    peak = 0

    async def worker(_: ModelRequest) -> Completion:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.02)
        running -= 1
        return Completion(text="ok")

    policy = ScriptedBackend([[create(), *(assign(f"t{i}") for i in range(8))], "done"])
    cfg = SwarmConfig(max_concurrency=2)
    record = await Orchestrator(policy, cfg, subagent_backend=FunctionBackend(worker)).run("x")
    assert peak == 2
    assert all(r.status is AgentStatus.COMPLETED for r in record.subagent_results)


async def test_create_subagent_validates_names_tools_and_models() -> None:
    @tool
    def echo(text: str) -> str:
        """Echo text."""
        return text

    policy = ScriptedBackend(
        [
            [
                call("create_subagent", name="a", system_prompt="p", tools=["rm_rf"]),
                call("create_subagent", name="b", system_prompt="p", tools=["echo"], model="gpt-9"),
                call("create_subagent", name="", system_prompt="p"),
                call("create_subagent", name="c", system_prompt="p", tools=["echo"]),
                call("create_subagent", name="c", system_prompt="p"),
                assign("t", agent="nobody"),
            ],
            "done",
        ]
    )
    record = await Orchestrator(policy, tools=[echo]).run("x")
    msgs = tool_messages(policy.calls[1])
    errors = [m.content for m in msgs if m.is_error]
    assert len(errors) == 5
    assert "cannot be granted" in errors[0] and "rm_rf" in errors[0]
    assert "unknown model 'gpt-9'" in errors[1]
    assert "already exists" in errors[3]
    assert "unknown sub-agent 'nobody'" in errors[4]
    assert [a.name for a in record.agents] == ["worker", "c"]  # the built-in type, then the one created


async def test_subagents_cannot_create_subagents() -> None:
    workers = ScriptedBackend({"w-0-0": [call("create_subagent", name="x", system_prompt="y"), "gave up"]})
    policy = ScriptedBackend([[create(), assign("t")], "done"])
    record = await Orchestrator(policy, subagent_backend=workers).run("x")
    result = record.subagent_results[0]
    first = result.step_records[0].tool_results[0]
    assert first.is_error and "unknown tool 'create_subagent'" in first.content
    spec_names = {t.name for t in workers.calls[0].tools}
    assert "create_subagent" not in spec_names and "assign_task" not in spec_names


async def test_direct_tool_calls_and_tool_errors_are_recorded() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @tool
    def explode() -> str:
        """Always fails."""
        raise ValueError("kaboom")

    policy = ScriptedBackend([[call("add", a=2, b=3), call("explode"), call("add", a="x", b=1)], "5"])
    record = await Orchestrator(policy, tools=[add, explode]).run("x")
    stage = record.stages[0]
    assert stage.kind == "tools"
    contents = [r.content for r in stage.tool_results]
    assert contents[0] == "5"
    assert stage.tool_results[1].is_error and "ValueError: kaboom" in contents[1]
    assert stage.tool_results[2].is_error and "invalid arguments" in contents[2]
    assert record.status is EpisodeStatus.COMPLETED


async def test_predefined_agents_and_per_model_backends() -> None:
    fast = ScriptedBackend(["from fast"], model="fast")
    policy = ScriptedBackend([[call("assign_task", agent="helper", task="t")], "ok"])
    record = await Orchestrator(
        policy,
        agents=[AgentDefinition(name="helper", system_prompt="p", model="fast")],
        subagent_backends={"fast": fast},
    ).run("x")
    assert record.subagent_results[0].report == "from fast"
    assert record.subagent_results[0].model == "fast"


async def test_malformed_orchestrator_output_is_retried_then_fails() -> None:
    policy = ScriptedBackend([malformed("{"), malformed("{"), malformed("{")])
    record = await Orchestrator(policy, SwarmConfig(max_malformed_retries=2)).run("x")
    assert record.status is EpisodeStatus.FAILED and record.error_type == "ModelOutputError"
    assert [s.kind for s in record.stages] == ["retry", "retry", "answer"]
    # The model was told what went wrong before each retry.
    assert "could not be parsed" in policy.calls[1].messages[-1].content


async def test_orchestrator_model_failure_still_yields_a_record() -> None:
    policy = ScriptedBackend([BackendUnavailableError("connection refused")])
    record = await Orchestrator(policy).run("x")
    assert record.status is EpisodeStatus.FAILED and "connection refused" in (record.error or "")
    assert record.dag.critical_steps == 1


async def test_cancelling_the_episode_cancels_subagents_and_keeps_the_record() -> None:
    started = anyio.Event()
    events: list[Event] = []

    async def hang(_: ModelRequest) -> Completion:
        started.set()
        await anyio.sleep(60)
        return Completion(text="never")

    workers = ScriptedBackend({"w-0-0": ["quick"], "w-0-1": [hang], "w-0-2": [hang]})
    policy = ScriptedBackend([[create(), assign("a"), assign("b"), assign("c")]])
    orch = Orchestrator(policy, subagent_backend=workers, observers=[events.append])
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(orch.run, "x")
            await started.wait()
            await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
    assert isinstance(events[-1], EpisodeFinished)  # the cancelled episode's record reaches the observers
    record = events[-1].record
    assert record.status is EpisodeStatus.CANCELLED
    statuses = [r.status for r in record.subagent_results]
    assert statuses == [AgentStatus.COMPLETED, AgentStatus.CANCELLED, AgentStatus.CANCELLED]
    assert sum(isinstance(e, SubagentStarted) for e in events) == 3


async def test_episode_timeout_produces_a_timeout_record() -> None:
    async def hang(_: ModelRequest) -> Completion:
        await anyio.sleep(60)
        return Completion(text="never")

    policy = ScriptedBackend([[create(), assign("a")]])
    cfg = SwarmConfig(episode_timeout_s=0.2)
    with anyio.fail_after(5):
        record = await Orchestrator(policy, cfg, subagent_backend=FunctionBackend(hang)).run("x")
    assert record.status is EpisodeStatus.TIMEOUT
    assert record.subagent_results[0].status is AgentStatus.CANCELLED


async def test_exact_tokens_are_recorded_and_drift_is_counted() -> None:
    policy = ScriptedBackend([[call("nope")], "done"])
    record = await Orchestrator(policy).run("x")
    assert record.drift_count == 0
    t0, t1 = record.turns
    assert t0.prompt_token_ids and t0.response_token_ids and t0.response_logprobs
    assert len(t0.response_token_ids) == len(t0.response_logprobs)
    prefix = t0.prompt_token_ids + t0.response_token_ids
    assert t1.prompt_token_ids is not None and t1.prompt_token_ids[: len(prefix)] == prefix

    n = 0

    def drifting(request: ModelRequest) -> Completion:
        nonlocal n
        n += 1
        ids = (99, n) * 3  # a prompt that does not extend the previous turn
        if n == 1:
            return Completion(tool_calls=(call("nope"),), prompt_token_ids=ids, token_ids=(1,), logprobs=(-0.1,))
        return Completion(text="done", prompt_token_ids=ids, token_ids=(2,), logprobs=(-0.1,))

    record = await Orchestrator(FunctionBackend(drifting, tokens=False)).run("x")
    assert record.drift_count == 1 and record.turns[1].drift


def test_run_sync_for_scripts() -> None:
    record = Orchestrator(ScriptedBackend(["hi"])).run_sync("x")
    assert record.answer == "hi" and record.status is EpisodeStatus.COMPLETED


async def test_toolsets_can_be_granted_by_name() -> None:
    from agent_swarm.tools import Toolset

    @tool
    def read(path: str) -> str:
        """Read."""
        return f"read {path}"

    @tool
    def write(path: str) -> str:
        """Write."""
        return f"wrote {path}"

    workers = ScriptedBackend({"w-0-0": [call("write", path="a"), "done"], "p-0-1": ["ok"]})
    policy = ScriptedBackend(
        [
            [
                call("create_subagent", name="w", system_prompt="p", tools=["files"]),
                assign("t"),
                call("assign_task", agent="p", task="t"),
            ],
            "end",
        ]
    )
    orch = Orchestrator(
        policy,
        tools=[Toolset("files", (read, write))],
        subagent_backend=workers,
        agents=[AgentDefinition(name="p", system_prompt="p", tools=("files",))],
    )
    record = await orch.run("x")
    assert {a.name: a.tools for a in record.agents} == {
        "p": ("read", "write"),
        "w": ("read", "write"),
        "worker": ("read", "write"),  # the built-in type may use every grantable tool
    }
    assert record.subagent_results[0].step_records[0].tool_results[0].content == "wrote a"
    create_spec = next(t for t in policy.calls[0].tools if t.name == "create_subagent")
    assert "files" in create_spec.parameters["properties"]["tools"]["items"]["enum"]


async def test_concurrency_limit_is_shared_by_concurrent_episodes() -> None:
    running = 0
    peak = 0

    async def worker(_: ModelRequest) -> Completion:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.02)
        running -= 1
        return Completion(text="ok")

    def policy(request: ModelRequest) -> Completion:
        if tool_messages(request):
            return Completion(text="done")
        return Completion(tool_calls=(create(), *(assign(f"t{i}") for i in range(4))))

    orch = Orchestrator(
        FunctionBackend(policy), SwarmConfig(max_concurrency=3), subagent_backend=FunctionBackend(worker)
    )
    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(orch.run, "x")
    assert peak == 3


def test_create_subagent_schema_forbids_tools_when_none_may_be_granted() -> None:
    policy = ScriptedBackend(["hi"])
    Orchestrator(policy).run_sync("x")
    spec = next(t for t in policy.calls[0].tools if t.name == "create_subagent")
    assert spec.parameters["properties"]["tools"]["maxItems"] == 0


async def test_single_agent_mode_offers_no_subagent_actions() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    policy = ScriptedBackend([[call("add", a=1, b=2), create(), assign("t")], "3"])
    record = await Orchestrator(policy, SwarmConfig(subagents=False), tools=[add]).run("x")
    policy.assert_consumed()
    assert {t.name for t in policy.calls[0].tools} == {"add"}
    stage = record.stages[0]
    # The actions are unknown tools here: errors the model sees, no sub-agent ever runs.
    assert stage.kind == "tools" and stage.width == 0 and not record.subagent_results
    assert [r.is_error for r in stage.tool_results] == [False, True, True]
    assert "unknown tool 'create_subagent'" in stage.tool_results[1].content
    assert record.status is EpisodeStatus.COMPLETED and record.answer == "3"


async def test_a_slow_tool_times_out_and_its_subagent_carries_on() -> None:
    """Tool timeouts inside sub-agents are enforced by their cancel scope: the call becomes
    a ToolTimeoutError the agent sees, the agent answers, its sibling is untouched."""

    @tool(timeout_s=0.2)
    async def stall() -> str:
        """Never returns in time."""
        await anyio.sleep(10)
        return "late"

    @tool(timeout_s=5)
    async def quick() -> str:
        """Returns at once."""
        return "fine"

    workers = ScriptedBackend(
        {"w-0-0": [[call("stall")], "gave up on stall"], "w-0-1": [[call("quick")], [call("quick")], "ok"]}
    )
    policy = ScriptedBackend([[create(tools=["stall", "quick"]), assign("a"), assign("b")], "done"])
    with anyio.fail_after(6):
        record = await Orchestrator(policy, tools=[stall, quick], subagent_backend=workers).run("go")
    a, b = record.subagent_results
    assert a.status is AgentStatus.COMPLETED and a.report == "gave up on stall"
    r = a.step_records[0].tool_results[0]
    assert r.is_error and r.error_type == "ToolTimeoutError" and 0.15 < r.ended - r.started < 5.0
    assert b.status is AgentStatus.COMPLETED and [s.tool_results[0].content for s in b.step_records[:2]] == ["fine"] * 2


async def test_a_finished_stage_is_freed_without_waiting_for_the_cyclic_gc() -> None:
    """A stage's sub-agents (runs, transcripts, results) are freed by reference counting once the
    episode is done, also when they have deadlines: garbage in a cycle waits for a full
    collection, which the CLI's GC settings make rare, and a long rollout's memory grows meanwhile
    (bench/README.md, Soak: a stopped deadline watcher once kept a stage's sub-agents in such a cycle)."""
    from agent_swarm.subagents import SubagentRun

    n = 16
    policy = ScriptedBackend([[create(), *(assign(f"t{i}") for i in range(n))], "done"])
    workers = ScriptedBackend({f"w-0-{i}": [f"r{i}"] for i in range(n)}, delay=0.01)  # all run at once
    gc.collect()
    gc.disable()
    try:
        record = await Orchestrator(policy, SwarmConfig(subagent_timeout_s=30), subagent_backend=workers).run("go")
        assert record.status is EpisodeStatus.COMPLETED and len(record.subagent_results) == n
        del record, policy, workers
        # type(), not isinstance(): no attribute lookup on whatever objects other modules left (proxies warn)
        left = sum(type(o) is SubagentRun for o in gc.get_objects())
    finally:
        gc.enable()
    assert left == 0


async def test_unparsed_actions_are_answered_with_their_error_and_valid_ones_still_run() -> None:
    """A create/assign call the backend could not parse is not run, and the model is told why."""
    from agent_swarm.swarm.messages import ToolCall

    bad_create = ToolCall(id="bad-c", name="create_subagent", error="arguments are not valid JSON")
    bad_assign = ToolCall(id="bad-a", name="assign_task", error="arguments are not valid JSON")
    policy = ScriptedBackend([[create(), bad_create, assign("t0"), bad_assign], "done"])
    workers = ScriptedBackend({"w-0-0": ["r0"]})
    record = await Orchestrator(policy, subagent_backend=workers).run("go")
    assert record.status is EpisodeStatus.COMPLETED
    stage = record.stages[0]
    assert [r.status for r in stage.subagents] == [AgentStatus.COMPLETED] and stage.width == 1
    errors = {r.call.id: r for r in stage.tool_results if r.is_error}
    assert set(errors) == {"bad-c", "bad-a"}
    assert all(r.error_type == "ModelOutputError" and "not run" in r.content for r in errors.values())
    seen = {m.tool_call_id: m for m in tool_messages(policy.calls[1])}
    assert len(seen) == 4 and seen["bad-a"].is_error and "not valid JSON" in seen["bad-a"].content


@pytest.mark.parametrize("where", ["tools", "model"])
async def test_a_step_cut_by_a_timeout_or_cancel_is_recorded(where: str) -> None:
    """Regression: the step a timeout interrupts used to vanish from the step
    records and the DAG while its model call's tokens stayed in usage and the transcript."""

    @tool(timeout_s=30)
    async def slow() -> str:
        """Takes long."""
        await anyio.sleep(10)
        return "late"

    async def work(request: ModelRequest) -> Completion:
        if where == "model":
            await anyio.sleep(10)
        return Completion(tool_calls=(call("slow"),))

    # One sub-agent times out; in the second stage the episode itself is cut (a cancel, not a timeout).
    policy = ScriptedBackend([[create(tools=["slow"]), assign("a")], [assign("b")], "never"])
    workers = ScriptedBackend({"w-0-0": [work], "w-1-0": [work]})
    cfg = SwarmConfig(subagent_timeout_s=0.2, episode_timeout_s=2.0)
    events: list[Event] = []
    o = Orchestrator(policy, cfg, tools=[slow], subagent_backend=workers, observers=[events.append])
    with anyio.move_on_after(0.32):  # the first sub-agent times out at 0.2 s; the second is cancelled
        await o.run("go")
    assert isinstance(events[-1], EpisodeFinished)  # the cancelled episode's record reaches the observers
    record = events[-1].record
    assert record.status is EpisodeStatus.CANCELLED
    timed_out, cancelled = record.subagent_results
    assert (timed_out.status, cancelled.status) == (AgentStatus.TIMEOUT, AgentStatus.CANCELLED)
    for r in (timed_out, cancelled):
        (step,) = r.step_records
        assert r.steps == 1 and step.error is not None and "interrupted" in step.error
        assert step.prompt_tokens + step.completion_tokens == r.usage.total_tokens
        if where == "tools":
            assert r.usage.total_tokens > 0  # the model call finished: its tokens are on the step
    assert record.dag.total_steps == len(record.stages) + 2  # both interrupted steps are in the DAG
