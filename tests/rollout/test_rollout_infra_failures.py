"""`swarm rollout` / `swarm run` against a dead or wrong server: say what failed, exit non-zero, and
run the failed episodes again once the server is fixed."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.rollout.episodes import EpisodeEntry, RolloutFailure
from agent_swarm.swarm.rl.export import read_jsonl

runner = CliRunner()

ANSWER = {  # vLLM's shape, token ids and logprobs included, so episodes become trajectories
    "model": "m",
    "prompt_token_ids": [1, 2, 3, 4, 5],
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "4"},
            "token_ids": [52],
            "logprobs": {"content": [{"token": "token_id:52", "logprob": -0.1}]},
        }
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1},
}


class _Server(BaseHTTPRequestHandler):
    mode: list[str]  # ["html"] or ["ok"], switched by the test

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.mode[0] == "html":
            body, kind = b"<html><body>Please log in</body></html>", "text/html"
        else:
            body, kind = json.dumps(ANSWER).encode(), "application/json"
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST


@pytest.fixture
def server() -> Iterator[tuple[str, list[str]]]:
    mode = ["html"]
    srv = ThreadingHTTPServer(("127.0.0.1", 0), type("S", (_Server,), {"mode": mode}))
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", mode
    finally:
        srv.shutdown()
        srv.server_close()


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there now: connections are refused


def _files(tmp_path: Path) -> tuple[Path, Path]:
    tasks = tmp_path / "tasks.jsonl"
    task = {"id": "sum", "prompt": "what is 2+2?", "verifier": "exact", "verifier_args": {"expected": "4"}}
    tasks.write_text(json.dumps(task) + "\n")
    config = tmp_path / "fast.toml"  # fail fast: one retry, 10 ms backoff, 2 s per request
    config.write_text("[backend]\nmax_retries = 1\nretry_base_delay = 0.01\ntimeout = 2\n")
    return tasks, config


def _rollout(url: str, tasks: Path, config: Path, out: Path, *extra: str) -> Result:
    args = ["rollout", "-b", "openai", "--base-url", url, "-m", "m", "-t", str(tasks), "-c", str(config)]
    return runner.invoke(app, [*args, "-o", str(out), "-k", "2", "-q", "--json", *extra])


def test_dead_server_says_what_failed_exits_1_and_a_rerun_after_the_fix_runs_them(
    tmp_path: Path, server: tuple[str, list[str]]
) -> None:
    tasks, config = _files(tmp_path)
    out = tmp_path / "out"
    r = _rollout(_dead_url(), tasks, config, out)
    assert r.exit_code == 1, r.output
    assert "2 of 2 episodes" in r.stderr and "connection failed" in r.stderr and "re-run" in r.stderr
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert (summary["episodes"], summary["infrastructure_failures"], summary["groups_complete"]) == (0, 2, 0)
    failures = read_jsonl(out / "failures.jsonl", RolloutFailure)
    assert [f.kind for f in failures] == ["infrastructure", "infrastructure"]
    assert all(f.record is not None and f.record.status.value == "failed" for f in failures)  # nothing lost

    url, mode = server  # the same directory, the server now works: the failed episodes run again
    mode[0] = "ok"
    again = _rollout(url, tasks, config, out)
    assert again.exit_code == 0, again.stderr
    summary = json.loads(again.stdout.strip().splitlines()[-1])
    assert (summary["episodes_run"], summary["episodes"], summary["trajectories"]) == (2, 2, 2)
    assert summary["mean_r_perf"] == 1.0
    entries = read_jsonl(out / "episodes.jsonl", EpisodeEntry)
    assert sorted(e.sample_index for e in entries) == [0, 1]  # nothing duplicated


def test_a_server_answering_html_is_reported_and_keep_flag_records_without_rerunning(
    tmp_path: Path, server: tuple[str, list[str]]
) -> None:
    url, mode = server
    tasks, config = _files(tmp_path)
    r = _rollout(url, tasks, config, tmp_path / "a")
    assert r.exit_code == 1
    assert "not JSON" in r.stderr and "Please log in" in r.stderr and "OpenAI-compatible" in r.stderr
    kept = _rollout(url, tasks, config, tmp_path / "b", "--keep-infra-failures")
    assert kept.exit_code == 1  # recorded, but nothing succeeded
    assert "--keep-infra-failures" in kept.stderr
    assert len(read_jsonl(tmp_path / "b" / "episodes.jsonl", EpisodeEntry)) == 2
    mode[0] = "ok"
    rerun = _rollout(url, tasks, config, tmp_path / "b", "--keep-infra-failures")
    assert rerun.exit_code == 0
    assert json.loads(rerun.stdout.strip().splitlines()[-1])["episodes_run"] == 0


def test_swarm_run_prints_the_connection_error_on_stderr(tmp_path: Path) -> None:
    _, config = _files(tmp_path)
    url = _dead_url()
    args = ["run", "-b", "openai", "--base-url", url, "-c", str(config), "-q", "-o", str(tmp_path / "runs")]
    r = runner.invoke(app, [*args, "-m", "m", "hello"])
    assert r.exit_code == 1  # probed once before the first task: no record, one line naming the server
    assert "could not be reached" in r.stderr and "error:" in r.stderr and url in r.stderr
    assert not (tmp_path / "runs").exists()
    # Without --model the served model is looked up first: the refused connection is what is reported.
    r = runner.invoke(app, [*args, "hello"])
    assert r.exit_code == 1
    assert "could not be reached" in r.stderr and "did not list one" not in r.stderr
