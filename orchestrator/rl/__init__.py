"""Orchestrator-only RL training: the loop that runs orchestrator episodes and updates the policy.

The trainer (:mod:`.trainer`, ``swarm train``: a :class:`~.trainer.Trainer` composing the config
:mod:`.config`, the environment :mod:`.environment`, the policy :mod:`.policy`, training sequences
:mod:`.sequences`, the pure update :mod:`.update`, checkpoints :mod:`.checkpoint`, metrics :mod:`.metrics`
and serving chosen by name :mod:`.serving`), the SFT warm start (:mod:`.sft`), gold demonstrations
(:mod:`.gold`), LoRA policies (:mod:`.lora`), weight pushes into vLLM (:mod:`.vllm_sync`), plots and the
tiny test model. They need the ``rl`` extra (torch, transformers) and are imported from their modules.
The maths they use — losses, advantages, schedules, Toggle, the PARL reward, trajectories — has one home,
:mod:`agent_swarm.swarm.rl`.
"""

__all__: list[str] = []
