"""Orchestrator-only RL training: the loop that runs orchestrator episodes and updates the policy.

The trainer (:mod:`.trainer`, ``swarm train``), the SFT warm start (:mod:`.sft`), gold demonstrations
(:mod:`.gold`), LoRA policies (:mod:`.lora`), weight pushes into vLLM (:mod:`.vllm_sync`), plots and the
tiny test model. They need the ``rl`` extra (torch, transformers) and are imported from their modules.
The maths they use — losses, advantages, schedules, Toggle, the PARL reward, trajectories — has one home,
:mod:`swarm.rl`.
"""

__all__: list[str] = []
