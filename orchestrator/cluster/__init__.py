"""Scale out on Ray: rollouts over many actors, cluster-wide limits, very wide stages.

Nothing here imports Ray until a cluster is used; without the ``ray`` extra the classes raise a
:class:`~agent_swarm.swarm.errors.ConfigError` that says how to install it.

* :class:`RayExecutor` — ``collect_rollouts(..., executor=RayExecutor(...))`` (``swarm rollout --ray``);
* :class:`RayPlacement` — ``Orchestrator(..., placement=RayPlacement(kit))``: stages too wide for one
  event loop run their sub-agents on several actors;
* :class:`ClusterLimits` / :class:`SlotPool` — the sub-agent cap and each endpoint's request cap held
  across every process of the cluster;
* :func:`remote_factory` / :class:`Recipe` — objects (backends, tools) built where they are used.
"""

from agent_swarm.orchestrator.cluster._ray import RayCluster
from agent_swarm.orchestrator.cluster.executor import RayExecutor
from agent_swarm.orchestrator.cluster.placement import RayPlacement
from agent_swarm.orchestrator.cluster.recipe import FactoryRecipe, Recipe, remote_factory
from agent_swarm.orchestrator.cluster.slots import ClusterLimits, SlotPool

__all__ = [
    "ClusterLimits",
    "FactoryRecipe",
    "RayCluster",
    "RayExecutor",
    "RayPlacement",
    "Recipe",
    "SlotPool",
    "remote_factory",
]
