"""Does PARL teach a tiny orchestrator to parallelise? A CPU experiment on a synthetic fetch task.

The task family: "file X: fetch its K parts" (K = 3..5). Each part is fetched by one sub-agent
(``assign_task(agent="w", task="X part i")``); a frozen, rule-based sub-agent fetches an existing part
of an existing file in one step and **fails on anything else** (a part beyond K, an unknown file). The
outcome is the download itself: ``r_perf`` = distinct parts 1..K of X fetched by completed sub-agents
/ K, read from the episode record.

The episode budget is 5 critical steps. Fetching in parallel (all K ``assign_task`` calls in one
turn) costs 3 critical steps and gets every part; fetching serially (one call per turn) spends 2
critical steps per part and runs out after 2 parts (r_perf = 2/K). So parallelism pays only through
the outcome and the budget — nothing in the prompt asks for it.

Fan-out is measured exactly, not as a mean width: an episode has an *exact fan-out* when it assigned
each of the K parts once and nothing else; *over-assignment* counts assignments beyond that (parts
that do not exist, other files, repeats). Training files (24) and held-out files (12, never seen in
training) are disjoint; ``eval`` scores a trained policy on the held-out files over several seeds.

The orchestrator is a tiny random Qwen2 (byte tokenizer) warm-started by SFT on gold transcripts
that are deliberately mixed: 1 parallel for every 3 serial. Then it is trained with the K2.5 loss on
the PARL reward (λ1, λ2 annealed to 0), and again with λ1 = λ2 = 0 from the start (ablation).

    python experiments/parl_fetch.py warmstart [SEED]       # builds runs/s<SEED>/warmstart (SFT)
    python experiments/parl_fetch.py configs SEED           # runs/s<SEED>/{parl,ablation}.toml
    swarm train --config experiments/runs/s0/parl.toml
    swarm train --config experiments/runs/s0/ablation.toml
    python experiments/parl_fetch.py eval                   # held-out files, every run, 3 sampling seeds
    python experiments/parl_fetch.py report                 # figure + tables from all runs

``experiments/run_parl_fetch.sh SEEDS`` does all of it.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from agent_swarm.orchestrator.engine import Orchestrator  # noqa: E402
from agent_swarm.orchestrator.prompts import action_specs  # noqa: E402
from agent_swarm.orchestrator.rl.config import TrainConfig, load_train_config  # noqa: E402
from agent_swarm.orchestrator.rl.environment import Environment  # noqa: E402
from agent_swarm.orchestrator.rl.sequences import sft_example  # noqa: E402
from agent_swarm.orchestrator.rollout.collection import collect_rollouts  # noqa: E402
from agent_swarm.orchestrator.rollout.config import RolloutConfig  # noqa: E402
from agent_swarm.orchestrator.rollout.episodes import EpisodeEntry, orchestrator_factory  # noqa: E402
from agent_swarm.swarm.backend import Completion, ModelRequest, ToolSpec  # noqa: E402
from agent_swarm.swarm.config import SwarmConfig  # noqa: E402
from agent_swarm.swarm.errors import BackendError  # noqa: E402
from agent_swarm.swarm.messages import AssistantMessage, Message, ToolCall, UserMessage  # noqa: E402
from agent_swarm.swarm.records import AgentDefinition, AgentStatus, EpisodeRecord, Task  # noqa: E402
from agent_swarm.swarm.rl.export import read_jsonl  # noqa: E402
from agent_swarm.swarm.rl.rewards import PARLReward  # noqa: E402
from agent_swarm.swarm.testing import FunctionBackend  # noqa: E402

PARTS = (3, 4, 5)
AGENT = AgentDefinition(name="w", system_prompt="Fetch the part you are given.")
SUBAGENT_MODEL = "fetcher"
_ASSIGNMENT = re.compile(r"^(\w+) part (\d+)$")


def _files(prefix: str, n: int) -> dict[str, int]:
    """``n`` file names with their part counts, cycling through :data:`PARTS`."""
    return {f"{prefix}{i:02d}": PARTS[i % len(PARTS)] for i in range(n)}


TRAIN_FILES = _files("t", 24)
TEST_FILES = _files("h", 12)  # held out: never seen in training
FILES = {**TRAIN_FILES, **TEST_FILES}


def tasks(split: str = "train") -> list[Task]:
    files = TRAIN_FILES if split == "train" else TEST_FILES
    return [
        Task(id=f, prompt=f"file {f}: fetch its {k} parts", metadata={"file": f, "parts": k, "split": split})
        for f, k in files.items()
    ]


def fetcher() -> FunctionBackend:
    """The frozen sub-agent: fetches ``"<file> part <i>"`` for an existing part, fails on anything else."""

    def fetch(req: ModelRequest) -> Completion:
        task = next((m.content for m in req.messages if isinstance(m, UserMessage)), "").strip()
        m = _ASSIGNMENT.match(task)
        if not m:
            raise BackendError(f"cannot fetch {task[:40]!r}: tasks look like 'FILE part 3'")
        name, part = m.group(1), int(m.group(2))
        if name not in FILES:
            raise BackendError(f"no file {name!r}")
        if not 1 <= part <= FILES[name]:
            raise BackendError(f"file {name} has parts 1..{FILES[name]}, not {part}")
        return Completion(text=f"fetched {task}")

    return FunctionBackend(fetch, model=SUBAGENT_MODEL)


def fanout(record: EpisodeRecord) -> dict[str, Any]:
    """Parts fetched, assignments, exact fan-out and over-assignment of one episode."""
    name = str(record.task.metadata.get("file", ""))
    k = int(record.task.metadata.get("parts", 0))
    wanted = {(name, i) for i in range(1, k + 1)}
    assigned = [r.task.strip() for r in record.subagent_results]
    assigned += [
        str(t.call.arguments.get("task", "")).strip()
        for s in record.stages
        for t in s.tool_results
        if t.call.name == "assign_task" and t.is_error  # refused by the engine: still an assignment
    ]
    keys = []
    for a in assigned:
        m = _ASSIGNMENT.match(a)
        keys.append((m.group(1), int(m.group(2))) if m else (a, -1))
    useful = set(keys) & wanted
    fetched = set()
    for r in record.subagent_results:
        m = _ASSIGNMENT.match(r.task.strip())
        if r.status is AgentStatus.COMPLETED and m and (m.group(1), int(m.group(2))) in wanted:
            fetched.add(int(m.group(2)))
    extra = len(keys) - len(useful)
    return {
        "fetched": sorted(fetched),
        "parts": k,
        "assigned": len(keys),
        "over_assigned": extra,
        "over_assignment": extra > 0,
        "exact_fanout": extra == 0 and len(useful) == k,
    }


def parts_fetched(record: EpisodeRecord) -> set[int]:
    return set(fanout(record)["fetched"])


class FetchReward(PARLReward):
    """PARL reward whose r_perf is the fraction of the file's parts that were fetched."""

    async def r_perf(self, record: EpisodeRecord) -> tuple[float, str | None, dict[str, Any], str | None]:
        f = fanout(record)
        k = f["parts"]
        return (len(f["fetched"]) / k if k else 0.0), "parts_fetched", f, None


def _assigned(messages: tuple[Message, ...]) -> int:
    return sum(1 for m in messages if isinstance(m, AssistantMessage) for c in m.tool_calls if c.name == "assign_task")


def gold_policy(mode: str) -> FunctionBackend:
    """The gold orchestrator: all parts in one turn (parallel) or one part per turn (serial)."""

    def act(req: ModelRequest) -> Completion:
        user = next(m.content for m in req.messages if isinstance(m, UserMessage))
        m = re.search(r"file (\w+): fetch its (\d+) parts", user)
        assert m is not None
        name, k = m.group(1), int(m.group(2))
        done = _assigned(req.messages)
        if req.tool_choice == "none" or done >= k:
            return Completion(text="done")
        todo = range(done + 1, k + 1) if mode == "parallel" else range(done + 1, done + 2)
        calls = tuple(
            ToolCall(id=f"c{i}", name="assign_task", arguments={"agent": "w", "task": f"{name} part {i}"}) for i in todo
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
        tasks=tasks("train"),
        agents=[AGENT],
        subagent_backend=fetcher(),
        reward=FetchReward(config.reward),
        tool_specs=orchestrator_specs(),
    )


# -- runs per seed ------------------------------------------------------------------------------------

RUNS = HERE / "runs"
VARIANTS = {"parl": "parl_fetch.toml", "ablation": "parl_fetch_ablation.toml"}


def run_dir(seed: int, variant: str) -> Path:
    return RUNS / f"s{seed}" / variant


def write_configs(seed: int) -> dict[str, Path]:
    """``runs/s<seed>/{parl,ablation}.toml``: the base configs with this seed's warm start, run dir and seed."""
    import tomllib

    out = {}
    for variant, base in VARIANTS.items():
        data = tomllib.loads((HERE / base).read_text(encoding="utf-8"))
        lines = [
            f'run_dir = "{run_dir(seed, variant)}"',
            f'policy_model = "{RUNS / f"s{seed}" / "warmstart"}"',
            f"seed = {seed}",
            f'environment = "{data["environment"]}"',
        ]
        body = (HERE / base).read_text(encoding="utf-8").splitlines()
        skip = ("run_dir", "policy_model", "seed", "environment")
        keep = [x for x in body if not any(x.startswith(k + " ") or x.startswith(k + "=") for k in skip)]
        path = RUNS / f"s{seed}" / f"{variant}.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines + keep) + "\n", encoding="utf-8")
        out[variant] = path
    return out


# -- warm start ---------------------------------------------------------------------------------------


def warmstart(seed: int = 0, steps: int = 400, parallel_share: float = 0.25) -> Path:
    """SFT a fresh tiny Qwen2 (init seed ``seed``) on gold transcripts of the *training* files, mixed
    1 parallel : 3 serial; written to ``runs/s<seed>/warmstart``."""
    import anyio
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agent_swarm.orchestrator.rl.sft import sft_train
    from agent_swarm.orchestrator.rl.tiny import TinyModelSpec, build_tiny_model

    cfg = load_train_config(write_configs(seed)["parl"])
    assert cfg.policy_model is not None
    torch.manual_seed(seed)
    out = build_tiny_model(cfg.policy_model, TinyModelSpec(seed=seed))
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    specs = orchestrator_specs()

    async def convs() -> tuple[list[list[Message]], list[list[Message]]]:
        par = [await gold_transcript(t, "parallel", cfg.swarm) for t in tasks("train")]
        ser = [await gold_transcript(t, "serial", cfg.swarm) for t in tasks("train")]
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

        sft_train(model, examples, steps=steps, lr=5e-3, batch_size=6, seed=seed, on_step=on_step)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    print(f"warm-started policy written to {out}")
    return out


# -- held-out evaluation -----------------------------------------------------------------------------


def evaluate(policy_dir: Path, *, seeds: tuple[int, ...] = (0, 1, 2), temperature: float = 1.0) -> dict[str, Any]:
    """The policy on the held-out files: K=4 samples per task and seed, at one fixed temperature."""
    import anyio

    from agent_swarm.swarm.backends.transformers_backend import TransformersBackend

    cfg = load_train_config(HERE / VARIANTS["parl"])
    policy = TransformersBackend.from_pretrained(policy_dir, name="orchestrator")
    sampling = cfg.swarm.orchestrator_sampling.model_copy(update={"temperature": temperature})
    swarm = cfg.swarm.model_copy(update={"orchestrator_sampling": sampling})
    per_seed = []
    for seed in seeds:
        out = policy_dir.parent / f"eval-heldout-s{seed}"
        shutil.rmtree(out, ignore_errors=True)
        anyio.run(_eval_rollouts, policy, out, seed, swarm, FetchReward(cfg.reward, step=10**9))  # λ = 0
        recs = [e.record for e in read_jsonl(out / "episodes.jsonl", EpisodeEntry)]
        per_seed.append(summarise(recs))
    return {"policy": str(policy_dir), "temperature": temperature, "seeds": list(seeds), "per_seed": per_seed}


async def _eval_rollouts(policy: Any, out: Path, seed: int, swarm: SwarmConfig, reward: FetchReward) -> None:
    factory = orchestrator_factory(policy, subagent_backend=fetcher(), agents=[AGENT])
    cfg = RolloutConfig(group_size=4, seed=seed, max_concurrent_episodes=16)
    await collect_rollouts(tasks("test"), factory, out_dir=out, config=cfg, swarm_config=swarm, reward=reward)


def summarise(records: list[EpisodeRecord]) -> dict[str, float]:
    fans = [fanout(r) for r in records]

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else float("nan")

    return {
        "episodes": len(records),
        "r_perf": mean([r.reward.r_perf if r.reward else 0.0 for r in records]),
        "exact_fanout": mean([float(f["exact_fanout"]) for f in fans]),
        "over_assignment": mean([float(f["over_assignment"]) for f in fans]),
        "over_assigned_per_episode": mean([float(f["over_assigned"]) for f in fans]),
        "critical_steps": mean([float(r.dag.critical_steps) for r in records]),
        "finish_rate": mean([float(s.status is AgentStatus.COMPLETED) for r in records for s in r.subagent_results]),
    }


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of a 95 % t-interval over seeds (n − 1 degrees of freedom)."""
    import statistics

    n = len(values)
    m = statistics.fmean(values)
    if n < 2:
        return m, float("nan")
    t = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776}.get(n, 2.262)
    return m, t * statistics.stdev(values) / n**0.5


# -- report -------------------------------------------------------------------------------------------

REPORT_KEYS = (
    ("r_perf", "r_perf"),
    ("lambda1", "λ1 = λ2"),
    ("mean_critical_steps", "critical steps / episode"),
    ("exact_fanout", "exact fan-out rate"),
    ("over_assignment", "over-assignment rate"),
    ("finish_rate", "sub-agent finish rate"),
)


def _window_mean(rows: list[dict[str, Any]], key: str) -> float:
    vals = [float(r.get(key, r.get("reward_details", {}).get(key)) or 0.0) for r in rows]
    return sum(vals) / len(vals) if vals else float("nan")


def report(window: int = 10) -> str:
    """``parl_fetch.png`` (seed 0's runs), ``parl_fetch_results.md``: training curves' first vs last
    ``window`` steps per seed, and the held-out evaluation of every run with intervals over seeds."""
    from agent_swarm.orchestrator.rl.plots import plot_compare, read_metrics

    seeds = sorted(int(p.name[1:]) for p in RUNS.glob("s*") if p.name[1:].isdigit())
    first = {v: run_dir(seeds[0], v) for v in VARIANTS} if seeds else {}
    runs = {k: v for k, v in first.items() if (v / "metrics.jsonl").is_file()}
    if runs:
        plot_compare(runs, HERE / "parl_fetch.png")
    lines = ["### Training (train files), first vs last steps\n"]
    lines.append("| run | seed | steps | " + " | ".join(f"{n} first → last" for _, n in REPORT_KEYS) + " |")
    lines.append("|---|---|---|" + "---|" * len(REPORT_KEYS))
    for seed in seeds:
        for variant in VARIANTS:
            path = run_dir(seed, variant)
            if not (path / "metrics.jsonl").is_file():
                continue
            rows = read_metrics(path)
            cells = [
                f"{_window_mean(rows[:window], k):.3f} → {_window_mean(rows[-window:], k):.3f}" for k, _ in REPORT_KEYS
            ]
            lines.append(f"| {variant} | {seed} | {len(rows)} | " + " | ".join(cells) + " |")
    evals = sorted(RUNS.glob("s*/*/heldout.json"))
    if evals:
        lines.append("\n### Held-out files (never trained on): mean ± 95 % interval over training seeds\n")
        keys = ("r_perf", "exact_fanout", "over_assignment", "critical_steps", "finish_rate")
        lines.append("| policy | runs | " + " | ".join(keys) + " |")
        lines.append("|---|---|" + "---|" * len(keys))
        groups: dict[str, list[dict[str, float]]] = {}
        for e in evals:
            data = json.loads(e.read_text())
            # one value per training run: the mean over its sampling seeds
            per_run = {k: sum(s[k] for s in data["per_seed"]) / len(data["per_seed"]) for k in keys}
            groups.setdefault(e.parent.name, []).append(per_run)
        for name, rows_ in groups.items():
            cells = []
            for k in keys:
                m, h = interval([r[k] for r in rows_])
                cells.append(f"{m:.3f} ± {h:.3f}")
            lines.append(f"| {name} | {len(rows_)} | " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    (HERE / "parl_fetch_results.md").write_text(text + "\n", encoding="utf-8")
    return text


def evaluate_all(seeds: tuple[int, ...] = (0, 1, 2)) -> None:
    """Held-out evaluation of each run's final policy and of each warm start (the before)."""
    for run in sorted(RUNS.glob("s*")):
        targets = {"warmstart": run / "warmstart"}
        for variant in VARIANTS:
            ckpts = sorted((run / variant / "checkpoints").glob("step-*"))
            if ckpts:
                targets[variant] = ckpts[-1] / "policy"
        for name, policy in targets.items():
            if not (policy / "config.json").is_file():
                continue
            res = evaluate(policy, seeds=seeds)
            dest = run / name / "heldout.json" if name != "warmstart" else run / "warmstart-eval" / "heldout.json"
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
            print(f"{run.name}/{name}: {json.dumps(res['per_seed'])}", flush=True)


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    arg = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    if cmd == "report":
        print(report())
    elif cmd == "warmstart":
        warmstart(seed=arg)
    elif cmd == "configs":
        print(write_configs(arg))
    elif cmd == "eval":
        evaluate_all()
    else:
        sys.exit(__doc__)
