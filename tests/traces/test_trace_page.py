"""`swarm traces show ID --html` (one self-contained page, drawn in headless Chromium) and
`swarm traces push ID` (spans recorded while no Jaeger listened, sent to one started later)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app

runner = CliRunner()
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="needs chromium (scripts/dev-setup.sh installs it as root: apt-get install chromium)"
)
CRIT_RED = (214, 39, 40)  # --crit in the page's style
NODE_BLUE = (76, 120, 168)  # --node


def _demo(tmp_path: Path, *extra: str) -> str:
    r = runner.invoke(app, ["run", "--demo", "capitals", "-q", "--json-summary", "-o", str(tmp_path), *extra])
    assert r.exit_code == 0, r.output
    episode_id: str = json.loads(r.stdout)["episode_id"]
    return episode_id


def _page(tmp_path: Path) -> tuple[str, Path]:
    eid = _demo(tmp_path)
    r = runner.invoke(app, ["traces", "show", eid[:6], "--html", "-o", str(tmp_path)])
    assert r.exit_code == 0, r.output
    page = Path(r.stdout.strip())
    assert page == (tmp_path / eid / "episode.html").resolve()
    return eid, page


def test_the_page_is_one_self_contained_file(tmp_path: Path, cli_env: None) -> None:
    _, page = _page(tmp_path)
    html = page.read_text()
    assert page.stat().st_mode & 0o777 == 0o600  # like the record it shows
    # Nothing is fetched: no external scripts, styles, images or fonts; a CSP forbids any request.
    assert not re.search(r"""(?:src|href)\s*=|<link|@import|url\(""", html)
    assert "default-src 'none'" in html
    data = json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S).group(1))
    assert [a["name"] for a in data["critical_path"]] == ["orchestrator", "researcher", "orchestrator"]
    assert data["critical_path"][1]["id"] == "researcher-0-8" and data["critical_steps"] == 5


def test_text_from_the_model_cannot_close_the_data_island(tmp_path: Path) -> None:
    from agent_swarm.orchestrator.cli.trace_html import episode_page
    from agent_swarm.swarm.records import EpisodeRecord, EpisodeStatus, Task

    evil = "</script><script>document.title='owned'</script>"
    html = episode_page(
        EpisodeRecord(episode_id="e", task=Task(prompt=evil), status=EpisodeStatus.COMPLETED, answer=evil)
    )
    assert evil not in html and html.count("</script>") == 2


def _chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
    ]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=90, check=False)


@pytest.mark.slow
@needs_chromium
def test_chromium_draws_the_stages_the_critical_path_the_gantt_and_a_transcript(tmp_path: Path) -> None:
    _, page = _page(tmp_path / "rec")
    dom = _chromium("--dump-dom", page.as_uri(), profile=tmp_path / "p1").stdout
    # The stage DAG: both stages, a node per agent (1 + 9 + 1), the critical ones marked.
    assert "stage 0 · subagents · +4" in dom and "stage 1 · answer · +1" in dom
    assert len(re.findall(r'<g class="node[^"]*" data-agent=', dom)) == 11
    assert re.findall(r'<g class="node crit" data-agent="([^"]+)"', dom) == [
        "orchestrator@0",
        "researcher-0-8",
        "orchestrator@1",
    ]
    assert len(re.findall(r'class="edge crit"', dom)) == 2
    # The critical path list and its total; the Gantt's critical bars (1 + 3 + 1 steps).
    assert re.findall(r'<li class="crit"[^>]*>([^<]+)</li>', dom) == [
        "orchestrator · stage 0 · 1 critical step",
        "researcher-0-8 · stage 0 · 3 critical steps",
        "orchestrator · stage 1 · 1 critical step",
    ]
    assert "= critical steps 5/16" in dom
    assert len(re.findall(r'class="bar crit"', dom)) == 5
    assert len(re.findall(r'<g class="row" data-agent=', dom)) == 11
    # The transcript panel opens on the critical sub-agent: its task and its failing tool call.
    assert "researcher-0-8 · failed · on the critical path" in dom
    assert "Find the capital of Atlantis." in dom and "lookup_capital" in dom


@pytest.mark.slow
@needs_chromium
def test_the_screenshot_shows_the_critical_path_in_red_and_the_sub_agents(tmp_path: Path) -> None:
    image = pytest.importorskip("PIL.Image")
    _, page = _page(tmp_path / "rec")
    shot = tmp_path / "shot.png"
    r = _chromium("--window-size=1400,1000", f"--screenshot={shot}", page.as_uri(), profile=tmp_path / "p2")
    assert shot.is_file(), r.stderr[-2000:]
    img: Any = image.open(shot).convert("RGB")
    counts = {CRIT_RED: 0, NODE_BLUE: 0}
    for n, pixel in img.getcolors(maxcolors=1 << 24):
        if pixel in counts:
            counts[pixel] = n
    # Red: the critical nodes' outlines, edges, the Gantt's critical bars and the path list; blue: 9 nodes
    # and 8 sub-agents' bars. An empty or broken page (script error) has neither.
    assert counts[CRIT_RED] > 5_000, counts
    assert counts[NODE_BLUE] > 20_000, counts


def test_push_sends_a_recorded_trace_to_a_receiver_started_later(
    tmp_path: Path, cli_env: None, otlp_http: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")  # the run exports nothing: only the file
    eid = _demo(tmp_path)
    monkeypatch.delenv("OTEL_TRACES_EXPORTER")
    assert otlp_http.received.requests == []
    r = runner.invoke(app, ["traces", "push", eid[:6], "-o", str(tmp_path), "--otlp-endpoint", otlp_http.url])
    assert r.exit_code == 0, r.output
    spans = otlp_http.received.spans()
    assert f"pushed {len(spans)} spans of episode {eid}" in r.stdout and len(spans) > 10
    assert otlp_http.received.paths == ["/v1/traces"]
    record = json.loads((tmp_path / eid / "episode.json").read_text())
    assert {s.trace_id.hex() for _, s in spans} == {record["trace_id"]}
    assert f"/trace/{record['trace_id']}" in r.stdout


def test_push_over_grpc(tmp_path: Path, cli_env: None, otlp_grpc: Any) -> None:
    eid = _demo(tmp_path, "--no-trace-content")
    args = ["traces", "push", eid, "-o", str(tmp_path), "--otlp-endpoint", otlp_grpc.url, "--otlp-protocol", "grpc"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert len(otlp_grpc.received.spans()) > 10


def test_push_to_nothing_is_exit_1_with_the_fix(tmp_path: Path, cli_env: None) -> None:
    eid = _demo(tmp_path)
    r = runner.invoke(app, ["traces", "push", eid, "-o", str(tmp_path), "--otlp-endpoint", "http://127.0.0.1:9"])
    assert r.exit_code == 1
    assert "could not be reached" in r.stderr and "start Jaeger" in r.stderr


def test_push_without_a_trace_file_is_bad_input(tmp_path: Path, cli_env: None) -> None:
    eid = _demo(tmp_path, "--no-trace-file")
    r = runner.invoke(app, ["traces", "push", eid, "-o", str(tmp_path)])
    assert r.exit_code == 2 and "no trace.jsonl" in r.stderr
