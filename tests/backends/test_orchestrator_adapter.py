"""Which LoRA adapter a local orchestrator runs with: shipped (hash-checked), none, or a file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.adapters import resolve_orchestrator_adapter, shipped_adapter
from agent_swarm.orchestrator.backend_factory import build_backends
from agent_swarm.orchestrator.cli import app
from agent_swarm.swarm.backends.local import QWEN_SHA256, LocalBackend
from agent_swarm.swarm.errors import ConfigError

MODEL = "qwen2.5-coder-0.5b"


def _ship(root: Path, *, default: bool = True, base_sha256: str = QWEN_SHA256, body: bytes = b"lora") -> Path:
    d = root / MODEL
    d.mkdir(parents=True)
    (d / "adapter.gguf").write_bytes(body)
    manifest = {
        "base_model": MODEL,
        "base_sha256": base_sha256,
        "sha256": hashlib.sha256(body).hexdigest(),
        "version": "parl-7",
        "default": default,
    }
    (d / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return d / "adapter.gguf"


def test_the_default_adapter_is_used_unless_the_user_says_none(tmp_path: Path) -> None:
    path = _ship(tmp_path)
    got = resolve_orchestrator_adapter(None, MODEL, tmp_path)
    assert got is not None and (got.path, got.version) == (path, "parl-7")
    assert resolve_orchestrator_adapter("default", MODEL, tmp_path) == got
    assert resolve_orchestrator_adapter("none", MODEL, tmp_path) is None
    # no adapter ships for other models: they run as they are
    assert resolve_orchestrator_adapter(None, "qwen2.5-coder-1.5b", tmp_path) is None


def test_an_opt_in_adapter_runs_only_when_asked_for(tmp_path: Path) -> None:
    path = _ship(tmp_path, default=False)
    assert resolve_orchestrator_adapter(None, MODEL, tmp_path) is None
    got = resolve_orchestrator_adapter("shipped", MODEL, tmp_path)
    assert got is not None and got.path == path
    with pytest.raises(ConfigError, match=r"no trained orchestrator adapter ships for model 'smollm2-135m'"):
        resolve_orchestrator_adapter("shipped", "smollm2-135m", tmp_path)


def test_a_damaged_adapter_file_is_refused_by_hash(tmp_path: Path) -> None:
    path = _ship(tmp_path)
    path.write_bytes(b"lorb")
    with pytest.raises(ConfigError, match=r"has sha256 .* expected .*--orchestrator-adapter none"):
        resolve_orchestrator_adapter(None, MODEL, tmp_path)


def test_an_adapter_trained_on_another_base_model_is_refused(tmp_path: Path) -> None:
    _ship(tmp_path, base_sha256="0" * 64)
    with pytest.raises(ConfigError, match="trained on a model with sha256 0000"):
        resolve_orchestrator_adapter(None, MODEL, tmp_path)


def test_a_malformed_manifest_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / MODEL).mkdir()
    (tmp_path / MODEL / "manifest.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"manifest .* is invalid"):
        shipped_adapter(MODEL, tmp_path)


def test_an_adapter_path_is_used_as_given(tmp_path: Path) -> None:
    ckpt = tmp_path / "step-000004"
    ckpt.mkdir()
    (ckpt / "adapter.gguf").write_bytes(b"x")
    got = resolve_orchestrator_adapter(str(ckpt / "adapter.gguf"), MODEL, tmp_path)
    assert got is not None and (got.path, got.version) == (ckpt / "adapter.gguf", "step-000004")
    with pytest.raises(ConfigError, match=r"neither default, none, shipped nor an existing LoRA \.gguf"):
        resolve_orchestrator_adapter(str(tmp_path / "missing.gguf"), MODEL, tmp_path)


def test_a_local_orchestrator_with_an_adapter_shares_one_engine_with_base_subagents(tmp_path: Path) -> None:
    path = tmp_path / "a.gguf"
    path.write_bytes(b"x")  # nothing starts: only the wiring is checked
    orch, sub = build_backends("local", "smollm2-135m", slots=4, orchestrator_adapter=str(path))
    assert isinstance(orch, LocalBackend) and isinstance(sub, LocalBackend)
    assert orch.engine is sub.engine and orch.engine.lora_adapters == (path,)
    assert (orch.lora_scale, sub.lora_scale) == (1.0, None)  # sub-agents never apply the adapter
    assert orch.engine.slots == 5 and orch.engine.adapter_slots == 1
    assert orch.engine.adapter_version == "a"
    plain, none = build_backends("local", "smollm2-135m", orchestrator_adapter="none")
    assert isinstance(plain, LocalBackend) and none is None and not plain.engine.lora_adapters


def test_an_adapter_needs_the_local_backend() -> None:
    with pytest.raises(ConfigError, match="needs --backend local"):
        build_backends("openai", "m", "http://127.0.0.1:9", orchestrator_adapter="shipped")
    orch, _ = build_backends("openai", "m", "http://127.0.0.1:9", orchestrator_adapter="none")
    assert orch.model == "m"


def test_swarm_run_reports_a_bad_adapter_choice() -> None:
    result = CliRunner().invoke(
        app, ["run", "two capitals", "--backend", "local", "--orchestrator-adapter", "nope.gguf", "-q"]
    )
    assert result.exit_code == 2
    assert "nope.gguf" in result.output and "neither default, none, shipped" in result.output
