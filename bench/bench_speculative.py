"""Speculative decoding for the default 1.5B on this machine (issue 30 item 5): faster, with the same
greedy tokens?

Each arm starts llama.cpp (``xllamacpp``) on the 1.5B with one slot and replays the same prompts: the
exact prompt ids of the orchestrator turns in a committed dev trace (``--traces``, default the controls
dev run), greedy, up to ``--max-tokens`` new tokens. Arms:

* ``none``: plain decoding;
* ``ngram``: llama.cpp's n-gram drafts from the prompt itself (no second model; ``ngram-simple`` with its
  defaults: a draft of up to 48 tokens after a 12-token match);
* ``ngram-short``: the same after a 4-token match (up to 32 tokens);
* ``ngram-mod``: llama.cpp's ``ngram-mod`` drafts (its defaults);
* ``draft``: the packaged Qwen2.5-Coder-0.5B as the draft model (same tokenizer).

``--arms`` picks some; ``--only TEXT`` keeps the trace's episodes whose path holds TEXT (``/swarm/``: the
swarm arm's orchestrator turns); ``--cache-prompt`` lets each prompt reuse the slot's common prefix with
the previous one (prefill only; decoding is what is timed).

Per prompt it keeps the generated ids, the server's decode and prefill timings and the wall time. The
report: decode tokens/s per arm, total decode time against ``none``, and how many prompts decoded to
exactly the same ids as ``none`` (llama.cpp verifies drafts in a batch, whose float sums may differ
from one-token decoding). Raw JSON goes to ``--out``; ``--report FILE`` prints the table from it.

    flock /work/heavy.lock python bench/bench_speculative.py --out bench/results/speculative.json
    python bench/bench_speculative.py --report bench/results/speculative.json
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ARMS = ("none", "ngram", "ngram-short", "ngram-mod", "draft")
TARGET = "qwen2.5-coder-1.5b"
DRAFT = "qwen2.5-coder-0.5b"
DEV_TRACES = Path("experiments/results/yardstick-dev/controls-dev-s0-fix/traces.tar.gz")


def _prompts(traces: Path, limit: int, only: str = "") -> list[list[int]]:
    """The distinct orchestrator prompts (exact ids) of the trace archive's episodes whose path holds
    ``only``, in file order."""
    out: list[list[int]] = []
    seen: set[tuple[int, ...]] = set()
    with tarfile.open(traces) as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            if not m.name.endswith("episode.json") or only not in m.name:
                continue
            f = tar.extractfile(m)
            assert f is not None
            for turn in json.load(io.TextIOWrapper(f, encoding="utf-8"))["turns"]:
                ids = turn.get("prompt_token_ids")
                if ids and tuple(ids) not in seen:
                    seen.add(tuple(ids))
                    out.append(list(ids))
    return out[:limit]


def _server(arm: str, threads: int, ctx: int) -> Any:
    import xllamacpp

    from agent_swarm.swarm.backends.local import resolve_model

    p = xllamacpp.CommonParams()
    p.model.path = str(resolve_model(TARGET)[1])
    p.n_parallel = 1
    p.n_ctx = ctx
    p.cpuparams.n_threads = threads
    p.cpuparams_batch.n_threads = threads
    p.verbosity = -1
    kinds = type(p.speculative.types[0])
    if arm == "ngram":
        p.speculative.types = [kinds.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE]
    elif arm == "ngram-short":
        p.speculative.types = [kinds.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE]
        p.speculative.ngram_simple.size_n = 4
        p.speculative.ngram_simple.size_m = 32
    elif arm == "ngram-mod":
        p.speculative.types = [kinds.COMMON_SPECULATIVE_TYPE_NGRAM_MOD]
    elif arm == "draft":
        p.speculative.types = [kinds.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
        p.speculative.draft.mparams.path = str(resolve_model(DRAFT)[1])
        p.speculative.draft.cpuparams.n_threads = threads
        p.speculative.draft.cpuparams_batch.n_threads = threads
        p.speculative.draft.n_max = 8
    return xllamacpp.Server(p)


def _complete(base: str, ids: list[int], max_tokens: int, cache_prompt: bool = False) -> dict[str, Any]:
    body = {
        "prompt": ids,
        "n_predict": max_tokens,
        "temperature": 0.0,
        "seed": 0,
        "cache_prompt": cache_prompt,
        "return_tokens": True,
    }
    req = urllib.request.Request(
        f"{base}/completion", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        data: dict[str, Any] = json.loads(r.read())
    wall = time.perf_counter() - t0
    t = data.get("timings", {})
    return {
        "tokens": data.get("tokens", []),
        "wall_s": wall,
        "decode_n": t.get("predicted_n"),
        "decode_ms": t.get("predicted_ms"),
        "prefill_n": t.get("prompt_n"),
        "prefill_ms": t.get("prompt_ms"),
        "draft_n": t.get("draft_n"),
        "draft_accepted_n": t.get("draft_n_accepted"),
    }


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run(
    traces: Path,
    limit: int,
    max_tokens: int,
    threads: int,
    rounds: int,
    arms: tuple[str, ...] = ARMS,
    only: str = "",
    cache_prompt: bool = False,
    out: Path | None = None,
) -> dict[str, Any]:
    """Every arm on every prompt, ``rounds`` times; with ``out``, the data so far is written there after
    each arm (a run cut short keeps what it measured)."""
    prompts = _prompts(traces, limit, only)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    rows: list[dict[str, Any]] = []
    meta = {"traces": str(traces), "prompts": len(prompts), "max_tokens": max_tokens, "threads": threads}
    meta |= {"arms": list(arms), "only": only, "cache_prompt": cache_prompt}
    meta |= {"target": TARGET, "draft": DRAFT, "commit": commit, "load_before": _load(), "rounds": rounds}
    for r in range(rounds):
        order = arms if r % 2 == 0 else tuple(reversed(arms))
        for arm in order:
            t0 = time.perf_counter()
            server = _server(arm, threads, 8192)
            base = str(server.listening_address)
            start_s = time.perf_counter() - t0
            for i, ids in enumerate(prompts):
                rows.append(
                    {"round": r, "arm": arm, "prompt": i, "start_s": start_s}
                    | _complete(base, ids, max_tokens, cache_prompt)
                )
            del server
            print(f"round {r} {arm}: done, load {_load()}", file=sys.stderr)
            if out is not None:
                out.write_text(json.dumps({"meta": meta | {"partial": True}, "rows": rows}))
    meta["load_after"] = _load()
    return {"meta": meta, "rows": rows}


def report(data: dict[str, Any]) -> str:
    rows = data["rows"]
    base = {(r["round"], r["prompt"]): r["tokens"] for r in rows if r["arm"] == "none"}
    m = data["meta"]
    lines = [
        f"{m['prompts']} prompts x {m['rounds']} rounds, up to {m['max_tokens']} tokens, {m['threads']} threads, "
        f"commit {m['commit'][:10]}, load {m['load_before']} -> {m.get('load_after', '(cut short)')}",
        "",
        "| arm | decode tok/s, median [range over rounds] | decode s, total | × none | same ids as none "
        "| drafts accepted |",
        "|---|---|---:|---:|---:|---:|",
    ]
    none_total = sum(r["decode_ms"] or 0 for r in rows if r["arm"] == "none") / 1000
    for arm in ARMS:
        mine = [r for r in rows if r["arm"] == arm]
        if not mine:
            continue
        per_round = []
        for rnd in sorted({r["round"] for r in mine}):
            rr = [r for r in mine if r["round"] == rnd]
            per_round.append(
                sum(r["decode_n"] or 0 for r in rr) / max(1e-9, sum(r["decode_ms"] or 0 for r in rr) / 1000)
            )
        total = sum(r["decode_ms"] or 0 for r in mine) / 1000
        same = sum(r["tokens"] == base.get((r["round"], r["prompt"])) for r in mine)
        drafted = sum(r["draft_n"] or 0 for r in mine)
        accepted = sum(r["draft_accepted_n"] or 0 for r in mine)
        rate = f"{accepted}/{drafted}" if drafted else "-"
        lines.append(
            f"| {arm} | {statistics.median(per_round):.2f} [{min(per_round):.2f}, {max(per_round):.2f}] | "
            f"{total:.1f} | {total / none_total:.2f} | {same}/{len(mine)} | {rate} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--traces", type=Path, default=Path("experiments/results/yardstick-dev/controls-dev-s0-fix/traces.tar.gz")
    )
    p.add_argument("--prompts", type=int, default=12)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--arms", default=",".join(ARMS), help="comma-separated, of: " + ", ".join(ARMS))
    p.add_argument("--only", default="", help="keep the trace's episodes whose path holds this text")
    p.add_argument("--cache-prompt", action="store_true", help="reuse the slot's common prefix between prompts")
    p.add_argument("--out", type=Path)
    p.add_argument("--report", type=Path)
    a = p.parse_args(argv)
    if a.report:
        sys.stdout.write(report(json.loads(a.report.read_text())))
        return 0
    arms = tuple(x for x in a.arms.split(",") if x)
    if unknown := [x for x in arms if x not in ARMS]:
        p.error(f"unknown arm(s) {', '.join(unknown)}: choose from {', '.join(ARMS)}")
    if "none" not in arms:
        p.error(f"--arms {a.arms!r} leaves out none, the arm every other is compared with: add none")
    data = run(a.traces, a.prompts, a.max_tokens, a.threads, a.rounds, arms, a.only, a.cache_prompt, a.out)
    if a.out:
        a.out.write_text(json.dumps(data))
    sys.stdout.write(report(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
