"""Decode speed against the context already in the slot, by flash-attention setting, on the engine alone.

An episode's later turns decode far slower than its first (the single agent's turns in the committed
wide-research records: about 19.5 tok/s at 500 tokens of context, 15 at 900, 14 at 2,000), against 24
tok/s from a 250-token prompt in ``bench_decode_path.py``. This measures llama.cpp by itself
(``xllamacpp.Server``, no Swarm code on the path): one engine at a time in the layout a default run plans
here (``--slots`` x ``--ctx``), each of ``--flash`` (llama.cpp's ``flash_attn_type``: -1 auto, 0 off,
1 on); one slot decodes ``--tokens`` greedy tokens (``ignore_eos``, the local backend's sampling fields)
after prompts that are prefixes of one text, shortest first (each extends the cached one), ``--repeats``
times each::

    flock /work/heavy.lock python bench/bench_context_decode.py --out bench/results/context_decode.json
    python bench/bench_context_decode.py --report bench/results/context_decode.json

Every request is kept in ``--out`` (llama.cpp's own decode and prefill timings) with the commit, the
model's sha256, threads, layout and the load average before and after.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
from provenance import facts, header, parser, reported, save

from agent_swarm.swarm.backends.local import default_threads
from agent_swarm.swarm.backends.local.catalogue import resolve_model

ROOT = Path(__file__).resolve().parent.parent
FILLER = (
    "The archive lists products, companies and places with their facts. Each record names an entity, "
    "what it is, who made it, when it was first sold, its price and its weight. "
)


def _server(path: Path, args: argparse.Namespace, flash: int) -> Any:
    import xllamacpp

    p = xllamacpp.CommonParams()
    p.model.path = str(path)
    p.n_parallel = args.slots
    p.n_ctx = args.slots * args.ctx
    p.cpuparams.n_threads = args.threads
    p.cpuparams_batch.n_threads = args.threads
    p.flash_attn_type = flash
    p.use_jinja = True
    p.verbosity = -1
    return xllamacpp.Server(p)


def _engine_rows(path: Path, args: argparse.Namespace, flash: int) -> list[dict[str, Any]]:
    started = time.perf_counter()
    server = _server(path, args, flash)
    load_s = time.perf_counter() - started
    url = str(server.listening_address)
    rows: list[dict[str, Any]] = []
    with httpx.Client(timeout=900) as client:
        ids = client.post(f"{url}/tokenize", json={"content": FILLER * 400}).json()["tokens"]
        for length in args.lengths:
            body = {
                "prompt": ids[:length],
                "n_predict": args.tokens,
                "ignore_eos": True,
                "temperature": 0.0,
                "top_k": 0,
                "min_p": 0.0,
                "n_probs": 1,
                "post_sampling_probs": True,
                "return_tokens": True,
                "cache_prompt": True,
                "id_slot": 0,
            }
            for rep in range(args.repeats + 1):  # the first prefills what the cache does not hold
                t = client.post(f"{url}/completion", json=body).json()["timings"]
                row = {
                    "flash": flash,
                    "context": length,
                    "repeat": rep - 1,
                    "decode_tok_s": t["predicted_per_second"],
                    "decode_n": t["predicted_n"],
                    "prompt_n": t["prompt_n"],
                    "prompt_ms": t["prompt_ms"],
                    "load_s": round(load_s, 2),
                }
                print(
                    f"flash {flash:>2} context {length:>5} rep {rep - 1:>2}: decode {row['decode_tok_s']:.1f} tok/s "
                    f"(prefilled {row['prompt_n']} in {row['prompt_ms'] / 1000:.1f}s)",
                    flush=True,
                )
                rows.append(row)
    del server
    return rows


def report(result: dict[str, Any]) -> str:
    lines = [
        f"{header(result)}; {result['slots']} slots x {result['ctx']} tokens, {result['tokens']} tokens decoded",
        "decode tok/s (llama.cpp's own), median [range] over the repeats (the prefilling request left out)",
        f"{'context':>8}  " + "  ".join(f"{'flash ' + str(f):<22}" for f in result["flash"]),
    ]
    for length in result["lengths"]:
        cells = []
        for f in result["flash"]:
            v = sorted(
                r["decode_tok_s"]
                for r in result["rows"]
                if r["flash"] == f and r["context"] == length and r["repeat"] >= 0
            )
            cells.append(f"{statistics.median(v):5.1f} [{v[0]:.1f}, {v[-1]:.1f}]".ljust(22))
        lines.append(f"{length:>8}  " + "  ".join(cells))
    return "\n".join(lines)


def main() -> None:
    ap = parser(__doc__, "context_decode.json")
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--lengths", default="256,1024,2048,3072")
    ap.add_argument("--flash", default="-1,0,1", help="llama.cpp flash_attn_type values, in turn")
    args = ap.parse_args()
    if reported(args, report):
        return
    args.threads = args.threads or default_threads()
    args.lengths = [int(x) for x in args.lengths.split(",")]
    flashes = [int(x) for x in args.flash.split(",")]
    result = facts("context_decode", args.model, args.threads)
    result.update(slots=args.slots, ctx=args.ctx, tokens=args.tokens, lengths=args.lengths, flash=flashes)
    _, path = resolve_model(args.model, None)
    result["rows"] = [row for flash in flashes for row in _engine_rows(path, args, flash)]
    save(result, args.out, report)


if __name__ == "__main__":
    main()
