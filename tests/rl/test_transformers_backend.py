"""The transformers backend on the tiny model: exact token ids and logprobs, tool calls, engine use."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import anyio
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agent_swarm.orchestrator.engine import Orchestrator  # noqa: E402
from agent_swarm.orchestrator.rl.tiny import build_tiny_model  # noqa: E402
from agent_swarm.swarm.backend import Completion, ModelRequest, SamplingParams, ToolSpec  # noqa: E402
from agent_swarm.swarm.backends.continuation import TurnMemory  # noqa: E402
from agent_swarm.swarm.backends.transformers_backend import TransformersBackend  # noqa: E402
from agent_swarm.swarm.config import SwarmConfig  # noqa: E402
from agent_swarm.swarm.errors import BackendError, ConfigError  # noqa: E402
from agent_swarm.swarm.messages import Message, SystemMessage, UserMessage  # noqa: E402
from agent_swarm.swarm.records import AgentDefinition, EpisodeStatus  # noqa: E402
from agent_swarm.swarm.rl.losses import gather_logprobs  # noqa: E402
from agent_swarm.swarm.testing import FunctionBackend  # noqa: E402

TOOLS = (ToolSpec(name="assign_task"), ToolSpec(name="create_subagent"))
GREEDY = SamplingParams(temperature=0.0, max_tokens=200)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "m")


def _prompt(text: str) -> list[Message]:
    return [SystemMessage(content="you orchestrate"), UserMessage(content=text)]


async def test_random_model_completion_carries_exact_ids_and_recomputable_logprobs(tiny_dir: Path) -> None:
    b = TransformersBackend.from_pretrained(tiny_dir, name="tiny")
    req = ModelRequest(
        messages=tuple(_prompt("hello")), tools=TOOLS, sampling=SamplingParams(temperature=0.7, max_tokens=20, seed=3)
    )
    c = await b.complete(req)
    assert c.prompt_token_ids == tuple(b.render(req))
    assert c.token_ids is not None and c.logprobs is not None
    assert len(c.token_ids) == len(c.logprobs) == c.usage.completion_tokens <= 20
    assert c.finish_reason in ("length", "stop", "tool_calls") and c.weight_version == "0"
    # the trainer's recomputation at the sampling temperature gives the same numbers
    ids = torch.tensor([list(c.prompt_token_ids) + list(c.token_ids)])
    with torch.no_grad():
        lp = gather_logprobs(b.hf_model(input_ids=ids).logits, ids, temperature=0.7)[0, -len(c.token_ids) :]
    assert torch.allclose(lp, torch.tensor(c.logprobs), atol=1e-4)
    # same seed, same sample — alone or decoded in a batch with other requests
    again = await b.complete(req)
    assert again.token_ids == c.token_ids
    others = [dataclasses.replace(req, messages=tuple(_prompt("x" * i))) for i in range(1, 4)]
    batch: list[Completion] = []

    async def one(r: ModelRequest) -> None:
        batch.append(await b.complete(r))

    async with anyio.create_task_group() as tg:
        for r in [*others, req]:
            tg.start_soon(one, r)
    assert c.token_ids in [x.token_ids for x in batch if x.prompt_token_ids == c.prompt_token_ids]


class ScriptedLM(torch.nn.Module):  # type: ignore[misc,name-defined]  # torch comes from importorskip
    """A causal-LM test double: each row emits ``script(prompt text)`` then the end token, greedily.

    It speaks the interface the backend's decode loop uses (prefill, then one token per call with a
    cache), so parsing, stop handling and batching are tested without training a model.
    """

    def __init__(self, tokenizer: object, script: object) -> None:
        super().__init__()
        self.tok = tokenizer
        self.script = script
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.config = SimpleNamespace(max_position_embeddings=4096)
        self.generation_config = SimpleNamespace(eos_token_id=tokenizer.eos_token_id)  # type: ignore[attr-defined]

    def forward(self, input_ids, attention_mask=None, past_key_values=None, **_: object):  # type: ignore[no-untyped-def]
        vocab = len(self.tok)  # type: ignore[arg-type]
        if past_key_values is None:  # prefill: decide each row's output from its (unpadded) prompt
            rows = []
            for i in range(input_ids.shape[0]):
                ids = input_ids[i][attention_mask[i].bool()].tolist()
                text = self.tok.decode(ids, skip_special_tokens=False)  # type: ignore[attr-defined]
                out = self.tok(self.script(text), add_special_tokens=False)["input_ids"]  # type: ignore[operator]
                rows.append([*out, self.tok.eos_token_id])  # type: ignore[attr-defined]
            past_key_values = {"rows": rows, "k": 0}
        else:
            past_key_values["k"] += 1
        k = past_key_values["k"]
        logits = torch.zeros(input_ids.shape[0], input_ids.shape[1], vocab)
        for i, row in enumerate(past_key_values["rows"]):
            logits[i, -1, row[min(k, len(row) - 1)]] = 30.0
        return SimpleNamespace(logits=logits, past_key_values=past_key_values)


CALL = '<tool_call>{"name": "assign_task", "arguments": {"agent": "w", "task": "part 1"}}</tool_call>'
BROKEN = '<tool_call>{"name": "assign_task", "arguments": {"agent"</tool_call>'


def _scripted(tiny_dir: Path, script: object) -> TransformersBackend:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    return TransformersBackend(ScriptedLM(tok, script), tok, name="scripted-lm")


async def test_tool_calls_are_parsed_and_the_end_token_is_kept(tiny_dir: Path) -> None:
    b = _scripted(tiny_dir, lambda prompt: BROKEN if "break" in prompt else "on it" + CALL)
    c = await b.complete(ModelRequest(messages=tuple(_prompt("go")), tools=TOOLS, sampling=GREEDY))
    assert [(x.name, x.arguments) for x in c.tool_calls] == [("assign_task", {"agent": "w", "task": "part 1"})]
    assert c.text == "on it" and c.finish_reason == "tool_calls" and c.parse_error is None
    assert c.token_ids is not None and c.token_ids[-1] == b.tokenizer.eos_token_id
    assert b.tokenizer.decode(c.token_ids) == "on it" + CALL + "<|im_end|>"

    bad = await b.complete(ModelRequest(messages=tuple(_prompt("break")), tools=TOOLS, sampling=GREEDY))
    assert bad.tool_calls == () and bad.parse_error is not None and "invalid" in bad.parse_error

    # with tools disabled the same output is plain text, and the prompt prefix is unchanged
    req = ModelRequest(messages=tuple(_prompt("go")), tools=TOOLS, sampling=GREEDY, tool_choice="none")
    text = await b.complete(req)
    assert text.tool_calls == () and "<tool_call>" in text.text
    assert text.prompt_token_ids == c.prompt_token_ids

    short = await b.complete(
        ModelRequest(messages=tuple(_prompt("go")), tools=TOOLS, sampling=GREEDY.model_copy(update={"max_tokens": 5}))
    )
    assert short.finish_reason == "length" and len(short.token_ids or ()) == 5

    stop = await b.complete(
        ModelRequest(messages=tuple(_prompt("go")), sampling=GREEDY.model_copy(update={"stop": ("it",)}))
    )
    assert stop.text == "on it" and stop.finish_reason == "stop"


async def test_a_call_cut_at_the_token_limit_is_dropped_and_the_calls_before_it_stand(tiny_dir: Path) -> None:
    second = CALL.replace("part 1", "part 2")
    b = _scripted(tiny_dir, lambda prompt: CALL + "\n" + second)
    whole = len(b.tokenizer(CALL + "\n" + second, add_special_tokens=False)["input_ids"])
    sampling = GREEDY.model_copy(update={"max_tokens": whole - 4})  # cut inside the second call
    c = await b.complete(ModelRequest(messages=tuple(_prompt("go")), tools=TOOLS, sampling=sampling))
    assert len(c.token_ids or ()) == whole - 4 and c.parse_error is None
    assert [x.arguments["task"] for x in c.tool_calls] == ["part 1"] and c.finish_reason == "tool_calls"


async def test_concurrent_requests_are_batched_and_each_gets_its_own_output(tiny_dir: Path) -> None:
    b = _scripted(tiny_dir, lambda prompt: prompt.split("user\n")[-1].split("<|im_end|>")[0].upper())
    outs: dict[int, str] = {}

    async def one(i: int) -> None:
        c = await b.complete(ModelRequest(messages=tuple(_prompt(f"row {i}" * (i + 1))), sampling=GREEDY))
        outs[i] = c.text

    async with anyio.create_task_group() as tg:
        for i in range(6):
            tg.start_soon(one, i)
    assert outs == {i: f"ROW {i}" * (i + 1) for i in range(6)}


async def test_orchestrator_episode_on_the_transformers_backend_has_drift_free_tokens(tiny_dir: Path) -> None:
    """A parallel stage through the real engine: every turn's prompt ids extend the last turn's ids."""

    def policy(prompt: str) -> str:
        if "fetched" in prompt:
            return "ok"
        return CALL + CALL.replace("part 1", "part 2")

    sub = FunctionBackend(lambda r: Completion(text="fetched"), model="sub")
    cfg = SwarmConfig(system_prompt="you orchestrate", orchestrator_sampling=GREEDY, max_critical_steps=6)
    orch = Orchestrator(
        _scripted(tiny_dir, policy),
        cfg,
        agents=[AgentDefinition(name="w", system_prompt="fetch")],
        subagent_backend=sub,
    )
    record = await orch.run("fetch 2 parts")
    assert record.status is EpisodeStatus.COMPLETED and record.answer == "ok"
    assert record.dag.stage_widths[0] == 2 and record.dag.critical_steps == 3
    assert record.drift_count == 0 and len(record.turns) == 2
    t0, t1 = record.turns
    assert t0.prompt_token_ids is not None and t0.response_token_ids is not None
    assert t1.prompt_token_ids is not None
    assert t1.prompt_token_ids[: len(t0.prompt_token_ids) + len(t0.response_token_ids)] == (
        t0.prompt_token_ids + t0.response_token_ids
    )


async def test_fenced_tool_calls_continue_from_the_sampled_tokens_not_a_re_render(tiny_dir: Path) -> None:
    """The model writes fenced JSON; the runtime records a parsed call, which the template would render
    as a <tool_call> tag. The next prompt must still hold the tokens the model actually sampled."""
    fenced = '```json\n{"name": "assign_task", "arguments": {"agent": "w", "task": "part 1"}}\n```'

    def policy(prompt: str) -> str:
        return "ok" if "fetched" in prompt else fenced

    sub = FunctionBackend(lambda r: Completion(text="fetched"), model="sub")
    cfg = SwarmConfig(system_prompt="you orchestrate", orchestrator_sampling=GREEDY, max_critical_steps=6)
    backend = _scripted(tiny_dir, policy)
    orch = Orchestrator(backend, cfg, agents=[AgentDefinition(name="w", system_prompt="fetch")], subagent_backend=sub)
    record = await orch.run("fetch 1 part")
    assert record.answer == "ok" and record.dag.stage_widths[0] == 1
    t0, t1 = record.turns
    assert t0.prompt_token_ids is not None and t0.response_token_ids is not None and t1.prompt_token_ids is not None
    sampled = t0.prompt_token_ids + t0.response_token_ids
    assert t1.prompt_token_ids[: len(sampled)] == sampled and not t1.drift and record.drift_count == 0
    assert backend.memory.continued == 1
    # without the memory the same episode re-renders the call as a <tool_call> tag: the engine flags drift
    forgetful = _scripted(tiny_dir, policy)
    forgetful.memory = TurnMemory(capacity=0)
    again = await Orchestrator(
        forgetful, cfg, agents=[AgentDefinition(name="w", system_prompt="fetch")], subagent_backend=sub
    ).run("fetch 1 part")
    assert again.drift_count == 1 and again.turns[1].drift


async def test_overlong_prompt_is_a_backend_error_and_missing_dirs_are_config_errors(
    tiny_dir: Path, tmp_path: Path
) -> None:
    b = TransformersBackend.from_pretrained(tiny_dir, name="tiny")
    with pytest.raises(BackendError, match="max_position_embeddings"):
        await b.complete(ModelRequest(messages=(UserMessage(content="x" * 5000),), sampling=GREEDY))
    with pytest.raises(ConfigError, match=r"config\.json"):
        TransformersBackend.from_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="dtype"):
        TransformersBackend.from_pretrained(tiny_dir, dtype="float5")


def test_load_weights_pushes_a_new_version(tiny_dir: Path) -> None:
    a = TransformersBackend.from_pretrained(tiny_dir, name="a")
    b = TransformersBackend.from_pretrained(tiny_dir, name="b")
    with torch.no_grad():
        for p in a.hf_model.parameters():
            p.add_(0.01)
    b.load_weights(a.hf_model.state_dict(), version=7)
    assert b.weight_version == 7
    for (_, x), (_, y) in zip(
        sorted(a.hf_model.state_dict().items()), sorted(b.hf_model.state_dict().items()), strict=True
    ):
        assert torch.equal(x, y)
    with pytest.raises(ConfigError, match="unexpected"):
        b.load_weights({"nope": torch.zeros(1)}, version=8)
