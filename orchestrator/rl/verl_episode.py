"""One swarm episode per verl sample: the verl-free half of the verl agent loop.

verl drives rollouts through agent loops (``verl.experimental.agent_loop``): for every dataset row it
instantiates the loop registered under the row's ``agent_name`` and awaits
``run(sampling_params, **row)``, which returns an ``AgentLoopOutput``. The loop itself
(:mod:`agent_swarm.orchestrator.rl.verl_loop`) is a thin verl class; everything it does is here, with no verl
import, so it is typed, testable without verl, and the same code for every engine:

* :class:`VerlTaskSpec` — what a dataset row's ``extra_info["swarm"]`` names: a workload task
  (``workload``, ``split``, ``seed``, ``index``, ``knobs``; the builder also stores the task itself)
  or a free task with its verifier (``task``);
* :class:`VerlServerEngine` — a :class:`~agent_swarm.swarm.backends.token_engine.TokenEngine` over verl's server
  manager (``generate(request_id, prompt_ids=..., sampling_params=...)``): the orchestrator's turns
  are sampled by the policy's rollout servers, token ids in, token ids and logprobs out, with our
  exact-token continuation across turns (:class:`~agent_swarm.swarm.backends.token_engine.TokenEngineBackend`);
* :class:`VerlLoopConfig` / :class:`VerlRuntime` — the episode config, the PARL reward settings and
  the **sub-agents' own backend** (an OpenAI-compatible server, frozen): sub-agents never reach the
  policy's servers;
* :class:`PolicyStepReward` — the PARL reward with λ1, λ2 read at the training step of the weights
  that sampled the episode (verl tags every generation with its ``global_steps``), through the same
  :class:`~agent_swarm.swarm.rl.rewards.Schedule` objects ``swarm train`` uses;
* :func:`run_verl_episode` — runs the episode (the same workload environment, budgets and reward as
  ``swarm rollout``), writes its record, and returns the ``AgentLoopOutput`` fields built from its
  trajectory (:mod:`agent_swarm.swarm.rl.trajectory`): mask 1 exactly on the orchestrator's sampled tokens.
"""

from __future__ import annotations

import functools
import json
import os
import time
import tomllib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, ValidationError, model_validator

from agent_swarm.orchestrator.backend_factory import BACKENDS
from agent_swarm.orchestrator.backend_options import BackendHints, BackendOptions, HTTPOptions, resolve_options
from agent_swarm.orchestrator.environment import environment
from agent_swarm.orchestrator.eval import workload_orchestrator_factory
from agent_swarm.orchestrator.rollout.episodes import EpisodeEntry, EpisodeJob
from agent_swarm.swarm.backend import ModelBackend, SamplingParams
from agent_swarm.swarm.backends.token_engine import TokenEngineBackend, TokenOutput
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import BackendError, ConfigError, UserError
from agent_swarm.swarm.limits import CapacityLimit
from agent_swarm.swarm.records import EpisodeRecord, RewardRecord, Task
from agent_swarm.swarm.rl.export import JsonlWriter
from agent_swarm.swarm.rl.rewards import PARLReward, RewardConfig
from agent_swarm.swarm.rl.trajectory import Trajectory, TrajectoryError, build_trajectory
from agent_swarm.workloads import Mode, get_workload

__all__ = [
    "CONFIG_ENV",
    "REWARD_INFO_KEYS",
    "PolicyStepReward",
    "ServerManager",
    "SubagentServer",
    "VerlEpisode",
    "VerlLoopConfig",
    "VerlRuntime",
    "VerlServerEngine",
    "VerlTaskSpec",
    "dataset_rows",
    "episode_metrics",
    "policy_step",
    "run_verl_episode",
    "task_spec_of",
]

CONFIG_ENV = "SWARM_VERL_CONFIG"
"""The environment variable naming the agent loop's config file (when the loop's YAML entry names none)."""

REWARD_INFO_KEYS = (
    "swarm_r_perf",
    "swarm_r_parallel",
    "swarm_r_finish",
    "swarm_lambda1",
    "swarm_lambda2",
    "swarm_lambda_step",
    "swarm_critical_steps",
    "swarm_total_steps",
    "swarm_max_width",
    "swarm_mean_width",
    "swarm_subagents",
    "swarm_subagents_completed",
    "swarm_orchestrator_turns",
    "swarm_trainable",
)
"""The per-episode numbers put in ``extra_fields["reward_extra_info"]``: verl logs them with each
validation run and dumps them with rollouts; :func:`episode_metrics` turns them into step metrics."""


# -- what a dataset row names ---------------------------------------------------------------------


class VerlTaskSpec(BaseModel):
    """A dataset row's task (``extra_info["swarm"]``, a JSON object or its JSON text).

    Either ``task`` (a full :class:`~agent_swarm.swarm.records.Task`: a workload task carries
    ``metadata.workload``, a free task its ``verifier``/``verifier_args``), or a workload task by
    reference (``workload`` and ``index`` into ``tasks(n, seed=seed, split=split, **knobs)``, ``n``
    defaulting to ``index + 1``: give the ``n`` the tasks were generated with).
    When both are given the task is used and the reference is provenance.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: Task | None = None
    workload: str | None = None
    split: str = "train"
    seed: int = 0
    index: int | None = Field(None, ge=0)
    n: int | None = Field(None, ge=1, description="how many tasks the reference was generated among")
    knobs: dict[str, Any] = Field(default_factory=dict)
    mode: Mode | None = Field(None, description="swarm or single; default: the loop config's mode")

    @model_validator(mode="after")
    def _names_a_task(self) -> VerlTaskSpec:
        if self.task is None and (self.workload is None or self.index is None):
            raise ValueError("give 'task' (a task object) or 'workload' with 'index' (a workload task by reference)")
        if self.n is not None and self.index is not None and self.index >= self.n:
            raise ValueError(f"index {self.index} is not among the n={self.n} tasks of the reference")
        return self

    def resolve(self) -> Task:
        """The task to run."""
        if self.task is not None:
            return self.task
        assert self.workload is not None and self.index is not None  # the validator's guarantee
        knobs = json.dumps(self.knobs, sort_keys=True)
        return _tasks(self.workload, self.split, self.seed, self.n or self.index + 1, knobs)[self.index]


@functools.lru_cache(maxsize=64)
def _tasks(workload: str, split: str, seed: int, n: int, knobs: str) -> tuple[Task, ...]:
    return tuple(get_workload(workload).tasks(n, seed=seed, split=split, **json.loads(knobs)))


def task_spec_of(sample: Mapping[str, Any]) -> VerlTaskSpec:
    """The task spec of one verl sample (its ``extra_info["swarm"]``); a clear error when it has none."""
    extra = sample.get("extra_info")
    raw = extra.get("swarm") if isinstance(extra, Mapping) else None
    if raw is None:
        raise ConfigError(
            "this verl sample has no extra_info['swarm'] naming its task; build the dataset with "
            "examples/verl/build_dataset.py (or put a task object / workload reference there)"
        )
    try:
        data = json.loads(raw) if isinstance(raw, str | bytes) else dict(raw)
        return VerlTaskSpec.model_validate(data)
    except (ValidationError, json.JSONDecodeError, TypeError, ValueError) as exc:
        raise ConfigError(f"invalid extra_info['swarm'] in a verl sample: {exc}") from None


def dataset_rows(
    tasks: Sequence[Task],
    *,
    agent_name: str = "swarm_agent",
    reference: Mapping[str, Any] | None = None,
    mode: Mode | None = None,
) -> list[dict[str, Any]]:
    """verl dataset rows (``RLHFDataset``'s columns) for ``tasks``, one per task.

    ``prompt`` is the task as one user message (verl filters and logs it; the episode builds its own
    prompt), ``agent_name`` routes the row to the swarm agent loop, and ``extra_info["swarm"]`` holds
    the :class:`VerlTaskSpec` as JSON text (the whole task; with ``reference`` = ``{"workload", "split",
    "seed", "knobs"}`` also the workload reference, the row's ``index`` being the task's position).
    """
    rows = []
    for i, task in enumerate(tasks):
        ref = {**dict(reference), "index": i, "n": len(tasks)} if reference is not None else {}
        spec = VerlTaskSpec.model_validate({"task": task.model_dump(mode="json"), **ref, "mode": mode})
        source = task.metadata.get("workload") or "swarm"
        rows.append(
            {
                "data_source": f"swarm/{source}",
                "agent_name": agent_name,
                "prompt": [{"role": "user", "content": task.prompt}],
                "ability": "agent-swarm",
                "reward_model": {"style": "swarm", "ground_truth": ""},
                "extra_info": {"index": i, "task_id": task.id, "swarm": spec.model_dump_json(exclude_none=True)},
            }
        )
    return rows


# -- the policy's servers as a token engine ----------------------------------------------------------


class ServerManager(Protocol):
    """verl's server manager (``LLMServerClient``): what the agent loop is handed as ``server_manager``."""

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> Any:
        """A ``TokenOutput`` (``token_ids``, ``log_probs``, ``stop_reason``, ``extra_fields``)."""
        ...


class VerlServerEngine:
    """Token ids in, token ids and logprobs out, through verl's server manager.

    ``base_params`` are verl's sampling parameters for this rollout (``top_k``,
    ``repetition_penalty``…); each turn sets ``temperature``, ``top_p``, ``max_tokens`` from the
    request and always asks for logprobs. One ``request_id`` per episode keeps its turns on one
    server (verl's sticky sessions: the prefix cache holds the episode). ``generate_s`` sums the time
    spent waiting for the servers.
    """

    def __init__(self, server_manager: ServerManager, base_params: Mapping[str, Any] | None = None) -> None:
        self.server = server_manager
        self.base_params = dict(base_params or {})
        self.request_id = uuid.uuid4().hex
        self.generate_s = 0.0
        self.calls = 0

    async def generate_tokens(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> TokenOutput:
        params = {
            **self.base_params,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "logprobs": True,
        }
        if sampling.seed is not None:
            params["seed"] = sampling.seed
        if sampling.stop:
            params["stop"] = list(sampling.stop)
        t0 = time.perf_counter()
        try:
            out = await self.server.generate(
                request_id=self.request_id, prompt_ids=list(prompt_ids), sampling_params=params
            )
        except Exception as exc:  # a failed server call is this turn's backend failure, recorded by the engine
            raise BackendError(f"verl rollout server failed: {type(exc).__name__}: {exc}") from None
        finally:
            self.generate_s += time.perf_counter() - t0
            self.calls += 1
        if getattr(out, "stop_reason", None) == "aborted":
            raise BackendError("verl rollout server aborted the generation (weights were being updated); retry it")
        ids = tuple(int(i) for i in out.token_ids)
        lps = getattr(out, "log_probs", None)
        version = (getattr(out, "extra_fields", None) or {}).get("global_steps")
        return TokenOutput(
            ids, None if lps is None else tuple(float(x) for x in lps), None if version is None else str(version)
        )


# -- the reward --------------------------------------------------------------------------------------


def policy_step(record: EpisodeRecord, default: int = 0) -> int:
    """The training step of the weights that sampled ``record``: the first turn's weight version when it
    is a step number (verl tags generations with ``global_steps``), else ``default``."""
    for turn in record.turns:
        v = turn.weight_version
        if v is not None and v.strip().isdigit():
            return int(v)
    return default


class PolicyStepReward:
    """The PARL reward (:class:`~agent_swarm.swarm.rl.rewards.PARLReward`) with λ1, λ2 read at :func:`policy_step`.

    verl's trainer advances ``global_steps`` and pushes each new policy into the rollout servers with
    that number; reading λ at the step of the weights that sampled the episode makes the schedules
    follow verl's training exactly as they follow ``swarm train``'s step.
    """

    def __init__(self, config: RewardConfig, *, judge: ModelBackend | None = None, default_step: int = 0) -> None:
        self.config = config
        self.judge = judge
        self.default_step = default_step

    async def __call__(self, record: EpisodeRecord) -> RewardRecord:
        return await PARLReward(self.config, step=policy_step(record, self.default_step), judge=self.judge)(record)


# -- configuration and the per-process runtime --------------------------------------------------------


class SubagentServer(BaseModel):
    """The sub-agents' frozen model: a backend kind of :data:`agent_swarm.orchestrator.backend_factory.BACKENDS`
    (``openai`` or ``vllm`` for a server; never the policy's servers).

    ``options`` are that kind's typed options (:mod:`agent_swarm.orchestrator.backend_options`), resolved once at
    construction with their environment fallbacks: a key the kind does not take, a bad value or an
    unknown kind raises one :class:`~agent_swarm.swarm.errors.ConfigError` line here, not when the backend is built.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str = "openai"
    model: str
    base_url: str | None = None
    options: SerializeAsAny[BackendOptions] = Field(default_factory=HTTPOptions)

    @model_validator(mode="before")
    @classmethod
    def _typed_options(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or not isinstance(kind := data.get("kind", "openai"), str):
            return data  # field validation reports it
        base_url = data.get("base_url")
        takes = BACKENDS.get(kind).options_for(base_url if isinstance(base_url, str) else None)
        given = data.get("options", {})
        if isinstance(given, takes):
            return data
        if isinstance(given, BackendOptions):
            raise ConfigError(
                f"[subagents] options are {type(given).__name__}, but backend kind {kind!r} takes {takes.__name__}"
            )
        if not isinstance(given, Mapping):
            return data
        return {**data, "options": resolve_options(takes, given, environment(), kind)}


class VerlLoopConfig(BaseModel):
    """The agent loop's config file (TOML or JSON): ``[swarm]``, ``[reward]``, ``[subagents]`` and the rest."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    swarm: SwarmConfig = SwarmConfig()
    reward: RewardConfig = RewardConfig()
    subagents: SubagentServer
    mode: Mode = "swarm"
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="SwarmConfig fields that win over a workload's own budgets"
    )
    policy_name: str | None = Field(
        None, description="the policy's model name on records (chooses the prompt profile); default: its directory"
    )
    records_dir: Path | None = Field(
        None, description="episode records go to records_dir/step-NNNNNN.jsonl (relative: to the config file)"
    )
    default_step: int = Field(0, ge=0, description="λ step when the servers report no global step")

    @classmethod
    def load(cls, path: Path | str) -> VerlLoopConfig:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read the verl agent loop config {p}: {exc.strerror}") from None
        try:
            data = json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
            config = cls.model_validate(data)
        except (ValidationError, json.JSONDecodeError, tomllib.TOMLDecodeError, UserError) as exc:
            raise ConfigError(f"invalid verl agent loop config {p}: {exc}") from None
        if config.records_dir is not None and not config.records_dir.is_absolute():
            # relative to the file: Ray workers do not run in the launcher's directory
            config = config.model_copy(update={"records_dir": p.resolve().parent / config.records_dir})
        return config


@dataclass
class VerlRuntime:
    """What every episode of one process shares: the config, the sub-agents' backend and their cap
    (``max_concurrency``), the records."""

    config: VerlLoopConfig
    subagent_backend: ModelBackend
    judge: ModelBackend | None = None
    _writers: dict[Path, JsonlWriter] = field(default_factory=dict)
    subagent_limit: CapacityLimit = field(default_factory=CapacityLimit)

    @classmethod
    def from_config(cls, config: VerlLoopConfig) -> VerlRuntime:
        s = config.subagents
        return cls(config, BACKENDS.get(s.kind).build(s.model, s.base_url, s.options, BackendHints()))

    def record(self, entry: EpisodeEntry, step: int) -> str | None:
        """Append the episode to ``records_dir/step-NNNNNN.jsonl``; its path, or ``None`` without a dir."""
        if self.config.records_dir is None:
            return None
        path = self.config.records_dir / f"step-{step:06d}.jsonl"
        writer = self._writers.get(path)
        if writer is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            writer = self._writers[path] = JsonlWriter(path)
        writer.write(entry)
        return str(path)


def runtime_for(path: str | None) -> VerlRuntime:
    """The runtime of the config file at ``path`` (or ``$SWARM_VERL_CONFIG``), built once per process."""
    where = path or os.environ.get(CONFIG_ENV)
    if not where:
        raise ConfigError(
            f"the swarm verl agent loop needs its config: set {CONFIG_ENV}=path/to/agent_loop.toml "
            "(or swarm_config: in the agent loop YAML entry); see examples/verl/"
        )
    return _runtime_at(str(Path(where).resolve()))


@functools.lru_cache(maxsize=8)
def _runtime_at(path: str) -> VerlRuntime:
    return VerlRuntime.from_config(VerlLoopConfig.load(path))


# -- one episode ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VerlEpisode:
    """An episode as verl takes it: ``output`` holds the ``AgentLoopOutput`` fields."""

    output: dict[str, Any]
    record: EpisodeRecord | None
    trajectory: Trajectory | None


def _episode_config(base: SwarmConfig, sampling_params: Mapping[str, Any]) -> SwarmConfig:
    """The loop's config with verl's rollout temperature and top-p (what the trainer recomputes at)."""
    update: dict[str, Any] = {}
    for key in ("temperature", "top_p"):
        if sampling_params.get(key) is not None:
            update[key] = float(sampling_params[key])
    if update.get("top_p", 1.0) <= 0.0:
        update["top_p"] = 1.0
    sampling = base.orchestrator_sampling.model_copy(update=update)
    return base.model_copy(update={"orchestrator_sampling": sampling})


def _verl_params(sampling_params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in sampling_params.items() if k not in ("temperature", "top_p", "max_tokens", "logprobs")}


async def run_verl_episode(
    runtime: VerlRuntime,
    server_manager: ServerManager,
    tokenizer: Any,
    sample: Mapping[str, Any],
    *,
    sampling_params: Mapping[str, Any],
    prompt_length: int,
    response_length: int,
    policy_name: str = "policy",
    stop_ids: Sequence[int] = (),
    max_context: int | None = None,
) -> VerlEpisode:
    """Run the episode of one verl sample and return its ``AgentLoopOutput`` fields.

    The orchestrator samples through ``server_manager`` (the policy's rollout servers); sub-agents run
    on ``runtime.subagent_backend``. The output is the episode's trajectory (prompt ids, response ids
    with observations masked 0, rollout logprobs), cut to ``response_length``; the reward is the PARL
    total with its components in ``extra_fields``. An episode that cannot be trained on (no token ids,
    a crash) gives a one-token output with mask 0 and reward 0, and says why in ``extra_fields``.
    """
    cfg = runtime.config
    spec = task_spec_of(sample)
    task = spec.resolve()
    engine = VerlServerEngine(server_manager, _verl_params(sampling_params))
    policy = TokenEngineBackend(
        engine, tokenizer, name=cfg.policy_name or policy_name, stop_ids=stop_ids, max_context=max_context
    )
    t0 = time.perf_counter()
    record, error = await _play(runtime, policy, spec, task, sampling_params)
    wall = time.perf_counter() - t0
    timing = {"generate_sequences": engine.generate_s, "tool_calls": max(0.0, wall - engine.generate_s)}
    path: str | None = None
    trajectory: Trajectory | None = None
    if record is not None:
        entry = EpisodeEntry(group_id=task.id, sample_index=0, seed=0, record=record)
        path = runtime.record(entry, policy_step(record, cfg.default_step))
        try:
            trajectory = build_trajectory(record, group_id=task.id, metadata={"record_path": path})
        except TrajectoryError as exc:
            error = str(exc)
    if trajectory is None:
        output = _untrainable_output(tokenizer, task, prompt_length, timing, error or "no trajectory", path)
    else:
        output = _output(trajectory, prompt_length, response_length, timing, path)
    return VerlEpisode(output=output, record=record, trajectory=trajectory)


async def _play(
    runtime: VerlRuntime, policy: ModelBackend, spec: VerlTaskSpec, task: Task, sampling_params: Mapping[str, Any]
) -> tuple[EpisodeRecord | None, str | None]:
    """The episode as ``swarm rollout`` runs a task (workload environment, budgets, PARL reward), or why not."""
    cfg = runtime.config
    factory = workload_orchestrator_factory(
        policy, runtime.subagent_backend, mode=spec.mode or cfg.mode, overrides=cfg.overrides
    )
    reward = PolicyStepReward(cfg.reward, judge=runtime.judge, default_step=cfg.default_step)
    orchestrator = factory(EpisodeJob(task, 0, 0), _episode_config(cfg.swarm, sampling_params), reward)
    try:
        eid = f"{task.id}-{uuid.uuid4().hex[:12]}"
        return await orchestrator.run(task, episode_id=eid, subagent_limit=runtime.subagent_limit), None
    except Exception as exc:  # a runtime bug in one episode must not end verl's whole batch
        return None, f"episode crashed: {type(exc).__name__}: {exc}"


def _reward_info(t: Trajectory | None, step: int) -> dict[str, float]:
    if t is None:
        return dict.fromkeys(REWARD_INFO_KEYS, 0.0) | {"swarm_lambda_step": float(step)}
    r = t.reward
    widths = [w for w in t.stage_widths if w > 0]
    return {
        "swarm_r_perf": r.r_perf,
        "swarm_r_parallel": r.r_parallel,
        "swarm_r_finish": r.r_finish,
        "swarm_lambda1": r.lambda1,
        "swarm_lambda2": r.lambda2,
        "swarm_lambda_step": float(r.step),
        "swarm_critical_steps": float(t.critical_steps),
        "swarm_total_steps": float(t.total_steps),
        "swarm_max_width": float(max(widths, default=0)),
        "swarm_mean_width": sum(widths) / len(widths) if widths else 0.0,
        "swarm_subagents": float(len(t.subagent_statuses)),
        "swarm_subagents_completed": float(sum(s == "completed" for s in t.subagent_statuses)),
        "swarm_orchestrator_turns": float(t.num_turns),
        "swarm_trainable": 1.0,
    }


def _output(
    t: Trajectory, prompt_length: int, response_length: int, timing: dict[str, float], path: str | None
) -> dict[str, Any]:
    if len(t.prompt_ids) > prompt_length:
        raise ConfigError(
            f"episode {t.episode_id}'s first prompt is {len(t.prompt_ids)} tokens but verl's "
            f"rollout.prompt_length is {prompt_length}; raise data.max_prompt_length (the system prompt, "
            "the tools and the task are all in it) — cutting it would train on a context the policy never saw"
        )
    n = min(len(t.response_ids), response_length)
    r = t.reward
    swarm = {
        "episode_id": t.episode_id,
        "task_id": t.task_id,
        "record_path": path,
        "status": t.status,
        "answer": t.answer,
        "reward": {"total": r.total, "r_perf": r.r_perf, "r_parallel": r.r_parallel, "r_finish": r.r_finish},
        "reward_error": r.error,
        "stage_widths": list(t.stage_widths),
        "subagent_statuses": list(t.subagent_statuses),
        "policy_version": t.policy_version,
        "cut_response_tokens": len(t.response_ids) - n,
        "trajectory_error": None,
    }
    return {
        "prompt_ids": list(t.prompt_ids),
        "response_ids": list(t.response_ids[:n]),
        "response_mask": list(t.response_mask[:n]),
        "response_logprobs": list(t.response_logprobs[:n]),
        "reward_score": float(r.total),
        "num_turns": 2 * t.num_turns,
        "metrics": {**timing, "compute_score": 0.0, "num_preempted": -1},
        "extra_fields": {"reward_extra_info": _reward_info(t, r.step), "swarm": swarm},
    }


def _untrainable_output(
    tokenizer: Any, task: Task, prompt_length: int, timing: dict[str, float], error: str, path: str | None
) -> dict[str, Any]:
    """A sample verl can batch but never trains on: the task's prompt, one EOS token with mask 0, reward 0."""
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": task.prompt}], add_generation_prompt=True, tokenize=False
    )
    ids = [int(i) for i in tokenizer(str(prompt), add_special_tokens=False)["input_ids"]][-prompt_length:]
    eos = tokenizer.eos_token_id
    eos_id = int(eos if isinstance(eos, int) else (eos or [0])[0])
    swarm = {"episode_id": None, "task_id": task.id, "record_path": path, "trajectory_error": error}
    return {
        "prompt_ids": ids,
        "response_ids": [eos_id],
        "response_mask": [0],
        "response_logprobs": [0.0],
        "reward_score": 0.0,
        "num_turns": 2,
        "metrics": {**timing, "compute_score": 0.0, "num_preempted": -1},
        "extra_fields": {"reward_extra_info": _reward_info(None, 0), "swarm": swarm},
    }


def episode_metrics(columns: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """Step metrics from a batch's ``reward_extra_info`` columns (:data:`REWARD_INFO_KEYS`): the mean of
    each over trainable episodes (``swarm/<name>/mean``), the max of critical steps and widths, and the
    fraction of episodes that could be trained on."""
    trainable = [float(x) for x in columns.get("swarm_trainable", ())]
    if not trainable:
        return {}
    keep = [i for i, x in enumerate(trainable) if x > 0]
    out = {"swarm/trainable_frac": sum(trainable) / len(trainable)}
    for key in REWARD_INFO_KEYS:
        if key == "swarm_trainable" or key not in columns:
            continue
        vals = [float(columns[key][i]) for i in keep]
        name = key.removeprefix("swarm_")
        out[f"swarm/{name}/mean"] = sum(vals) / len(vals) if vals else 0.0
        if name in ("critical_steps", "max_width"):
            out[f"swarm/{name}/max"] = max(vals, default=0.0)
    return out
