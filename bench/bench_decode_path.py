"""What the local backend's request costs in decode speed: its ``/completion`` body against variants that
drop one thing at a time, on the real engine.

The local backend asks llama.cpp for more than tokens: the sampled token's probability after sampling
(``n_probs`` 1, ``post_sampling_probs``: the RL trajectory's logprobs), no hidden truncation of the
distribution (``top_k`` 0, ``min_p`` 0), a grammar on tool-using turns, and a stream with per-token
timings (so a generation that loops is stopped). Each *variant* is that body with one change; every
request decodes from the same prompt (a wide-research sub-agent's conversation, rendered by the backend)
on a fresh slot state of the same length, and the variants take turns within each round (after one
request that is not kept: the prompt's first prefill). A second part measures the action grammar: an
orchestrator-like turn writing several ``assign_task`` calls under the grammar the backend sends, against
the same prompt unconstrained, with 1 and 4 requests decoding at once::

    flock /work/heavy.lock python bench/bench_decode_path.py --rounds 3 --out bench/results/decode_path.json
    python bench/bench_decode_path.py --report bench/results/decode_path.json

Reported per variant: llama.cpp's own decode tokens/s (``timings.predicted_per_second``) and the client's
tokens/s from sending the request to its last byte, median and range over the rounds; every request is
kept in ``--out`` with the commit, model sha256, threads and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
from provenance import facts, header, parser, reported, save

from agent_swarm.swarm.backend import ModelRequest, SamplingParams, ToolSpec
from agent_swarm.swarm.backends.local import LocalBackend, default_threads
from agent_swarm.swarm.backends.toolparse import action_grammar
from agent_swarm.swarm.messages import SystemMessage, UserMessage

ROOT = Path(__file__).resolve().parent.parent
SYSTEM = (
    "You look things up in a document collection. First call search with the name of the entity your task "
    "names; then call open with the id of the result whose title is that entity; then report the requested "
    "attributes as 'name: value' lines. If no result is that entity, report NOT FOUND."
)
TASK = "Build a table of these products: Bathork U52. For each one give: price (in dollars), weight_g (in grams)."
ASSIGN_TASK = (
    "Assign one research task per country, each to its own sub-agent: France, Japan, Brazil, Kenya, Peru, "
    "Chile, Egypt, India. For each, ask for the capital, the population and the official languages."
)
ASSIGN = ToolSpec(
    name="assign_task",
    description="Give a task to a new sub-agent.",
    parameters={"type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]},
)
SEARCH = ToolSpec(
    name="search",
    description="Search the collection; returns doc ids and titles.",
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string"}, "k": {"type": "integer"}},
        "required": ["query"],
    },
)


def _variants(base: dict[str, Any]) -> dict[str, tuple[dict[str, Any], bool]]:
    """name -> (body, streamed). ``base`` is the backend's body at temperature 0."""
    plain = {k: base[k] for k in ("prompt", "n_predict", "temperature", "cache_prompt")}
    return {
        "backend (stream)": (base, True),
        "backend, no stream": (base, False),
        "no probs": ({k: v for k, v in base.items() if k not in ("n_probs", "post_sampling_probs")}, True),
        "llama.cpp top_k/min_p": ({k: v for k, v in base.items() if k not in ("top_k", "min_p")}, True),
        "bare (prompt, n_predict, T)": ({**plain, "ignore_eos": True}, False),
        "backend, T=0.7": ({**base, "temperature": 0.7, "seed": 1}, True),
        "llama.cpp top_k/min_p, T=0.7": (
            {**{k: v for k, v in base.items() if k not in ("top_k", "min_p")}, "temperature": 0.7, "seed": 1},
            True,
        ),
    }


async def _post(url: str, body: dict[str, Any], stream: bool) -> dict[str, Any]:
    # A connection per request: llama.cpp's server may close one a streamed answer used.
    async with httpx.AsyncClient(timeout=600) as client:
        return await _send(client, url, body, stream)


async def _send(client: httpx.AsyncClient, url: str, body: dict[str, Any], stream: bool) -> dict[str, Any]:
    started = time.perf_counter()
    if not stream:
        r = await client.post(url, json=body)
        r.raise_for_status()
        data = r.json()
    else:
        data = {}
        async with client.stream("POST", url, json={**body, "stream": True, "timings_per_token": True}) as r:
            r.raise_for_status()
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    data = json.loads(line[6:])  # the client parses every event, as the backend does
    wall = time.perf_counter() - started
    t = data.get("timings") or {}
    return {
        "wall_s": round(wall, 4),
        "predicted_n": t.get("predicted_n"),
        "predicted_ms": t.get("predicted_ms"),
        "server_tok_s": t.get("predicted_per_second"),
        "prompt_n": t.get("prompt_n"),
        "prompt_ms": t.get("prompt_ms"),
    }


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    backend = LocalBackend(args.model, slots=4, ctx_per_slot=4096, threads=args.threads, constrain_actions=True)
    await backend.start()
    request = ModelRequest(
        messages=(SystemMessage(content=SYSTEM), UserMessage(content=TASK)),
        tools=(SEARCH,),
        sampling=SamplingParams(temperature=0.0, max_tokens=args.tokens),
    )
    ids = await backend.prompt_ids(request)
    base = {**backend._body(request, ids), "ignore_eos": True, "id_slot": 0}  # the body complete() sends
    variants = _variants(base)
    url = f"{backend.engine.base_url}/completion"
    rows: list[dict[str, Any]] = []
    await _post(url, base, True)  # the prompt's first prefill, not kept
    for r in range(args.rounds):
        for name, (body, stream) in variants.items():
            # The same prompt each time: llama.cpp reuses the slot's cached prompt, so every request
            # decodes from the same state; only the sampling and the transport differ.
            row = await _post(url, body, stream)
            row.update(variant=name, round=r, streamed=stream)
            rows.append(row)
            print(
                f"round {r} {name:<32} server {row['server_tok_s'] or 0:6.1f} tok/s  "
                f"{row['predicted_n']} tokens  wall {row['wall_s']:.2f}s",
                flush=True,
            )
    rows += await _grammar_rows(backend, args)
    await backend.aclose()
    return {"prompt_tokens": len(ids), "rows": rows, "layout": backend.engine.context_note}


async def _grammar_rows(backend: LocalBackend, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The action grammar's cost: an orchestrator-like turn that writes several ``assign_task`` calls,
    constrained by the grammar the backend sends (calls only), against the same prompt unconstrained
    (``ignore_eos``), with 1 and 4 such requests decoding at once on their own slots."""
    request = ModelRequest(
        messages=(UserMessage(content=ASSIGN_TASK),),
        tools=(ASSIGN,),
        sampling=SamplingParams(temperature=0.0, max_tokens=args.tokens * 2),
    )
    ids = await backend.prompt_ids(request)
    base = backend._body(request, ids)
    open_tag, close_tag = backend.engine.tool_tags
    grammar = action_grammar([ASSIGN], allow_answer=False, open_tag=open_tag, close_tag=close_tag)
    bodies = {"grammar": {**base, "grammar": grammar}, "no grammar": {**base, "ignore_eos": True}}
    url = f"{backend.engine.base_url}/completion"
    rows: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for width in (1, 4):
            for name, body in bodies.items():
                got = await _together(url, [{**body, "id_slot": i} for i in range(width)])
                for i, row in enumerate(got):
                    row.update(variant=f"assign calls, {name}, x{width}", round=r, streamed=True, request=i)
                rows += got
                n = sum(g["predicted_n"] or 0 for g in got)
                wall = max(g["wall_s"] for g in got)
                print(f"round {r} assign {name:<10} x{width}: {n} tokens in {wall:.2f}s", flush=True)
    return rows


async def _together(url: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{} for _ in bodies]

    async def one(i: int) -> None:
        out[i] = await _post(url, bodies[i], True)

    async with anyio.create_task_group() as tg:
        for i in range(len(bodies)):
            tg.start_soon(one, i)
    return out


def report(result: dict[str, Any]) -> str:
    lines = [
        f"{header(result)}; prompt {result['prompt_tokens']} tokens",
        f"{'variant':<32}{'n':>3}  {'server decode tok/s, median [range]':<36}{'client tok/s, median [range]':<30}",
    ]
    names = list(dict.fromkeys(r["variant"] for r in result["rows"]))
    base = None
    for name in names:
        rows = [r for r in result["rows"] if r["variant"] == name]
        server = sorted(r["server_tok_s"] for r in rows if r["server_tok_s"])
        client = sorted(r["predicted_n"] / r["wall_s"] for r in rows if r["predicted_n"])
        med = statistics.median(server)
        base = base or med
        lines.append(
            f"{name:<32}{len(rows):>3}  {med:6.1f} [{server[0]:.1f}, {server[-1]:.1f}] x{med / base:4.2f}"
            f"{'':<12}{statistics.median(client):6.1f} [{client[0]:.1f}, {client[-1]:.1f}]"
        )
    lines.append("requests decoding at once (assign calls): tokens per request, and all requests' tokens over the")
    lines.append("slowest one's wall time, median [range] over the rounds")
    for name in names:
        rows = [r for r in result["rows"] if r["variant"] == name and "request" in r]
        if not rows:
            continue
        rounds = sorted({r["round"] for r in rows})
        agg = sorted(
            sum(r["predicted_n"] for r in rows if r["round"] == k) / max(r["wall_s"] for r in rows if r["round"] == k)
            for k in rounds
        )
        each = sorted(r["predicted_n"] for r in rows)
        lines.append(
            f"  {name:<34} tokens {each[0]}-{each[-1]}, aggregate {statistics.median(agg):5.1f} tok/s "
            f"[{agg[0]:.1f}, {agg[-1]:.1f}]"
        )
    return "\n".join(lines)


def main() -> None:
    ap = parser(__doc__, "decode_path.json")
    ap.add_argument("--tokens", type=int, default=64, help="tokens each request decodes")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if reported(args, report):
        return
    args.threads = args.threads or default_threads()
    result = facts("decode_path", args.model, args.threads)
    result["tokens"] = args.tokens
    result.update(anyio.run(_measure, args))
    save(result, args.out, report)


if __name__ == "__main__":
    main()
