"""Does PARL teach a tiny orchestrator to parallelise? A CPU experiment on a synthetic fetch task.

The task family: "file X: fetch its K parts" (K = 3..5). Each part is fetched by one sub-agent
(``assign_task(agent="w", task="part i")``); a frozen, rule-based sub-agent fetches ``part 1`` ..
``part 9`` in one step and fails on anything else. The outcome is the download itself: ``r_perf`` =
distinct parts 1..K fetched by completed sub-agents / K, read from the episode record.

The episode budget is 5 critical steps. Fetching in parallel (all K ``assign_task`` calls in one
turn) costs 3 critical steps and gets every part; fetching serially (one call per turn) spends 2
critical steps per part and runs out after 2 parts (r_perf = 2/K). So parallelism pays only through
the outcome and the budget — nothing in the prompt asks for it.

The orchestrator is a tiny random Qwen2 (byte tokenizer) warm-started by SFT on gold transcripts
that are deliberately mixed: 1 parallel for every 3 serial. Then it is trained with the K2.5 loss on
the PARL reward (λ1, λ2 annealed to 0), and again with λ1 = λ2 = 0 from the start (ablation).

    python experiments/parl_fetch.py warmstart   # builds runs/warmstart (SFT)
    swarm train --config experiments/parl_fetch.toml
    swarm train --config experiments/parl_fetch_ablation.toml
    python experiments/parl_fetch.py report      # figure + table from both runs
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from orchestrator.config import SwarmConfig  # noqa: E402
from orchestrator.engine import Orchestrator  # noqa: E402
from orchestrator.prompts import action_specs  # noqa: E402
from orchestrator.rl.trainer import Environment, TrainConfig, load_train_config, sft_example  # noqa: E402
from swarm.backend import Completion, ModelRequest, ToolSpec  # noqa: E402
from swarm.errors import BackendError  # noqa: E402
from swarm.messages import AssistantMessage, Message, ToolCall, UserMessage  # noqa: E402
from swarm.records import AgentDefinition, AgentStatus, EpisodeRecord, Task  # noqa: E402
from swarm.rewards import PARLReward  # noqa: E402
from swarm.testing import FunctionBackend  # noqa: E402

FILES = "abcdefgh"
PARTS = (3, 4, 5)
AGENT = AgentDefinition(name="w", system_prompt="Fetch the part you are given.")
SUBAGENT_MODEL = "fetcher"
_PART = re.compile(r"^part ([1-9])$")


def tasks() -> list[Task]:
    return [
        Task(id=f"{f}{k}", prompt=f"file {f}: fetch its {k} parts", metadata={"parts": k}) for f in FILES for k in PARTS
    ]


def fetcher() -> FunctionBackend:
    """The frozen sub-agent: fetches ``part N`` (N in 1..9) in one step, fails on anything else."""

    def fetch(req: ModelRequest) -> Completion:
        task = next((m.content for m in req.messages if isinstance(m, UserMessage)), "").strip()
        if not _PART.match(task):
            raise BackendError(f"cannot fetch {task[:40]!r}: tasks look like 'part 3'")
        return Completion(text=f"fetched {task}")

    return FunctionBackend(fetch, model=SUBAGENT_MODEL)


def parts_fetched(record: EpisodeRecord) -> set[int]:
    k = int(record.task.metadata.get("parts", 0))
    got = set()
    for r in record.subagent_results:
        m = _PART.match(r.task.strip())
        if r.status is AgentStatus.COMPLETED and m and 1 <= int(m.group(1)) <= k:
            got.add(int(m.group(1)))
    return got


class FetchReward(PARLReward):
    """PARL reward whose r_perf is the fraction of the file's parts that were fetched."""

    async def r_perf(self, record: EpisodeRecord) -> tuple[float, str | None, dict[str, Any], str | None]:
        k = int(record.task.metadata.get("parts", 0))
        got = parts_fetched(record)
        return (len(got) / k if k else 0.0), "parts_fetched", {"fetched": sorted(got), "parts": k}, None


def _assigned(messages: tuple[Message, ...]) -> int:
    return sum(1 for m in messages if isinstance(m, AssistantMessage) for c in m.tool_calls if c.name == "assign_task")


def gold_policy(mode: str) -> FunctionBackend:
    """The gold orchestrator: all parts in one turn (parallel) or one part per turn (serial)."""

    def act(req: ModelRequest) -> Completion:
        user = next(m.content for m in req.messages if isinstance(m, UserMessage))
        k = int(re.search(r"fetch its (\d+) parts", user).group(1))  # type: ignore[union-attr]
        done = _assigned(req.messages)
        if req.tool_choice == "none" or done >= k:
            return Completion(text="done")
        todo = range(done + 1, k + 1) if mode == "parallel" else range(done + 1, done + 2)
        calls = tuple(
            ToolCall(id=f"c{i}", name="assign_task", arguments={"agent": "w", "task": f"part {i}"}) for i in todo
        )
        return Completion(tool_calls=calls)

    return FunctionBackend(act, model=f"gold-{mode}")


def orchestrator_specs() -> tuple[ToolSpec, ...]:
    """The tool specs the engine renders for the orchestrator in this environment."""
    return tuple(action_specs([], [SUBAGENT_MODEL]))


async def gold_transcript(task: Task, mode: str, swarm: SwarmConfig) -> list[Message]:
    """Run the gold policy through the real engine and return the conversation it saw and wrote."""
    gold = gold_policy(mode)
    orch = Orchestrator(gold, swarm, agents=[AGENT], subagent_backend=fetcher())
    record = await orch.run(task)
    last = gold.calls[-1]
    assert record.answer == "done", record
    return [*last.messages, AssistantMessage(content="done")]


def environment(config: TrainConfig, tokenizer: Any) -> Environment:
    """The training environment (``environment = "parl_fetch:environment"`` in the TOML)."""
    return Environment(
        tasks=tasks(),
        agents=[AGENT],
        subagent_backend=fetcher(),
        reward=FetchReward(config.reward),
        tool_specs=orchestrator_specs(),
    )


# -- warm start ---------------------------------------------------------------------------------------


def warmstart(config_path: Path, steps: int = 400, parallel_share: float = 0.25) -> None:
    """SFT a fresh tiny Qwen2 on gold transcripts mixed 1 parallel : 3 serial; save to policy_model."""
    import anyio
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from orchestrator.rl.sft import sft_train
    from orchestrator.rl.tiny import TinyModelSpec, build_tiny_model

    cfg = load_train_config(config_path)
    assert cfg.policy_model is not None
    torch.manual_seed(0)
    out = build_tiny_model(cfg.policy_model, TinyModelSpec(seed=0))
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    specs = orchestrator_specs()

    async def convs() -> tuple[list[list[Message]], list[list[Message]]]:
        par = [await gold_transcript(t, "parallel", cfg.swarm) for t in tasks()]
        ser = [await gold_transcript(t, "serial", cfg.swarm) for t in tasks()]
        return par, ser

    par, ser = anyio.run(convs)
    n_ser = round((1 - parallel_share) / parallel_share)
    examples = [sft_example(tok, c, specs) for c in par] + [sft_example(tok, c, specs) for c in ser] * n_ser
    log = out / "sft_log.jsonl"
    with log.open("w") as f:

        def on_step(step: int, loss: float) -> None:
            f.write(json.dumps({"step": step, "loss": loss}) + "\n")
            f.flush()
            if step % 25 == 0:
                print(f"sft step {step}: loss {loss:.4f}", flush=True)

        sft_train(model, examples, steps=steps, lr=5e-3, batch_size=6, on_step=on_step)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    print(f"warm-started policy written to {out}")


# -- report -------------------------------------------------------------------------------------------

REPORT_KEYS = (
    ("r_perf", "r_perf"),
    ("reward", "reward (PARL total)"),
    ("lambda1", "λ1 = λ2"),
    ("mean_critical_steps", "critical steps / episode"),
    ("mean_total_steps", "total steps / episode"),
    ("mean_parallel_width", "mean parallel width"),
    ("finish_rate", "sub-agent finish rate"),
)


def _window_mean(rows: list[dict[str, Any]], key: str) -> float:
    vals = [float(r.get(key) or 0.0) for r in rows]
    return sum(vals) / len(vals) if vals else float("nan")


def report(window: int = 5) -> str:
    """``parl_fetch.png`` (both runs) and ``parl_fetch_results.md`` (first vs last ``window`` steps)."""
    from orchestrator.rl.plots import plot_compare, read_metrics

    runs = {"PARL (λ annealed)": HERE / "runs" / "parl", "ablation (λ1 = λ2 = 0)": HERE / "runs" / "ablation"}
    runs = {k: v for k, v in runs.items() if (v / "metrics.jsonl").is_file()}
    plot_compare(runs, HERE / "parl_fetch.png")
    lines = []
    for label, run in runs.items():
        rows = read_metrics(run)
        first, last = rows[:window], rows[-window:]
        lines.append(f"### {label}: {len(rows)} steps\n")
        lines.append(f"| metric | first {len(first)} steps | last {len(last)} steps |")
        lines.append("|---|---|---|")
        for key, name in REPORT_KEYS:
            lines.append(f"| {name} | {_window_mean(first, key):.3f} | {_window_mean(last, key):.3f} |")
        lines.append("")
    text = "\n".join(lines)
    (HERE / "parl_fetch_results.md").write_text(text + "\n", encoding="utf-8")
    return text


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "report":
        print(report())
    elif cmd == "warmstart":
        warmstart(HERE / "parl_fetch.toml", steps=int(sys.argv[2]) if len(sys.argv) > 2 else 400)
    else:
        sys.exit(__doc__)
