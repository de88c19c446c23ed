"""Workloads: task generators with their tools and verifiers (τ²-batch, BFCL parallel, wide/deep lookup,
starter, wide research over a generated corpus, single-fact controls, and the train-mix training generator).

Import direction: swarm ← tools ← workloads ← orchestrator (the CLI picks workloads by name).
"""

from agent_swarm.workloads import base
from agent_swarm.workloads.base import *  # noqa: F403  (its __all__, exported here too)
from agent_swarm.workloads.bfcl import BfclWorkload
from agent_swarm.workloads.controls import ControlsWorkload
from agent_swarm.workloads.lookup import DeepLookupWorkload, WideLookupWorkload
from agent_swarm.workloads.research import DeepResearchWorkload, WideResearchWorkload
from agent_swarm.workloads.splits import SPLITS, Split
from agent_swarm.workloads.starter import StarterWorkload
from agent_swarm.workloads.tau2_batch import Tau2BatchWorkload
from agent_swarm.workloads.train_mix import TrainMixWorkload

__all__ = ["SPLITS", "Split"]
__all__ += base.__all__

base.register_workload(Tau2BatchWorkload.name, Tau2BatchWorkload)
base.register_workload(BfclWorkload.name, BfclWorkload)
base.register_workload(WideLookupWorkload.name, WideLookupWorkload)
base.register_workload(DeepLookupWorkload.name, DeepLookupWorkload)
base.register_workload(StarterWorkload.name, StarterWorkload)
base.register_workload(WideResearchWorkload.name, WideResearchWorkload)
base.register_workload(DeepResearchWorkload.name, DeepResearchWorkload)
base.register_workload(ControlsWorkload.name, ControlsWorkload)
base.register_workload(TrainMixWorkload.name, TrainMixWorkload)
