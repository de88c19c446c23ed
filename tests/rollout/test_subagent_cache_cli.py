"""`--subagent-cache DIR` / `--no-subagent-cache` on swarm rollout and swarm eval (issue 28): hits and
misses in every record and in the summary, a cached run equal to an uncached one, the flag that turns
a config's cache off. Gold policies and the scripted demo stand in for frozen sub-agents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.eval_raw import RAW_FILE, read_raw
from agent_swarm.swarm.rl.export import read_jsonl

runner = CliRunner()
STARTER = ["-w", "starter", "-b", "gold", "-n", "2", "--temperature", "0", "--quiet", "--json"]


def rollout(out: Path, *extra: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    r = runner.invoke(app, ["rollout", *STARTER, "-k", "3", "-o", str(out), *extra])
    assert r.exit_code == 0, r.output
    entries = sorted(read_jsonl(out / "episodes.jsonl"), key=lambda e: (e["group_id"], e["sample_index"]))
    return json.loads(r.stdout.strip().splitlines()[-1]), entries


def outcome(entries: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (
            e["group_id"],
            e["sample_index"],
            e["record"]["answer"],
            e["record"]["reward"]["r_perf"],
            [(s["task"], s["report"]) for st in e["record"]["stages"] for s in st["subagents"]],
        )
        for e in entries
    ]


def test_rollout_counts_hits_and_misses_and_a_cached_run_equals_an_uncached_one(tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    plain, plain_eps = rollout(tmp_path / "plain")
    cold, cold_eps = rollout(tmp_path / "cold", "--subagent-cache", cache)
    warm, warm_eps = rollout(tmp_path / "warm", "--subagent-cache", cache)
    assert plain["subagent_cache"] == {} and all("subagent_cache" not in e["record"]["metadata"] for e in plain_eps)
    calls = sum(len(o[4]) for o in outcome(plain_eps))
    # the first cached run computes each distinct sub-task once: the K = 3 samples of a task share them
    assert cold["subagent_cache"]["misses"] == calls // 3 and cold["subagent_cache"]["hits"] == calls - calls // 3
    assert warm["subagent_cache"] == {"hits": calls, "misses": 0, "bypassed": 0}
    per_episode = [e["record"]["metadata"]["subagent_cache"] for e in warm_eps]
    assert sum(c["hits"] for c in per_episode) == calls and all(c["misses"] == 0 for c in per_episode)
    assert outcome(cold_eps) == outcome(warm_eps) == outcome(plain_eps)
    assert (plain["mean_reward"], plain["mean_r_perf"]) == (warm["mean_reward"], warm["mean_r_perf"])


def test_a_config_cache_is_used_and_the_flag_turns_it_off(tmp_path: Path) -> None:
    cfg = tmp_path / "swarm.toml"
    cfg.write_text(f'[backend]\nsubagent_cache = "{tmp_path / "cache"}"\n')
    on, _ = rollout(tmp_path / "on", "-c", str(cfg))
    assert on["subagent_cache"]["misses"] > 0
    off, eps = rollout(tmp_path / "off", "-c", str(cfg), "--no-subagent-cache")
    assert off["subagent_cache"] == {} and all("subagent_cache" not in e["record"]["metadata"] for e in eps)
    both = runner.invoke(
        app, ["rollout", *STARTER, "-o", str(tmp_path / "x"), "--subagent-cache", "c", "--no-subagent-cache"]
    )
    assert both.exit_code == 2 and "contradict each other" in both.stderr


def test_sampled_subagents_pass_the_cache_by_and_the_rollout_says_so(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "prompt": "capitals"}\n')
    args = ["rollout", "-b", "scripted", "-t", str(tasks), "-k", "2", "--quiet", "--json"]
    r = runner.invoke(app, [*args, "-o", str(tmp_path / "o"), "--subagent-cache", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    assert "every call will pass it by" in r.stderr
    counts = json.loads(r.stdout.strip().splitlines()[-1])["subagent_cache"]
    assert counts["hits"] == counts["misses"] == 0 and counts["bypassed"] > 0
    greedy = tmp_path / "greedy.toml"
    greedy.write_text("[swarm.subagent_sampling]\ntemperature = 0\n")
    for out in ("g1", "g2"):
        r = runner.invoke(
            app, [*args, "-c", str(greedy), "-o", str(tmp_path / out), "--subagent-cache", str(tmp_path / "c")]
        )
        assert r.exit_code == 0, r.output
        assert "pass it by" not in r.stderr
    counts = json.loads(r.stdout.strip().splitlines()[-1])["subagent_cache"]
    assert counts["misses"] == counts["bypassed"] == 0 and counts["hits"] > 0


def evaluate(root: Path, run_id: str, *extra: str, greedy: bool = True, config_cache: str = "") -> dict[str, Any]:
    args = ["eval", "-w", "starter", "-b", "gold", "-n", "2", "--mode", "swarm", "-o", str(root), "--run-id", run_id]
    cfg = root / f"{run_id}.toml"
    # the gold workers stand in for greedy sub-agents (a model backend's eval is seeded anyway)
    cfg.write_text(
        ("[swarm.subagent_sampling]\ntemperature = 0\n" if greedy else "")
        + (f'[backend]\nsubagent_cache = "{config_cache}"\n' if config_cache else "")
    )
    r = runner.invoke(app, [*args, "-c", str(cfg), "--quiet", "--json", *extra])
    assert r.exit_code == 0, r.output
    assert ("pass it by" in r.stderr) == (not greedy and "--subagent-cache" in extra)
    report: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return report


def test_eval_counts_hits_and_misses_per_episode_and_per_arm(tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    plain = evaluate(tmp_path, "plain")
    cold = evaluate(tmp_path, "cold", "--subagent-cache", cache)
    warm = evaluate(tmp_path, "warm", "--subagent-cache", cache)
    assert plain["summaries"]["swarm"]["subagent_cache"] == {}
    calls = sum(row["subagents"] for row in plain["rows"])
    assert cold["summaries"]["swarm"]["subagent_cache"] == {"hits": 0, "misses": calls, "bypassed": 0}
    assert warm["summaries"]["swarm"]["subagent_cache"] == {"hits": calls, "misses": 0, "bypassed": 0}
    raw, damaged = read_raw(tmp_path / "warm" / RAW_FILE)
    assert damaged == 0
    assert sum(r.subagent_cache["hits"] for r in raw) == calls
    assert [(r["task_id"], r["metric"]) for r in warm["rows"]] == [(r["task_id"], r["metric"]) for r in plain["rows"]]
    records = list((tmp_path / "warm").rglob("episode.json"))
    assert records and all(json.loads(p.read_text())["metadata"]["subagent_cache"]["hits"] > 0 for p in records)
    via_config = evaluate(tmp_path, "config", config_cache=cache)
    assert via_config["summaries"]["swarm"]["subagent_cache"] == {"hits": calls, "misses": 0, "bypassed": 0}
    off = evaluate(tmp_path, "off", "--no-subagent-cache", config_cache=cache)
    assert off["summaries"]["swarm"]["subagent_cache"] == {}
    sampled = evaluate(tmp_path, "sampled", "--subagent-cache", cache, greedy=False)
    assert sampled["summaries"]["swarm"]["subagent_cache"] == {"hits": 0, "misses": 0, "bypassed": calls}
