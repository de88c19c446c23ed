"""Do 16 slots sharing one KV cache decode what 16 slots with their own caches decode? And what does
llama.cpp do when a shared cache is full?

On the default 1.5B at 2 threads, each layout's server (``xllamacpp.Server``) decodes four prompts
greedily (one of ~1,200 tokens), first one at a time, then all at once, and returns the raw top-5
logprobs of every token (``post_sampling_probs: false``). Layouts: ``split16x32768`` (16 own caches of
32,768 tokens, the plan of issue 29) and ``unified65536_per32768`` (one cache of 65,536 tokens that
the 16 slots share, each capped at 32,768: ``sizing.POOL_CONTEXT``). Then two requests that together
overrun a 1,024-token shared cache are sent at once, unreserved, to see llama.cpp's answer.

    flock /work/heavy.lock python bench/bench_kv_identity.py --out bench/results/kv_identity.json
    python bench/bench_kv_identity.py --report bench/results/kv_identity.json
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = " ".join(f"Fact {i}: the city number {i} has {i * 7 % 13} bridges and {i * 3 % 11} parks." for i in range(60))
PROMPTS = [
    "<|im_start|>user\nWhat is the capital of France? Answer in one sentence.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWrite a Python function that reverses a string.<|im_end|>\n<|im_start|>assistant\n",
    f"<|im_start|>user\n{DOC}\nWhich city has the most parks? Answer briefly.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nList three prime numbers.<|im_end|>\n<|im_start|>assistant\n",
]
LAYOUTS: dict[str, dict[str, Any]] = {
    "split16x32768": {"n_parallel": 16, "n_ctx": 16 * 32768},
    "unified65536_per32768": {"n_parallel": 16, "n_ctx": 65536, "kv_unified": True, "kv_unified_per_slot": 32768},
}


def _server(model: Path, **params: Any) -> tuple[Any, float]:
    import xllamacpp

    p = xllamacpp.CommonParams()
    p.model.path = str(model)
    p.cpuparams.n_threads = p.cpuparams_batch.n_threads = 2
    p.use_jinja = True
    p.verbosity = -1
    for k, v in params.items():
        setattr(p, k, v)
    began = time.perf_counter()
    server = xllamacpp.Server(p)
    return server, time.perf_counter() - began


def _body(prompt: str, slot: int, n: int = 32) -> dict[str, Any]:
    return {
        "prompt": prompt,
        "n_predict": n,
        "temperature": 0.0,
        "top_k": 0,
        "min_p": 0.0,
        "n_probs": 5,
        "post_sampling_probs": False,
        "return_tokens": True,
        "cache_prompt": True,
        "id_slot": slot,
    }


def _decode(url: str, together: bool) -> list[dict[str, Any]]:
    import httpx

    out: list[dict[str, Any]] = [{} for _ in PROMPTS]

    def one(i: int) -> None:
        r = httpx.post(f"{url}/completion", json=_body(PROMPTS[i], i), timeout=600).json()
        probs = [[(t["id"], t["logprob"]) for t in p["top_logprobs"]] for p in r["completion_probabilities"]]
        out[i] = {"tokens": r["tokens"], "prompt_tokens": r.get("tokens_evaluated"), "top5": probs}

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
        if not together:
            t.join()
    for t in threads:
        t.join()
    return out


def _overrun(model: Path) -> list[dict[str, Any]]:
    """Two requests of ~800 tokens each at once in a 1,024-token shared cache, unreserved."""
    import httpx

    server, _ = _server(model, n_parallel=2, n_ctx=1024, kv_unified=True, kv_unified_per_slot=1024)
    url = str(server.listening_address)
    out: list[dict[str, Any]] = [{}, {}]

    def one(i: int) -> None:
        text = f"{DOC[:1200]} Count upward from {i}, one number per line."
        prompt = f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
        body = {**_body(prompt, i, 500), "ignore_eos": True, "n_probs": 0}
        r = httpx.post(f"{url}/completion", json=body, timeout=600)
        j = r.json()
        out[i] = {"status": r.status_code, "error": j.get("error"), "tokens": len(j.get("tokens") or [])}

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    del server
    return out


def _max_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    return max(
        (abs(p[0][1] - q[0][1]) for p, q in zip(a["top5"], b["top5"], strict=False) if p[0][0] == q[0][0]), default=0.0
    )


def _report(path: Path) -> None:
    data = json.loads(path.read_text())
    a, b = (data["layouts"][name] for name in LAYOUTS)
    print(f"commit {data['commit'][:10]}, load {data['load_before']:.2f} -> {data['load_after']:.2f}")
    pairs = [
        ("split vs shared, one at a time", a["one_at_a_time"], b["one_at_a_time"]),
        ("split vs shared, all at once", a["all_at_once"], b["all_at_once"]),
        ("split: one at a time vs all at once", a["one_at_a_time"], a["all_at_once"]),
        ("shared: one at a time vs all at once", b["one_at_a_time"], b["all_at_once"]),
    ]
    for label, x, y in pairs:
        ids = sum(p["tokens"] == q["tokens"] for p, q in zip(x, y, strict=True))
        top5 = sum(p["top5"] == q["top5"] for p, q in zip(x, y, strict=True))
        worst = max(_max_diff(p, q) for p, q in zip(x, y, strict=True))
        print(f"{label}: same ids {ids}/4, same top-5 logprobs {top5}/4, max |d logprob| {worst:.4f}")
    print(f"start: split {a['start_s']:.1f} s, shared {b['start_s']:.1f} s; a full shared cache: {data['overrun']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", type=Path, help="print the comparison of a results file and exit (no runs)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "kv_identity.json")
    args = ap.parse_args()
    if args.report is not None:
        _report(args.report)
        return
    import os
    import subprocess

    from agent_swarm.swarm.backends.local.catalogue import resolve_model

    model = resolve_model("qwen2.5-coder-1.5b", None)[1]
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    data: dict[str, Any] = {"commit": commit.strip(), "model": str(model), "load_before": os.getloadavg()[0]}
    data["layouts"] = {}
    for name, params in LAYOUTS.items():
        server, start_s = _server(model, **params)
        url = str(server.listening_address)
        one = _decode(url, False)
        import httpx

        for i in range(len(PROMPTS)):  # the same empty slots for the second pass
            httpx.post(f"{url}/slots/{i}?action=erase", timeout=60)
        data["layouts"][name] = {"start_s": start_s, "one_at_a_time": one, "all_at_once": _decode(url, True)}
        del server
    data["overrun"] = _overrun(model)
    data["load_after"] = os.getloadavg()[0]
    args.out.write_text(json.dumps(data) + "\n")
    _report(args.out)


if __name__ == "__main__":
    main()
