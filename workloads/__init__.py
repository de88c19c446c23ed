"""Workloads: task generators with their tools and verifiers (τ²-batch, BFCL parallel, wide/deep lookup,
starter, wide research over a generated corpus, single-fact controls, and the train-mix training generator).

Import direction: swarm ← tools ← workloads ← orchestrator (the CLI picks workloads by name).
"""

from agent_swarm.workloads.base import (
    MODES,
    WORKLOADS,
    Episode,
    GoldPolicy,
    Knobs,
    Mode,
    Score,
    Workload,
    episode_for,
    finish_rate,
    get_workload,
    register_workload,
    workload_names,
)
from agent_swarm.workloads.bfcl import BfclWorkload
from agent_swarm.workloads.controls import ControlsWorkload
from agent_swarm.workloads.lookup import DeepLookupWorkload, WideLookupWorkload
from agent_swarm.workloads.research import DeepResearchWorkload, WideResearchWorkload
from agent_swarm.workloads.splits import SPLITS, Split
from agent_swarm.workloads.starter import StarterWorkload
from agent_swarm.workloads.tau2_batch import Tau2BatchWorkload
from agent_swarm.workloads.train_mix import TrainMixWorkload

__all__ = [
    "MODES",
    "SPLITS",
    "WORKLOADS",
    "Episode",
    "GoldPolicy",
    "Knobs",
    "Mode",
    "Score",
    "Split",
    "Workload",
    "episode_for",
    "finish_rate",
    "get_workload",
    "register_workload",
    "workload_names",
]

register_workload(Tau2BatchWorkload.name, Tau2BatchWorkload)
register_workload(BfclWorkload.name, BfclWorkload)
register_workload(WideLookupWorkload.name, WideLookupWorkload)
register_workload(DeepLookupWorkload.name, DeepLookupWorkload)
register_workload(StarterWorkload.name, StarterWorkload)
register_workload(WideResearchWorkload.name, WideResearchWorkload)
register_workload(DeepResearchWorkload.name, DeepResearchWorkload)
register_workload(ControlsWorkload.name, ControlsWorkload)
register_workload(TrainMixWorkload.name, TrainMixWorkload)
