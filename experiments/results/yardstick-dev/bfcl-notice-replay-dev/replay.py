"""Dev-only replay (issue 26): the second turn of each single-parallel episode of a BFCL dev run, with variants of
the small coach's task-again notice, through the real local backend (greedy, the action grammar, as the runtime
sends it). Prints one JSON line per (episode, scenario, variant): whether the model called tools again and whether
it sent its first batch again.

Scenario A rebuilds the recorded episode: system = the arm's instructions, user = the task, the first turn
regenerated (its ids are checked against the record), the recorded tool results, then the notice. Scenario B is
the layout of ``5428d30``: the user message is the BFCL request alone and how calls are taken is in the system
prompt. Run it under the machine-wide lock::

    D=experiments/results/yardstick-dev
    mkdir -p /tmp/rg && tar -C /tmp/rg -xzf $D/bfcl-repeat-guard-dev/bfcl-parallel-dev-s0-sp-repeatfix/traces.tar.gz
    python $D/bfcl-notice-replay-dev/replay.py /tmp/rg $D/bfcl-notice-replay-dev/variants.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio

from agent_swarm.orchestrator.backend_factory import build_backend
from agent_swarm.swarm.backend import ModelBackend, ModelRequest, SamplingParams, ToolSpec
from agent_swarm.swarm.messages import AssistantMessage, Message, SystemMessage, ToolMessage, UserMessage
from agent_swarm.swarm.records import Task
from agent_swarm.workloads.base import Episode
from agent_swarm.workloads.bfcl import BfclWorkload, _by_id

GREEDY = SamplingParams(temperature=0.0, max_tokens=384, seed=0)
HARNESS = (
    "Each function call is recorded and final (the functions only record calls, they return no real data). "
    "Make each call the request needs exactly once and make no other call. Then say which calls you made."
)


async def _turns(
    backend: ModelBackend,
    first: tuple[Message, ...],
    tools: tuple[ToolSpec, ...],
    results: list[str] | None,
    task: str,
    variants: dict[str, str],
    head: dict[str, Any],
) -> None:
    c0 = await backend.complete(
        ModelRequest(messages=first, tools=tools, sampling=GREEDY, tool_choice="required", parallel_tool_calls=True)
    )
    calls = c0.tool_calls
    shown = results or [json.dumps({"recorded": c.name, "arguments": c.arguments}) for c in calls]
    base: list[Message] = [*first, AssistantMessage(content=c0.text, tool_calls=calls)]
    base += [ToolMessage(tool_call_id=c.id, name=c.name, content=r) for c, r in zip(calls, shown, strict=False)]
    for name, template in variants.items():
        msgs = (*base, UserMessage(content=template.format(task=" ".join(task.split()))))
        c = await backend.complete(
            ModelRequest(messages=msgs, tools=tools, sampling=GREEDY, tool_choice="auto", parallel_tool_calls=True)
        )
        same = [(x.name, x.arguments) for x in c.tool_calls] == [(x.name, x.arguments) for x in calls]
        row = {**head, "variant": name, "first_calls": len(calls), "calls": len(c.tool_calls), "same_batch": same}
        print(json.dumps({**row, "text": (c.text or "")[:160]}), flush=True)


async def main(run: Path, variants: dict[str, str]) -> None:
    workload = BfclWorkload()
    backend = build_backend("local", "qwen2.5-coder-1.5b")
    async with backend:  # type: ignore[attr-defined]
        for ep in sorted((run / "episodes" / "single-parallel").iterdir()):
            d = json.loads((ep / "episode.json").read_text())
            task = Task(**{k: d["task"][k] for k in ("id", "prompt", "metadata")})
            episode: Episode = workload.episode(task, "single")
            tools = tuple(t.spec for t in episode.tools)
            results = [r["content"] for r in d["stages"][0]["orchestrator_steps"][0]["tool_results"]]
            first_a = (SystemMessage(content=episode.instructions), UserMessage(content=task.prompt))
            await _turns(backend, first_a, tools, results, task.prompt, variants, {"ep": ep.name, "scenario": "A"})
            question = _by_id()[str(task.metadata["item"])].question
            first_b = (SystemMessage(content=f"{episode.instructions}\n\n{HARNESS}"), UserMessage(content=question))
            await _turns(backend, first_b, tools, None, question, variants, {"ep": ep.name, "scenario": "B"})


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()))
