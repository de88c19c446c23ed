"""The embedded default backend on a real model (SmolLM2-135M in llama.cpp): tokens, tools, fan-out."""

from __future__ import annotations

import dataclasses
import json
import uuid

import httpx
import pytest

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.swarm.backend import Completion, ModelRequest, SamplingParams, ToolSpec
from agent_swarm.swarm.backends.local import LocalBackend, LocalEngine
from agent_swarm.swarm.messages import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from agent_swarm.swarm.records import AgentStatus, EpisodeStatus
from agent_swarm.swarm.testing import ScriptedBackend, call

# The real SmolLM2 engine (tests/backends/conftest.py): the hermetic guard in tests/conftest.py requires the mark.
pytestmark = pytest.mark.integration

GREEDY = SamplingParams(temperature=0.0, max_tokens=24, seed=7)
WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


async def _detokenize(base_url: str, ids: tuple[int, ...]) -> str:
    async with httpx.AsyncClient() as client:
        resp = await client.post(f"{base_url}/detokenize", json={"tokens": list(ids)})
    return str(resp.json()["content"])


async def test_real_generation_carries_the_engines_token_ids_and_logprobs(smol: LocalBackend) -> None:
    req = ModelRequest(messages=(UserMessage(content="Name three planets."),), sampling=GREEDY)
    c = await smol.complete(req)
    assert c.model == "smollm2-135m"
    assert c.text.strip(), "the model produced no text"
    assert c.prompt_token_ids and c.token_ids and c.logprobs
    assert len(c.token_ids) == len(c.logprobs) == c.usage.completion_tokens <= GREEDY.max_tokens
    assert len(c.prompt_token_ids) == c.usage.prompt_tokens
    assert all(lp <= 0.0 for lp in c.logprobs)
    # The sampled ids decode to exactly the returned text (nothing re-tokenized on our side).
    decoded = await _detokenize(smol.engine.base_url, c.token_ids)
    assert decoded.replace("<|im_end|>", "") == c.text
    # The prompt ids are the model's own chat template, tokenized by the engine.
    prompt = await _detokenize(smol.engine.base_url, c.prompt_token_ids)
    assert prompt.endswith("<|im_start|>user\nName three planets.<|im_end|>\n<|im_start|>assistant\n")


async def test_greedy_decoding_is_deterministic(smol: LocalBackend) -> None:
    req = ModelRequest(messages=(UserMessage(content="Count to five."),), sampling=GREEDY)
    a, b = await smol.complete(req), await smol.complete(req)
    assert a.token_ids == b.token_ids and a.text == b.text


async def test_next_turn_extends_the_exact_sampled_ids_no_retokenization(smol: LocalBackend) -> None:
    """Turn 2's prompt = turn 1's prompt + sampled ids + the template's text for the new messages,
    even when the runtime records turn 1 differently from what was sampled (parsed tool calls)."""
    first = ModelRequest(
        messages=(SystemMessage(content="Use tools."), UserMessage(content="Weather in Paris?")),
        tools=(WEATHER,),
        sampling=GREEDY,
    )
    c1 = await smol.complete(first)
    assert c1.prompt_token_ids is not None and c1.token_ids is not None
    # Record the turn as the agent loop does: a parsed call the model may never have written this way.
    recorded = AssistantMessage(content=c1.text, tool_calls=c1.tool_calls)
    follow = (
        [ToolMessage(tool_call_id=c.id, name=c.name, content="sunny, 21 C") for c in c1.tool_calls]
        if c1.tool_calls
        else [UserMessage(content="Please call the tool.")]
    )
    second = dataclasses.replace(first, messages=(*first.messages, recorded, *follow))
    before = smol.continued_turns
    c2 = await smol.complete(second)
    assert smol.continued_turns == before + 1
    assert c2.prompt_token_ids is not None
    prefix = c1.prompt_token_ids + c1.token_ids
    assert c2.prompt_token_ids[: len(prefix)] == prefix
    tail = await _detokenize(smol.engine.base_url, c2.prompt_token_ids[len(prefix) :])
    assert tail.endswith("<|im_start|>assistant\n")
    assert ("sunny, 21 C" in tail) if c1.tool_calls else ("Please call the tool." in tail)


async def test_tools_reach_a_template_without_tool_support(smol: LocalBackend) -> None:
    """SmolLM2's template ignores `tools`; the backend puts them in the system prompt instead."""
    assert smol.engine.tools_in_prompt
    req = ModelRequest(messages=(UserMessage(content="hi"),), tools=(WEATHER,), sampling=GREEDY)
    c = await smol.complete(req)
    assert c.prompt_token_ids is not None
    prompt = await _detokenize(smol.engine.base_url, c.prompt_token_ids)
    assert '"name": "get_weather"' in prompt and "<tool_call>" in prompt


async def test_overlong_prompt_is_a_backend_error_not_a_crash(smol_engine: LocalEngine) -> None:
    from agent_swarm.swarm.errors import BackendError

    async with LocalBackend(engine=smol_engine) as b:
        req = ModelRequest(messages=(UserMessage(content="word " * 3000),), sampling=GREEDY)
        with pytest.raises(BackendError, match=r"fills the slot's context .*SWARM_LOCAL_CTX"):
            await b.complete(req)


async def test_parallel_fanout_of_subagents_through_the_orchestrator(smol: LocalBackend) -> None:
    """Four sub-agents on the real model run at once on the engine's slots; each gets a real report."""
    n = 4
    policy = ScriptedBackend(
        [
            [
                call("create_subagent", name="poet", system_prompt="You write one short line."),
                *(call("assign_task", agent="poet", task=f"Write a line about the number {i}.") for i in range(n)),
            ],
            "done",
        ]
    )
    cfg = SwarmConfig(max_subagent_steps=2, subagent_sampling=SamplingParams(temperature=0.7, max_tokens=24, seed=3))
    record = await Orchestrator(policy, cfg, subagent_backend=smol).run("write lines")
    policy.assert_consumed()
    assert record.status is EpisodeStatus.COMPLETED
    results = record.stages[0].subagents
    assert len(results) == n
    assert all(r.status is AgentStatus.COMPLETED and r.report.strip() for r in results), [
        (r.status, r.error) for r in results
    ]
    assert all(r.model == "smollm2-135m" and r.usage.completion_tokens > 0 for r in results)
    # They overlapped in time: every sub-agent started before the first one finished.
    assert max(r.started for r in results) < min(r.ended for r in results)
    assert record.subagent_usage.completion_tokens == sum(r.usage.completion_tokens for r in results)


class _MustAct:
    """Wraps the real backend so the orchestrator must act through tools until its budget is spent
    (``tool_choice`` auto -> required, enforced by llama.cpp's JSON-schema grammar): a tiny model then
    runs several orchestrator turns deterministically. Ids and logprobs still come from the engine."""

    def __init__(self, inner: LocalBackend) -> None:
        self.inner = inner

    @property
    def model(self) -> str:
        return self.inner.model

    async def complete(self, request: ModelRequest) -> Completion:
        if request.tool_choice == "auto":
            request = dataclasses.replace(request, tool_choice="required")
        return await self.inner.complete(request)


async def test_real_multiturn_orchestrator_run_has_no_retokenization_drift(smol_engine: LocalEngine) -> None:
    """The orchestrator itself on the real model for several turns (tool calls, tool results, the
    final answer): every turn's prompt ids extend the previous turn's prompt + sampled ids, so the
    engine's drift count is 0, although the runtime records parsed calls, not the sampled JSON."""
    cfg = SwarmConfig(
        max_critical_steps=3,
        max_malformed_retries=3,
        orchestrator_sampling=SamplingParams(temperature=1.0, max_tokens=64, seed=5),
        subagent_sampling=SamplingParams(temperature=0.0, max_tokens=12, seed=1),
        max_subagent_steps=1,
    )
    async with LocalBackend(engine=smol_engine, constrain_actions=True) as local:
        record = await Orchestrator(_MustAct(local), cfg).run(
            "Create a sub-agent named w with create_subagent, then assign it the task: what is 2+2?"
        )
        assert len(record.turns) >= 2, record.error
        assert local.continued_turns >= len(record.turns) - 1
    assert all(t.prompt_token_ids and t.response_token_ids for t in record.turns)
    # llama.cpp drops the probability of a sampled token that ends mid-character (a byte of a
    # multi-byte UTF-8 character, common in a 135M model's T=1 output); such a turn says it has no
    # logprobs rather than carrying misaligned ones.
    with_lps = [t for t in record.turns if t.response_logprobs is not None]
    assert with_lps and all(len(t.response_logprobs or ()) == len(t.response_token_ids or ()) for t in with_lps)
    assert record.drift_count == 0 and not any(t.drift for t in record.turns)
    for prev, nxt in zip(record.turns, record.turns[1:], strict=False):
        assert prev.prompt_token_ids is not None and prev.response_token_ids is not None
        ids = prev.prompt_token_ids + prev.response_token_ids
        assert nxt.prompt_token_ids is not None and nxt.prompt_token_ids[: len(ids)] == ids
    assert record.turns[-1].tools_enabled is False  # the budget forced a final answer turn
    json.dumps(record.model_dump(mode="json"))  # the record with its ids serialises


async def _render(base_url: str, messages: list[dict[str, str]]) -> str:
    async with httpx.AsyncClient() as client:
        resp = await client.post(f"{base_url}/apply-template", json={"messages": messages})
    return str(resp.json()["prompt"])


async def test_a_continued_turn_has_one_end_of_turn_marker_not_two(smol: LocalBackend) -> None:
    """llama.cpp reports a sampled end-of-generation token's text as "", so the template's
    ``<|im_end|>`` after the sampled ids used to be tokenized again: every continued turn carried a
    doubled end marker the chat template never produces. The continued prompt must read exactly
    like the template's own rendering of the conversation."""
    sampling = SamplingParams(temperature=0.0, max_tokens=48, seed=3)
    first = ModelRequest(messages=(UserMessage(content="Reply with one word: yes or no?"),), sampling=sampling)
    c1 = await smol.complete(first)
    assert c1.token_ids is not None and c1.finish_reason == "stop"
    end_id = c1.token_ids[-1]
    assert await _detokenize(smol.engine.base_url, (end_id,)) == "<|im_end|>"  # it ended on the EOG token
    messages = (*first.messages, AssistantMessage(content=c1.text), UserMessage(content="Why?"))
    c2 = await smol.complete(dataclasses.replace(first, messages=messages))
    assert c2.prompt_token_ids is not None and c1.prompt_token_ids is not None
    prefix = c1.prompt_token_ids + c1.token_ids
    assert c2.prompt_token_ids[: len(prefix)] == prefix  # still the exact sampled ids
    assert c2.prompt_token_ids[len(prefix)] != end_id
    rendered = await _render(
        smol.engine.base_url,
        [
            {"role": "user", "content": "Reply with one word: yes or no?"},
            {"role": "assistant", "content": c1.text},
            {"role": "user", "content": "Why?"},
        ],
    )
    assert await _detokenize(smol.engine.base_url, c2.prompt_token_ids) == rendered


async def test_logprobs_are_those_of_the_tempered_distribution_actually_sampled(smol: LocalBackend) -> None:
    """At T != 1 the sampled tokens come from softmax(logits / T); their logprobs must be taken
    from that distribution (the behaviour policy RL ratios need), not from the raw softmax
    llama.cpp reports by default (the same number at T = 1.0 and T = 0.5)."""
    msgs = (UserMessage(content="Reply with one word: yes or no?"),)

    async def first_token(temperature: float) -> tuple[int, float]:
        c = await smol.complete(
            ModelRequest(messages=msgs, sampling=SamplingParams(temperature=temperature, max_tokens=1, seed=11))
        )
        assert c.token_ids and c.logprobs
        return c.token_ids[0], c.logprobs[0]

    tok_hot, lp_hot = await first_token(1.0)
    tok_cool, lp_cool = await first_token(0.5)
    assert tok_hot == tok_cool  # the confident first token; sharpening the distribution raises its probability
    assert lp_cool > lp_hot + 1e-3
    # At T = 1 nothing is truncated (top_k 0, min_p 0, top_p 1): the sampled distribution is the
    # raw softmax, which llama.cpp lists for the top tokens without post_sampling_probs.
    c = await smol.complete(ModelRequest(messages=msgs, sampling=SamplingParams(temperature=1.0, max_tokens=1)))
    assert c.prompt_token_ids is not None
    async with httpx.AsyncClient() as client:
        resp = await client.post(
            f"{smol.engine.base_url}/completion",
            json={"prompt": list(c.prompt_token_ids), "n_predict": 1, "temperature": 1.0, "n_probs": 20},
        )
    top = {e["id"]: e["logprob"] for e in resp.json()["completion_probabilities"][0]["top_logprobs"]}
    assert abs(top[tok_hot] - lp_hot) < 1e-3
    # Greedy decoding picks with probability 1.
    greedy = await smol.complete(ModelRequest(messages=msgs, sampling=SamplingParams(temperature=0.0, max_tokens=4)))
    assert greedy.logprobs and all(lp == 0.0 for lp in greedy.logprobs)


async def test_action_grammar_is_enforced_and_an_uncompilable_one_is_reported(smol_engine: LocalEngine) -> None:
    """Constrained actions use a grammar of hermes calls; llama.cpp silently ignores a grammar it
    cannot compile, so the backend checks each tool set once, warns, and decodes it freely."""
    # A tool set never seen before: verdicts persist on disk beside the prefix states (d366fd3), and a
    # rerun would find this one already checked.
    odd_name = f"odd_{uuid.uuid4().hex[:8]}"
    odd = ToolSpec(
        name=odd_name,
        parameters={
            "type": "object",
            "properties": {"x": {"type": "string", "pattern": "(?<=a)b"}},  # look-behind: not compilable
            "required": ["x"],
        },
    )
    req = ModelRequest(
        messages=(UserMessage(content="What is the weather in Paris?"),),
        tools=(WEATHER,),
        tool_choice="required",
        sampling=GREEDY.model_copy(update={"max_tokens": 40}),
    )
    checked = dict(smol_engine.grammars)  # the engine is shared by the session's tests
    async with LocalBackend(engine=smol_engine, constrain_actions=True) as b:
        c = await b.complete(req)
        assert [t.name for t in c.tool_calls] == ["get_weather"], c.text  # forced into a valid call
        assert all(ok for k, ok in smol_engine.grammars.items() if k not in checked)
        with pytest.warns(RuntimeWarning, match=rf"could not compile the action grammar for tools \['{odd_name}'\]"):
            await b.complete(dataclasses.replace(req, tools=(odd,)))
        assert [ok for k, ok in smol_engine.grammars.items() if k not in checked].count(False) == 1


async def test_one_call_per_reply_is_enforced_by_the_grammar(smol_engine: LocalEngine) -> None:
    req = ModelRequest(
        messages=(UserMessage(content="What is the weather in Paris, in Oslo and in Rome? Call the tool for each."),),
        tools=(WEATHER,),
        tool_choice="required",
        parallel_tool_calls=False,
        sampling=GREEDY.model_copy(update={"max_tokens": 120}),
    )
    async with LocalBackend(engine=smol_engine, constrain_actions=True) as b:
        c = await b.complete(req)
    assert [t.name for t in c.tool_calls] == ["get_weather"], c.text  # one call, then the turn ended
    assert c.finish_reason == "tool_calls" and c.usage.completion_tokens < 120


async def test_allowed_tools_narrow_the_grammar_and_leave_the_prompt_unchanged(smol_engine: LocalEngine) -> None:
    clock = ToolSpec(
        name="get_time",
        description="Current local time in a city.",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    )
    free = ModelRequest(
        messages=(UserMessage(content="What is the weather in Paris?"),),
        tools=(WEATHER, clock),
        tool_choice="required",
        sampling=GREEDY.model_copy(update={"max_tokens": 40}),
    )
    async with LocalBackend(engine=smol_engine, constrain_actions=True) as b:
        asked = await b.complete(free)
        narrowed = await b.complete(dataclasses.replace(free, allowed_tools=("get_time",)))
    assert [t.name for t in asked.tool_calls] == ["get_weather"], asked.text  # what it picks when free
    assert [t.name for t in narrowed.tool_calls] == ["get_time"], narrowed.text  # the only call admitted
    assert narrowed.prompt_token_ids == asked.prompt_token_ids  # both tools stay in the prompt


async def test_a_looping_generation_is_stopped_early_and_everything_else_is_unchanged(smol_engine: LocalEngine) -> None:
    loops = ModelRequest(
        messages=(UserMessage(content="Write the word cat 300 times."),),
        sampling=SamplingParams(temperature=0.0, max_tokens=400, seed=7),
    )
    counts = dataclasses.replace(loops, messages=(UserMessage(content="Count from 1 to 500 separated by commas."),))
    async with (
        LocalBackend(engine=smol_engine, stop_repeats=False) as full,
        LocalBackend(engine=smol_engine) as guarded,
    ):
        whole, cut = await full.complete(loops), await guarded.complete(loops)
        assert whole.token_ids is not None and cut.token_ids is not None
        assert whole.usage.completion_tokens == 400 and whole.finish_reason == "length"
        # Stopped once it repeated itself for 128 tokens: the same ids and logprobs, a prefix.
        assert 128 <= len(cut.token_ids) < 200 and cut.finish_reason == "length"
        assert whole.token_ids[: len(cut.token_ids)] == cut.token_ids
        assert whole.logprobs is not None and cut.logprobs == whole.logprobs[: len(cut.token_ids)]
        assert guarded.repeats_stopped == 1
        # Output that does not loop (a long count) is exactly what the engine decodes unguarded.
        a, b = await full.complete(counts), await guarded.complete(counts)
        assert a.token_ids == b.token_ids and a.text == b.text and a.finish_reason == b.finish_reason
        assert guarded.repeats_stopped == 1
