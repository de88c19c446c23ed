"""Dev-only replay (issue 26): the step right after a search, with variants of the search result's form and of
the coach's notice, through the real local backend (greedy, the action grammar, as the runtime sends it).
Prints one JSON line per (step, variant): whether the model opened a document (``open``), answered, or called
something else, and the answer's first characters.

Steps replayed: every researcher of a swarm episode after its first ``search`` (its transcript up to that
result), and every single-arm episode's second turn (its instructions, the task, its recorded first-turn calls
and results). The search result is shown as recorded (``titles``), or with a hint line appended (``hint``).
Run it under the machine-wide lock::

    python replay.py RUN_DIR [RUN_DIR ...] > replay.jsonl     # each a swarm eval run directory (with episodes/)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio

from agent_swarm.orchestrator.backend_factory import build_backend
from agent_swarm.swarm.backend import ModelBackend, ModelRequest, SamplingParams
from agent_swarm.swarm.messages import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, UserMessage
from agent_swarm.swarm.records import Task
from agent_swarm.workloads import get_workload

GREEDY = SamplingParams(temperature=0.0, max_tokens=384, seed=0)
HINT = "\n(ids and titles only: their text is not shown here; open a doc_id to read it)"
SUB_NOTICES = {
    "now": 'If the results above answer your task "{task}", answer it now in plain text.',
    "next": 'If the results above answer your task "{task}", answer it now in plain text; if not, call your next tool.',
    "values": (
        'If the results above show the values your task "{task}" asks for, answer it now in plain text; if they show '
        "only ids and titles, call open with the id of the document your task is about."
    ),
    "generic": (
        'If the results above hold every value your task "{task}" asks for, answer it now in plain text; if they do '
        "not hold them yet, call the tool that reads them first."
    ),
    "none": "",
}
ORCH_NOTICES = {
    "now": (
        'The results above are in. If they answer every part of the task "{task}", answer it now in plain text, in '
        "the form it asks for; call a tool only for a part they do not answer."
    ),
    "values": (
        'The results above are in. If they show every value the task "{task}" asks for, answer it now in plain text, '
        "in the form it asks for; if they show only ids and titles, call open with the ids of the documents you need."
    ),
    "generic": (
        'The results above are in. If they hold every value the task "{task}" asks for, answer it now in plain text, '
        "in the form it asks for; if they do not hold them yet, call the tools that read them first."
    ),
    "none": "",
}
ONLY = set(sys.argv[1].split(",")) if len(sys.argv) > 1 and not Path(sys.argv[1]).exists() else None


def _notice(template: str, task: str) -> list[Message]:
    return [UserMessage(content=template.format(task=" ".join(task.split())))] if template else []


def _msg(m: dict[str, Any]) -> Message:
    role = m["role"]
    if role == "system":
        return SystemMessage(content=m["content"])
    if role == "user":
        return UserMessage(content=m["content"])
    if role == "assistant":
        calls = tuple(ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"]) for c in m.get("tool_calls") or ())
        return AssistantMessage(content=m.get("content") or "", tool_calls=calls)
    return ToolMessage(tool_call_id=m["tool_call_id"], name=m["name"], content=m["content"])


def _hinted(msgs: list[Message], hint: bool) -> list[Message]:
    out: list[Message] = []
    for m in msgs:
        if hint and isinstance(m, ToolMessage) and m.name == "search" and "\n    " not in m.content:
            m = ToolMessage(tool_call_id=m.tool_call_id, name=m.name, content=m.content + HINT)
        out.append(m)
    return out


async def _ask(backend: ModelBackend, msgs: list[Message], tools: Any, parallel: bool) -> dict[str, Any]:
    c = await backend.complete(
        ModelRequest(
            messages=tuple(msgs), tools=tools, sampling=GREEDY, tool_choice="auto", parallel_tool_calls=parallel
        )
    )
    names = [x.name for x in c.tool_calls]
    kind = "open" if "open" in names else ("call" if names else "answer")
    return {"action": kind, "calls": names, "text": (c.text or "")[:200]}


async def main(runs: list[Path]) -> None:
    backend = build_backend("local", "qwen2.5-coder-1.5b")
    async with backend:  # type: ignore[attr-defined]
        for run in runs:
            for ep in sorted((run / "episodes").glob("*/*")):
                d = json.loads((ep / "episode.json").read_text())
                task = Task(**{k: d["task"][k] for k in ("id", "prompt", "metadata", "verifier", "verifier_args")})
                wl = get_workload(task.metadata["workload"])
                arm = ep.parent.name
                head = {"run": run.name, "ep": ep.name, "arm": arm}
                if arm == "swarm":
                    episode = wl.episode(task, "swarm")
                    tools = next(a for a in episode.agents if a.name == "researcher").tools
                    specs = tuple(t.spec for t in episode.tools if t.name in tools)
                    for i, sub in enumerate(s for st in d["stages"] for s in st["subagents"]):
                        tr = sub["transcript"]
                        cut = next((j for j, m in enumerate(tr) if m["role"] == "tool"), None)
                        if cut is None:
                            continue
                        base = [_msg(m) for m in tr[: cut + 1]]
                        for hint in (False,):
                            for name, tpl in SUB_NOTICES.items():
                                if ONLY and name not in ONLY:
                                    continue
                                msgs = [
                                    *_hinted(base, hint),
                                    UserMessage(content=tpl.format(task=" ".join(sub["task"].split()))),
                                ]
                                row = {**head, "sub": i, "hint": hint, "notice": name}
                                print(json.dumps({**row, **await _ask(backend, msgs, specs, False)}), flush=True)
                else:
                    episode = wl.episode(task, "single")
                    specs = tuple(t.spec for t in episode.tools)
                    step = d["stages"][0]["orchestrator_steps"][0]
                    calls = tuple(
                        ToolCall(**{k: r["call"][k] for k in ("id", "name", "arguments")}) for r in step["tool_results"]
                    )
                    base: list[Message] = [
                        SystemMessage(content=d["config"]["system_prompt"]),
                        UserMessage(content=task.prompt),
                    ]
                    base.append(AssistantMessage(content=d["turns"][0]["text"], tool_calls=calls))
                    base += [
                        ToolMessage(tool_call_id=r["call"]["id"], name=r["call"]["name"], content=r["content"])
                        for r in step["tool_results"]
                    ]
                    if arm == "single":
                        continue  # one result a turn: the single agent is not told the task again
                    for hint in (False,):
                        for name, tpl in ORCH_NOTICES.items():
                            if ONLY and name not in ONLY:
                                continue
                            msgs = [
                                *_hinted(base, hint),
                                UserMessage(content=tpl.format(task=" ".join(task.prompt.split()))),
                            ]
                            row = {**head, "hint": hint, "notice": name}
                            print(
                                json.dumps({**row, **await _ask(backend, msgs, specs, arm == "single-parallel")}),
                                flush=True,
                            )


if __name__ == "__main__":
    anyio.run(main, [Path(p) for p in sys.argv[1:] if Path(p).exists()])
