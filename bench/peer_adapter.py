"""agent-swarm's full runtime in the peer suite, through its public API only.

The peer suite's own adapter (``impls/ours_swarm.py`` in the suite) with the imports of the one
import name, ``agent_swarm`` (issue 27.6; the suite's copy still imports ``orchestrator``, ``swarm``
and ``tools``, which the installed distribution no longer provides). From the suite's folder:

    PYTHONPATH=<checkout>:<checkout>/bench python run_suite.py --impls anyio-taskgroup \
        --impl ours=peer_adapter:make --ns 1024

The orchestrator and the sub-agents are function backends whose every model call goes through
`sim`; the sub-agents' one tool (`work`) calls `sim.tool`. Sub-agent i of stage t is told its
(stage, agent, steps) in its task text. The peer workload has s LLM calls and s tool calls per
sub-agent; our loop ends a sub-agent with an answer turn, so each sub-agent makes one extra model
call after its last tool call that does not go through `sim` (zero latency). That extra step is
runtime work the others do not do: it counts against us.

Budgets, the DAG, records and token bookkeeping stay on (whatever `Orchestrator.run` does by
default); tracing stays at the library default (no SDK installed: the OTel API's no-op tracer).
"""

from __future__ import annotations

from workload import Sim, Workload

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.messages import ToolCall
from agent_swarm.swarm.records import AgentDefinition
from agent_swarm.tools import Tool


class OursSwarm:
    name = "ours-swarm"

    def prepare(self, w: Workload) -> None:
        self.cfg = SwarmConfig(
            max_critical_steps=100_000,
            max_subagents_per_stage=max(1, w.n_agents),
            max_concurrency=max(1, w.n_agents),
            max_subagent_steps=w.max_steps + 2,
            subagent_timeout_s=600,
        )

    async def run_episode(self, w: Workload, sim: Sim) -> object:
        stage_no = [0]

        class Orch:
            model = "sim-orchestrator"

            async def complete(self, request: ModelRequest) -> Completion:
                t = stage_no[0]
                await sim.orchestrator_llm(t)
                stage_no[0] += 1
                if t >= w.stages:
                    return Completion(text="done")
                calls = tuple(
                    ToolCall(
                        id=f"c{t}_{i}", name="assign_task", arguments={"agent": "w", "task": w.subagent_input(t, i)}
                    )
                    for i in range(w.n_agents)
                )
                return Completion(tool_calls=calls)

        class Sub:
            model = "sim-subagent"

            async def complete(self, request: ModelRequest) -> Completion:
                msgs = request.messages
                task = next(m.content for m in msgs if m.role == "user")
                stage, agent, steps = Workload.parse_subagent_input(task)
                done = sum(1 for m in msgs if m.role == "assistant")
                if done >= steps:
                    return Completion(text=f"report {stage}/{agent}")
                await sim.subagent_llm(stage, agent, done)
                return Completion(
                    tool_calls=(ToolCall(id=f"t{done}", name="work", arguments={"task": task, "step": done}),)
                )

        async def work(task: str, step: int) -> str:
            """One unit of simulated work."""
            stage, agent, _ = Workload.parse_subagent_input(task)
            return await sim.tool(stage, agent, step)

        orch = Orchestrator(
            Orch(),
            self.cfg,
            tools=[Tool(work)],
            agents=[AgentDefinition(name="w", system_prompt="work", tools=("work",))],
            subagent_backend=Sub(),
        )
        record = await orch.run("benchmark")
        if str(record.status) not in ("completed", "EpisodeStatus.completed"):
            raise RuntimeError(f"episode ended {record.status}: {record.error}")
        return record


def make() -> OursSwarm:
    return OursSwarm()
