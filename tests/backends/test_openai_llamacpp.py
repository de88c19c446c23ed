"""The OpenAI-compatible backend against a real llama.cpp server (xllamacpp) on loopback HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import httpx
import pytest

from agent_swarm.swarm.backend import ModelRequest, SamplingParams, ToolSpec
from agent_swarm.swarm.backends.local import LocalEngine
from agent_swarm.swarm.backends.openai_http import OpenAIBackend
from agent_swarm.swarm.messages import UserMessage

# The real SmolLM2 engine (tests/backends/conftest.py): the hermetic guard in tests/conftest.py requires the mark.
pytestmark = pytest.mark.integration

GREEDY = SamplingParams(temperature=0.0, max_tokens=20, seed=3)


@pytest.fixture
async def server(smol_engine: LocalEngine) -> AsyncIterator[OpenAIBackend]:
    async with OpenAIBackend(
        smol_engine.base_url + "/v1", "smollm2-135m", flavour="llamacpp", tools_in_prompt=smol_engine.tools_in_prompt
    ) as b:
        yield b


async def test_chat_completions_with_ids_from_logprobs_and_the_servers_tokenizer(server: OpenAIBackend) -> None:
    c = await server.complete(ModelRequest(messages=(UserMessage(content="Say hello."),), sampling=GREEDY))
    assert c.text.strip() and c.model == "smollm2-135m"
    assert c.token_ids and c.logprobs and len(c.token_ids) == len(c.logprobs) == c.usage.completion_tokens
    # Prompt ids came from /apply-template + /tokenize and match the count the server reported.
    assert c.prompt_token_ids and len(c.prompt_token_ids) == c.usage.prompt_tokens
    async with httpx.AsyncClient() as client:
        text = (await client.post(f"{server.root}/detokenize", json={"tokens": list(c.token_ids)})).json()["content"]
    assert text.replace("<|im_end|>", "") == c.text


async def test_tools_in_the_system_prompt_and_concurrent_requests(server: OpenAIBackend) -> None:
    spec = ToolSpec(name="get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}})
    req = ModelRequest(messages=(UserMessage(content="Weather in Oslo?"),), tools=(spec,), sampling=GREEDY)
    body = server.build_body(req)
    assert "tools" not in body and "get_weather" in body["messages"][0]["content"]
    results = []

    async def one() -> None:
        results.append(await server.complete(req))

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(one)
    assert len(results) == 3
    # All three were served concurrently on parallel slots, each with its own exact ids and logprobs.
    # (Greedy outputs may differ between slots: llama.cpp's batched kernels are not bit-identical
    # across batch compositions, so equality across slots is not a property to test.)
    for r in results:
        assert r.token_ids and r.logprobs and len(r.token_ids) == len(r.logprobs) == r.usage.completion_tokens
    assert all(r.tool_calls or r.parse_error or r.text for r in results)
