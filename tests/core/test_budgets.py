"""Tree-wide budgets and the breadth cap through the public API: shares reserved and refunded,
refusals with the numbers, sub-agents ended at their share with partial reports, the answer always
kept, and every budget on the record, the span and the run summary."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rich.console import Console
from typer.testing import CliRunner

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.orchestrator.budgets import budget_overrides
from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.cli.live import summary_table
from agent_swarm.orchestrator.store import read_episode
from agent_swarm.orchestrator.tasks import load_config
from agent_swarm.swarm.backend import Completion, ModelRequest, Usage
from agent_swarm.swarm.config import Budgets, Price, apply_overrides
from agent_swarm.swarm.errors import ConfigError, ErrorType
from agent_swarm.swarm.messages import ToolCall, ToolMessage
from agent_swarm.swarm.records import AgentStatus, EpisodeRecord, EpisodeStatus
from agent_swarm.swarm.testing import FunctionBackend, ScriptedBackend, call
from agent_swarm.tools import tool


@tool
def probe(n: int) -> str:
    """Probe item n."""
    return f"probe {n}: " + "x" * 40


def _worker(request: ModelRequest) -> Completion:
    """A sub-agent that answers at once, unless its task says 'forever' (then it keeps probing)."""
    task = next(m.content for m in request.messages if m.role == "user")
    looked = sum(isinstance(m, ToolMessage) for m in request.messages)
    if "forever" in task:
        return Completion(text=f"so far {looked} probes", tool_calls=(call("probe", n=looked),))
    return Completion(text=f"done: {task}")


def _assign(task: str) -> ToolCall:
    return call("assign_task", agent="worker", task=task)


async def _run(turns: list[object], config: SwarmConfig, *, tracer: TracerProvider | None = None) -> EpisodeRecord:
    policy = ScriptedBackend(turns, model="orch")  # type: ignore[arg-type]
    orch = Orchestrator(
        policy, config, tools=[probe], subagent_backend=FunctionBackend(_worker, model="sub"), tracer_provider=tracer
    )
    return await orch.run("do the work")


def _total(record: EpisodeRecord) -> Usage:
    return record.usage + record.subagent_usage


async def test_no_budget_set_means_no_ledger_and_the_same_episode() -> None:
    turns: list[object] = [[_assign("a"), _assign("b")], "answer"]
    record = await _run(turns, SwarmConfig())
    assert record.budgets == {} and record.status is EpisodeStatus.COMPLETED
    assert [r.step_cap for r in record.subagent_results] == [8, 8]


async def test_a_subagent_that_reaches_its_token_share_ends_budget_exhausted_with_its_partial_report() -> None:
    cfg = SwarmConfig(
        budgets=Budgets(max_tokens=12_000), max_subagent_steps=50, max_critical_steps=60, max_report_chars=200
    )
    record = await _run([[_assign("probe forever"), _assign("probe forever too")], "answer"], cfg)
    subs = record.subagent_results
    assert [s.status for s in subs] == [AgentStatus.BUDGET_EXHAUSTED] * 2
    assert all("share is spent" in (s.error or "") and s.report.startswith("so far") for s in subs)
    assert all(1 < s.steps < 50 for s in subs)
    line = record.budgets["tokens"]
    assert line.limit == 12_000 and line.reserved == 0 and line.used == _total(record).total_tokens
    assert line.used <= line.limit and line.left == line.limit - line.used
    assert record.answer == "answer"  # the answer turn was kept


async def test_an_assignment_the_budget_cannot_cover_is_refused_with_the_numbers() -> None:
    cfg = SwarmConfig(budgets=Budgets(max_output_tokens=2_400))
    cfg = cfg.model_copy(
        update={
            "orchestrator_sampling": cfg.orchestrator_sampling.model_copy(update={"max_tokens": 200}),
            "subagent_sampling": cfg.subagent_sampling.model_copy(update={"max_tokens": 500}),
        }
    )
    record = await _run([[_assign(f"t{i}") for i in range(6)], "answer"], cfg)
    refused = [t for t in record.stages[0].tool_results if t.error_type == ErrorType.BUDGET_EXHAUSTED]
    ran = record.stages[0].subagents
    assert len(ran) + len(refused) == 6 and len(refused) >= 2 and ran
    assert "output tokens budget cannot cover another sub-agent" in refused[0].content
    assert "kept for the answer" in refused[0].content and "needs up to 500" in refused[0].content
    assert record.budgets["output_tokens"].used <= 2_400


async def test_the_last_turn_the_budget_allows_answers_and_names_the_budget() -> None:
    cfg = SwarmConfig(budgets=Budgets(max_turns=6), max_critical_steps=60)
    turns: list[object] = [[_assign("a")], [_assign("b")], [_assign("c")], [_assign("d")], "final answer"]
    record = await _run([*turns[:3], "final answer"], cfg)
    refused = next(t for t in record.stages[2].tool_results if t.is_error)
    assert refused.error_type == ErrorType.BUDGET_EXHAUSTED and "turns budget cannot cover" in refused.content
    assert record.status is EpisodeStatus.BUDGET_EXHAUSTED and record.answer == "final answer"
    assert "turns budget" in (record.error or "")
    assert record.budgets["turns"].used <= 6


async def test_the_turn_budget_caps_each_subagents_steps() -> None:
    cfg = SwarmConfig(budgets=Budgets(max_turns=10), max_subagent_steps=50, max_critical_steps=60)
    record = await _run([[_assign("probe forever"), _assign("probe forever 2")], "answer"], cfg)
    caps = [s.step_cap for s in record.subagent_results]
    assert caps[0] == caps[1] and caps[0] <= 4  # (10 - 2 turns of the orchestrator) / 2, less the answer's
    assert record.budgets["turns"].used <= 10 and record.answer == "answer"
    assert record.budgets["turns"].reserved == 0.0  # exactly: every share was released


async def test_cost_from_the_price_table() -> None:
    prices = {"orch": Price(input=1.0, output=2.0), "sub": Price(input=0.5, cached=0.1, output=1.0)}
    cfg = SwarmConfig(budgets=Budgets(max_cost=0.05, prices=prices), max_subagent_steps=50, max_critical_steps=60)
    record = await _run([[_assign("probe forever")], "answer"], cfg)
    sub = record.subagent_results[0]
    assert sub.status is AgentStatus.BUDGET_EXHAUSTED and "cost share" in (sub.error or "")
    expected = prices["orch"].cost(record.usage) + prices["sub"].cost(record.subagent_usage)
    assert record.budgets["cost"].used == pytest.approx(expected) and expected <= 0.05
    with pytest.raises(ConfigError, match=r"needs a price for every model; none for \['sub'\]"):
        Orchestrator(
            ScriptedBackend(["x"], model="orch"),
            SwarmConfig(budgets=Budgets(max_cost=1.0, prices={"orch": Price()})),
            subagent_backend=FunctionBackend(_worker, model="sub"),
        )


async def test_the_breadth_cap_counts_subagents_over_the_whole_episode() -> None:
    cfg = SwarmConfig(max_subagents_per_episode=3)
    record = await _run([[_assign("a"), _assign("b")], [_assign("c"), _assign("d")], "answer"], cfg)
    assert [len(s.subagents) for s in record.stages] == [2, 1, 0]
    refusal = next(t for t in record.stages[1].tool_results if t.is_error)
    assert refusal.error_type == ErrorType.WIDTH_LIMIT
    assert "episode limit of 3 sub-agents reached (max_subagents_per_episode; 2 run so far)" in refusal.content
    assert record.budgets["subagents"].used == 3


def _slow_prober(request: ModelRequest) -> Completion:
    looked = sum(isinstance(m, ToolMessage) for m in request.messages)
    return Completion(text=f"so far {looked} probes", tool_calls=(call("probe", n=looked),))


async def test_a_subagent_that_reaches_its_wall_time_share_ends_budget_exhausted_with_its_partial_report() -> None:
    slow = FunctionBackend(_slow_prober, model="sub", delay=0.05)
    cfg = SwarmConfig(budgets=Budgets(max_wall_s=1.5), max_subagent_steps=500, max_critical_steps=600)
    orch = Orchestrator(ScriptedBackend([[_assign("x")], "answer"]), cfg, tools=[probe], subagent_backend=slow)
    record = await orch.run("go")
    sub = record.subagent_results[0]
    assert sub.status is AgentStatus.BUDGET_EXHAUSTED and sub.error_type == ErrorType.STEP_BUDGET
    assert sub.error is not None and "its wall-time share is spent" in sub.error
    assert f"{sub.steps} steps done" in sub.error and "s on the episode clock" in sub.error
    assert sub.steps > 1 and sub.report.startswith("so far")
    assert record.answer == "answer"  # the answer turn was kept (forced: the wall budget is spent)
    assert record.wall_time_s < 1.6 and record.budgets["wall_s"].limit == 1.5


async def test_the_subagent_timeout_inside_the_wall_share_still_ends_it_as_timeout() -> None:
    slow = FunctionBackend(_slow_prober, model="sub", delay=0.05)
    cfg = SwarmConfig(
        budgets=Budgets(max_wall_s=30), subagent_timeout_s=0.3, max_subagent_steps=500, max_critical_steps=600
    )
    orch = Orchestrator(ScriptedBackend([[_assign("x")], "answer"]), cfg, tools=[probe], subagent_backend=slow)
    record = await orch.run("go")
    sub = record.subagent_results[0]
    assert sub.status is AgentStatus.TIMEOUT and "timed out after 0.3s" in (sub.error or "")
    assert sub.report.startswith("so far") and record.answer == "answer"


async def test_budgets_on_the_span_and_in_the_run_summary() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    cfg = SwarmConfig(budgets=Budgets(max_tokens=50_000, max_turns=40))
    record = await _run([[_assign("a")], "answer"], cfg, tracer=provider)
    span = next(s for s in exporter.get_finished_spans() if "swarm.budget.tokens.used" in (s.attributes or {}))
    attrs = dict(span.attributes or {})
    assert attrs["swarm.budget.tokens.used"] == record.budgets["tokens"].used
    assert attrs["swarm.budget.turns.left"] == record.budgets["turns"].left
    console = Console(record=True, width=200, force_terminal=False)
    console.print(summary_table(record))
    text = console.export_text()
    assert "budgets" in text and f"tokens {record.budgets['tokens'].used:,.0f}/50,000 used" in text


def test_budgets_from_the_config_file_and_the_flags(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        "[swarm]\nmax_subagents_per_episode = 48\n[swarm.budgets]\nmax_tokens = 200000\nmax_cost = 2.5\n"
        '[swarm.budgets.prices."gpt-x"]\ninput = 0.15\noutput = 0.6\n'
    )
    cfg, _ = load_config(path)
    assert cfg.max_subagents_per_episode == 48 and cfg.budgets.max_tokens == 200_000
    assert cfg.budgets.prices["gpt-x"].cost(Usage(prompt_tokens=1_000_000)) == 0.15
    over = budget_overrides(["tokens=1000", "turns=30", "wall_s=60", "subagents=5"])
    merged = SwarmConfig.model_validate(apply_overrides(cfg.model_dump(), over))
    assert merged.max_subagents_per_episode == 5
    assert merged.budgets.max_tokens == 1000 and merged.budgets.max_turns == 30 and merged.budgets.max_wall_s == 60
    assert merged.budgets.max_cost == 2.5 and "gpt-x" in merged.budgets.prices  # the config's other budgets stay
    with pytest.raises(ConfigError, match=r"unknown budget 'tokenz'.*tokens"):
        budget_overrides(["tokenz=5"])
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        budget_overrides(["tokens"])


def test_the_budget_flag_on_swarm_run(tmp_path: Path) -> None:
    args = ["run", "--demo", "capitals", "--out", str(tmp_path), "--json", "-q"]
    r = CliRunner().invoke(app, [*args, "--budget", "turns=6", "--budget", "subagents=2"])
    assert r.exit_code == 0, r.output
    record = read_episode(next(tmp_path.glob("*/episode.json")))
    assert record.config["budgets"]["max_turns"] == 6 and record.config["max_subagents_per_episode"] == 2
    assert record.budgets["turns"].used <= 6 and record.budgets["subagents"].used <= 2
    bad = CliRunner().invoke(app, [*args, "--budget", "tokenz=5"])
    assert bad.exit_code == 2 and "unknown budget 'tokenz'" in bad.stderr


async def test_input_is_split_into_uncached_and_cached_prompt_tokens() -> None:
    def cached_worker(request: ModelRequest) -> Completion:
        looked = sum(isinstance(m, ToolMessage) for m in request.messages)
        usage = Usage(prompt_tokens=1_000 + 100 * looked, completion_tokens=10, cached_tokens=900)
        calls = (call("probe", n=looked),)
        return Completion(text="working", tool_calls=calls, usage=usage)

    sub = FunctionBackend(cached_worker, model="sub", tokens=False)
    cfg = SwarmConfig(budgets=Budgets(max_cached_tokens=6_000, max_input_tokens=50_000), max_subagent_steps=50)
    orch = Orchestrator(
        ScriptedBackend([[_assign("probe forever")], "answer"], model="orch"), cfg, tools=[probe], subagent_backend=sub
    )
    record = await orch.run("go")
    r = record.subagent_results[0]
    assert r.status is AgentStatus.BUDGET_EXHAUSTED and "cached tokens share is spent" in (r.error or "")
    assert r.usage.cached_tokens == 900 * r.steps
    assert record.budgets["cached_tokens"].used == r.usage.cached_tokens <= 6_000
    fresh = record.usage.prompt_tokens + r.usage.prompt_tokens - r.usage.cached_tokens
    assert record.budgets["input_tokens"].used == fresh
