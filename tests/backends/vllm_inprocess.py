"""Run by test_vllm.py with the vLLM venv's Python: VLLMEngineBackend in-process, two turns.

Prints one JSON object on the last line of stdout. Needs the ``__main__`` guard: vLLM spawns its
EngineCore process.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import anyio
from pydantic import TypeAdapter

from agent_swarm.swarm.backend import Completion, ModelRequest, SamplingParams, ToolSpec
from agent_swarm.swarm.backends.vllm_engine import VLLMEngineBackend
from agent_swarm.swarm.messages import AssistantMessage, UserMessage

WEATHER = ToolSpec(name="get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}})


async def main(model: str) -> dict[str, object]:
    backend = VLLMEngineBackend(model, engine_args={"enforce_eager": True, "max_model_len": 2048}, weight_version="v7")
    async with backend:
        sampling = SamplingParams(temperature=0.0, max_tokens=16, seed=1)
        first = ModelRequest(messages=(UserMessage(content="Name a planet."),), tools=(WEATHER,), sampling=sampling)
        c1 = await backend.complete(first)
        second = dataclasses.replace(
            first,
            messages=(
                *first.messages,
                AssistantMessage(content=c1.text, tool_calls=c1.tool_calls),
                UserMessage(content="Another?"),
            ),
        )
        c2 = await backend.complete(second)
        decoded = backend._tokenizer.decode(list(c1.token_ids or ()), skip_special_tokens=False)
    return {
        "c1": TypeAdapter(Completion).dump_python(c1, mode="json"),  # Completion is a dataclass
        "c2": TypeAdapter(Completion).dump_python(c2, mode="json"),
        "decoded": decoded,
        "continued": backend.memory.continued,
    }


if __name__ == "__main__":
    print(json.dumps(anyio.run(main, sys.argv[1])))
