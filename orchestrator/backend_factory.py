"""Build the orchestrator's and the sub-agents' model backends from CLI options, config and env.

Kinds (``--backend`` / ``--subagent-backend``):

=================  ===========================================================================
``local``          the embedded default: llama.cpp in-process on a PyPI-shipped GGUF model
``openai``         any OpenAI-compatible server at ``--base-url`` (vLLM, llama.cpp, SGLang, OpenAI)
``vllm``           a ``vllm serve`` server at ``--base-url`` (asks for its token-id extras), or,
                   without a URL, vLLM in-process on the model directory ``--model``
``transformers``   a local transformers model directory ``--model`` (the ``rl`` extra)
``scripted``       the built-in scripted demo policy (``--model`` names the demo, default capitals)
=================  ===========================================================================

Every option can come from the ``[backend]`` table of the config file (same names, with
``subagent_backend`` / ``subagent_model`` / ``subagent_base_url``). Each kind takes its own options,
typed and checked once (:mod:`agent_swarm.orchestrator.backend_options`: a key the kind does not take, or a bad
value, is one clear error); an option not given comes from its environment variable, read in
:mod:`agent_swarm.orchestrator.environment` only: ``SWARM_SUBAGENT_BASE_URL``, ``SWARM_API_KEY`` (else
``OPENAI_API_KEY``), ``SWARM_TIMEOUT``, ``SWARM_LOCAL_SLOTS``, ``SWARM_LOCAL_CTX``, ``SWARM_LOCAL_THREADS``.
``SWARM_BACKEND``, ``SWARM_MODEL``, ``SWARM_BASE_URL``, ``SWARM_SUBAGENT_BACKEND`` and
``SWARM_SUBAGENT_MODEL`` are read by the CLI. Explicit arguments win over the environment.

When the sub-agents ask for the same kind, model and URL as the orchestrator, one backend (one
engine) serves both, so a local model is loaded once and its slots batch every agent. A ``local``
orchestrator runs with a trained LoRA adapter when ``orchestrator_adapter`` (``--orchestrator-adapter``)
names one or a shipped adapter is the default for its model (:mod:`agent_swarm.orchestrator.adapters`): the
engine then loads it once, the orchestrator's requests apply it and the sub-agents' do not.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from agent_swarm.orchestrator.adapters import OrchestratorAdapter, resolve_orchestrator_adapter
from agent_swarm.orchestrator.backend_options import (
    BackendHints,
    BackendOptions,
    HTTPOptions,
    LocalOptions,
    ScriptedOptions,
    SharedOptions,
    TransformersOptions,
    VLLMEngineOptions,
    resolve_options,
    unknown_option,
)
from agent_swarm.orchestrator.environment import Environment, environment
from agent_swarm.swarm.backend import ModelBackend
from agent_swarm.swarm.errors import ConfigError, UnknownNameError
from agent_swarm.swarm.registry import Registry

if TYPE_CHECKING:
    from agent_swarm.orchestrator.demo import Demo

__all__ = [
    "BACKENDS",
    "BACKEND_TABLE_KEYS",
    "BackendBuilder",
    "BackendKind",
    "BackendPlan",
    "backend_kind",
    "backend_option_keys",
    "build_backend",
    "build_backends",
    "check_local_model",
    "model_identity",
    "plan_backends",
    "with_subagent_cache",
]


def _local_slots(options: LocalOptions, hints: BackendHints) -> int:
    # One slot per parallel sub-agent, at most four per core (each slot reserves its own context memory,
    # which llama.cpp clears at every start: cpu.py slot_cap weighs the start against wide stages).
    from agent_swarm.swarm.backends.local.cpu import slot_cap

    return options.slots or min(hints.fanout or 8, slot_cap())


def _fit_slots(options: LocalOptions) -> bool:
    # Slots nobody set (no [backend] slots, no SWARM_LOCAL_SLOTS): where the memory cannot give each its
    # own cache of the model's full context (up to 32,768 tokens), fewer start (sizing.py); set slots start
    # as set.
    return options.slots is None


def _local_with_adapter(
    model: str | None, adapter: OrchestratorAdapter, options: LocalOptions, hints: BackendHints
) -> tuple[ModelBackend, ModelBackend]:
    """(orchestrator applying ``adapter``, sub-agents on the base model): one engine, whose slots
    are the sub-agents' plus ``max(1, slots // 8)`` reserved for the orchestrator's requests."""
    from agent_swarm.swarm.backends.local import LocalBackend, LocalEngine

    slots = _local_slots(options, hints)
    orch_slots = max(1, slots // 8)
    engine = LocalEngine(
        model,
        slots=slots + orch_slots,
        fit_slots=_fit_slots(options),
        # Each slot's context: as set, else sized from the model and the free memory (sizing.py; 4,096
        # once overflowed on a 6-entity wide lookup).
        ctx_per_slot=options.ctx,
        threads=options.threads,
        progress=hints.progress,
        lora_adapters=[adapter.path],
        adapter_version=adapter.version,
        adapter_slots=orch_slots,
    )
    common: dict[str, Any] = {
        "engine": engine,
        "constrain_actions": options.constrain_actions,
        "timeout": options.timeout,
        "stop_repeats": options.stop_repeats,
    }
    return LocalBackend(lora_scale=1.0, owns_engine=True, **common), LocalBackend(**common)


BackendBuilder = Callable[[str | None, str | None, Any, BackendHints], ModelBackend]
"""``builder(model, base_url, options, hints) -> ModelBackend``, ``options`` of its kind's model."""


@dataclass(frozen=True, slots=True)
class BackendKind:
    """One entry of :data:`BACKENDS`: the builder and the options model it takes (``in_process``: the
    model without a base URL, where that differs, as for ``vllm``)."""

    build: BackendBuilder
    options: type[BackendOptions]
    in_process: type[BackendOptions] | None = None

    def options_for(self, base_url: str | None) -> type[BackendOptions]:
        return self.in_process if self.in_process is not None and not base_url else self.options


BACKENDS: Registry[BackendKind] = Registry("backend")
"""Backend kinds by name (``--backend`` / ``--subagent-backend`` / ``[backend] kind``)."""

B = TypeVar("B", bound=BackendBuilder)


def backend_kind(
    name: str, options: type[BackendOptions], *, in_process: type[BackendOptions] | None = None
) -> Callable[[B], B]:
    """Register the decorated builder as backend kind ``name`` taking ``options``."""

    def deco(build: B) -> B:
        BACKENDS.add(name, BackendKind(build, options, in_process))
        return build

    return deco


def build_backend(
    kind: str,
    model: str | None = None,
    base_url: str | None = None,
    *,
    fanout: int | None = None,
    progress: Callable[..., Any] | None = None,
    **options: Any,
) -> ModelBackend:
    """One backend of ``kind``; ``options`` as in :func:`build_backends`, less the ones it takes for
    every kind (``subagent_base_url``, ``subagent_cache``, ``orchestrator_adapter``)."""
    entry = BACKENDS.get(kind)
    typed = _kind_options(((kind, base_url, ""),), options, environment(), shared=False)[0]
    return entry.build(model, base_url, typed, BackendHints(fanout, progress))


def _local_takes_no_url(base_url: str | None) -> None:
    if base_url:
        raise ConfigError(
            f"--backend local runs the model in-process and takes no --base-url (got {base_url!r}); "
            "use --backend openai --base-url URL for a running server"
        )


def check_local_model(model: str | None) -> None:
    """Raise :class:`ConfigError` for a ``local`` model that can never load: a known model whose wheels
    are not installed (with the pip command), a path that does not exist or is not a ``.gguf`` file, or
    an unknown name (with the closest known one). Cheap: nothing
    is assembled or loaded, so a bad ``--model`` fails before any episode starts."""
    if model is None:
        return
    from agent_swarm.swarm.backends.local import LOCAL_MODELS, model_available

    if model in LOCAL_MODELS:
        if not model_available(model):
            raise ConfigError(f"local model {model} is not installed; install it with: {LOCAL_MODELS[model].install}")
        return
    path = Path(model).expanduser()
    if path.suffix == ".gguf" or "/" in model or os.sep in model:
        if not path.exists():
            raise ConfigError(f"model file not found: {model}; check the path (--model takes a .gguf file)")
        if path.suffix != ".gguf" or not path.is_file():
            raise ConfigError(f"model {model} is not a .gguf file; the local backend runs GGUF files only")
        return
    close = difflib.get_close_matches(model, list(LOCAL_MODELS), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ConfigError(
        f"unknown local model {model!r}: {hint}known: {', '.join(LOCAL_MODELS)}, or a path to a .gguf file "
        "(`swarm models` lists them)"
    )


@backend_kind("local", LocalOptions)
def _build_local(model: str | None, base_url: str | None, options: LocalOptions, hints: BackendHints) -> ModelBackend:
    _local_takes_no_url(base_url)
    check_local_model(model)
    from agent_swarm.swarm.backends.local import LocalBackend
    from agent_swarm.swarm.backends.local.resident import resident_dir

    return LocalBackend(
        model,
        slots=_local_slots(options, hints),
        fit_slots=_fit_slots(options),
        ctx_per_slot=options.ctx,
        threads=options.threads,
        # Small local models write far fewer broken calls with grammar-constrained actions.
        constrain_actions=options.constrain_actions,
        timeout=options.timeout,
        # The CLI passes a terminal bar (orchestrator/cli/progress.py); library callers pass their own.
        progress=hints.progress,
        stop_repeats=options.stop_repeats,
        # A running `swarm serve` of exactly this model file and settings serves it (resident.py); else,
        # with keep_alive, one is started for it that stays loaded after the run (keepalive.py).
        resident=resident_dir() if options.resident else None,
        keep_alive=hints.keep_alive if options.keep_alive is None else options.keep_alive,
    )


def _build_http(kind: str, model: str | None, base_url: str, options: HTTPOptions) -> ModelBackend:
    from agent_swarm.swarm.backends.openai_http import LaunchRamp, OpenAIBackend, RetryPolicy

    burst, rate = options.launch_burst, options.launch_rate
    return OpenAIBackend(
        base_url,
        model or "",
        flavour=options.flavour or ("vllm" if kind == "vllm" else "auto"),
        api_key=options.api_key,
        timeout=options.timeout,
        max_concurrency=options.max_concurrency,
        constrain_actions=options.constrain_actions,
        ramp=None if burst is None or rate is None else LaunchRamp(burst=burst, per_second=rate),
        retry=RetryPolicy(max_retries=options.max_retries, base_delay=options.retry_base_delay),
    )


@backend_kind("openai", HTTPOptions)
def _build_openai(model: str | None, base_url: str | None, options: HTTPOptions, hints: BackendHints) -> ModelBackend:
    if not base_url:
        raise ConfigError(
            "--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1) or SWARM_BASE_URL; "
            "for a model in this process use --backend local"
        )
    return _build_http("openai", model, base_url, options)


@backend_kind("vllm", HTTPOptions, in_process=VLLMEngineOptions)
def _build_vllm(
    model: str | None, base_url: str | None, options: HTTPOptions | VLLMEngineOptions, hints: BackendHints
) -> ModelBackend:
    if base_url and isinstance(options, HTTPOptions):
        return _build_http("vllm", model, base_url, options)
    if not model:
        raise ConfigError(
            "--backend vllm needs --base-url of a running `vllm serve`, or --model DIR to run vLLM in-process"
        )
    from agent_swarm.swarm.backends.vllm_engine import VLLMEngineBackend

    return VLLMEngineBackend(model)


@backend_kind("transformers", TransformersOptions)
def _build_transformers(
    model: str | None, base_url: str | None, options: TransformersOptions, hints: BackendHints
) -> ModelBackend:
    if not model:
        raise ConfigError("--backend transformers needs --model DIR (a local transformers model directory)")
    try:
        from agent_swarm.swarm.backends.transformers_backend import TransformersBackend
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ConfigError(f"the transformers backend is unavailable ({exc}); pip install 'agent-swarm[rl]'") from None
    return TransformersBackend.from_pretrained(model, device=options.device, dtype=options.dtype)


def _scripted_demo(model: str | None) -> Demo:
    from agent_swarm.orchestrator.demo import DEMO_TASKS, demo

    name = model or "capitals"
    if name not in DEMO_TASKS:
        raise UnknownNameError("demo", name, DEMO_TASKS)
    return demo(name)


@backend_kind("scripted", ScriptedOptions)
def _build_scripted(
    model: str | None, base_url: str | None, options: ScriptedOptions, hints: BackendHints
) -> ModelBackend:
    """The built-in scripted demo policy (``--model`` names the demo)."""
    return _scripted_demo(model).orchestrator_backend


_SHARED = frozenset(SharedOptions.model_fields)

BACKEND_TABLE_KEYS = (
    frozenset(
        key
        for entry in map(BACKENDS.get, BACKENDS)
        for options in (entry.options, entry.in_process or entry.options)
        for key in options.model_fields
    )
    | _SHARED
    | {"kind", "model", "base_url", "subagent_backend", "subagent_model"}
)
"""The keys a config file's ``[backend]`` table may hold: what the built-in kinds above take (which kind
takes which: :mod:`agent_swarm.orchestrator.backend_options`), the keys every kind takes, and the named ones."""

_ROLES = ("orchestrator", "sub-agents")


def _kind_options(
    roles: Sequence[tuple[str, str | None, str]], options: Mapping[str, Any], env: Environment, *, shared: bool = True
) -> list[BackendOptions]:
    """Each role's (kind, base URL, role) typed options: the keys its kind takes, from ``options`` else
    the environment. A key no role's kind takes raises :class:`ConfigError` naming the kinds that do
    (``shared``: the keys every kind takes, :class:`SharedOptions`, are valid too)."""
    models = [BACKENDS.get(kind).options_for(url) for kind, url, _ in roles]
    for key, value in options.items():
        if value is None or any(key in m.model_fields for m in models):
            continue
        label = " or ".join(_kind_label(kind, url, role if len(roles) > 1 else "") for kind, url, role in roles)
        takes = {k for m in models for k in m.model_fields} | (_SHARED if shared else set())
        raise ConfigError(unknown_option(key, value, label, takes, taken_by=_kinds_taking(key)))
    return [
        resolve_options(m, {k: v for k, v in options.items() if k in m.model_fields}, env, kind)
        for m, (kind, _, _) in zip(models, roles, strict=True)
    ]


def _kind_label(kind: str, base_url: str | None, role: str) -> str:
    entry = BACKENDS.get(kind)
    where = " in-process (no --base-url)" if entry.in_process is not None and not base_url else ""
    return f"{kind!r}{where}" + (f" ({role})" if role else "")


def _kinds_taking(key: str) -> list[str]:
    """The kinds that take option ``key`` (``vllm with --base-url`` where only its server form does)."""
    found = []
    for name in BACKENDS.names:
        entry = BACKENDS.get(name)
        if key in (entry.in_process.model_fields if entry.in_process else entry.options.model_fields):
            found.append(name)
        elif key in entry.options.model_fields:
            found.append(f"{name} with --base-url")
    return found


def _scripted_backends(model: str | None, cache_dir: Path | None) -> tuple[ModelBackend, ModelBackend | None]:
    d = _scripted_demo(model)
    if cache_dir is None:
        return d.orchestrator_backend, d.subagent_backend
    demo_id = f"scripted:{model or 'capitals'}"
    cached = with_subagent_cache(d.orchestrator_backend, d.subagent_backend, directory=cache_dir, model_id=demo_id)
    return d.orchestrator_backend, cached


@dataclass(frozen=True, slots=True)
class BackendPlan:
    """What :func:`build_backends` builds, resolved and checked before anything is built: each role's
    kind, model, server and typed options (``subagents`` ``None``: the orchestrator's backend serves
    the sub-agents too), and the options of every kind."""

    kind: str
    model: str | None
    base_url: str | None
    options: BackendOptions
    shared: SharedOptions
    subagents: tuple[str, str | None, str | None, BackendOptions] | None = None


def plan_backends(
    kind: str | None = None,
    model: str | None = None,
    base_url: str | None = None,
    subagent_kind: str | None = None,
    subagent_model: str | None = None,
    **options: Any,
) -> BackendPlan:
    """:func:`build_backends`' arguments resolved (the environment where they are unset) and checked:
    a key no kind in use takes, or a bad value, raises one :class:`ConfigError` line."""
    env = environment()
    kind = kind or env.backend or "local"
    BACKENDS.get(kind)  # an unknown kind fails before its options are read
    shared = resolve_options(SharedOptions, {k: v for k, v in options.items() if k in _SHARED}, env, kind)
    rest = {k: v for k, v in options.items() if k not in _SHARED}
    if kind == "scripted":  # the demo serves both roles
        return BackendPlan(kind, model, base_url, _kind_options(((kind, base_url, ""),), rest, env)[0], shared)
    s_kind = subagent_kind or kind
    s_model = subagent_model or model
    s_url = shared.subagent_base_url or (base_url if s_kind == kind else None)
    if (s_kind, s_model, s_url) == (kind, model, base_url):
        return BackendPlan(kind, model, base_url, _kind_options(((kind, base_url, ""),), rest, env)[0], shared)
    if s_kind == "scripted":
        raise ConfigError("--subagent-backend scripted only works with --backend scripted (the built-in demo)")
    orch, sub = _kind_options(((kind, base_url, _ROLES[0]), (s_kind, s_url, _ROLES[1])), rest, env)
    return BackendPlan(kind, model, base_url, orch, shared, (s_kind, s_model, s_url, sub))


def build_backends(
    kind: str | None = None,
    model: str | None = None,
    base_url: str | None = None,
    subagent_kind: str | None = None,
    subagent_model: str | None = None,
    *,
    fanout: int | None = None,
    progress: Callable[..., Any] | None = None,
    default_keep_alive: float = 0.0,
    **options: Any,
) -> tuple[ModelBackend, ModelBackend | None]:
    """(orchestrator backend, sub-agent backend or ``None`` = the same one).

    ``options`` are checked against the kinds in use (:mod:`agent_swarm.orchestrator.backend_options`: each kind's
    keys, types and ranges; :func:`plan_backends`) and go to the backends whose kind takes them; unset
    ones come from the environment. Every kind: ``subagent_base_url``, ``subagent_cache`` (a directory:
    the sub-agents' backend answers repeated deterministic calls from the replay cache there, keyed by
    what pins the sub-agents' weights, :func:`model_identity`; see :mod:`agent_swarm.swarm.backends.replay_cache`)
    and ``orchestrator_adapter`` (``local`` only: ``default``, ``none``, ``shipped`` or a LoRA ``.gguf``
    path; see :mod:`agent_swarm.orchestrator.adapters`). ``fanout`` (the widest stage: the local engine's slots when
    ``slots`` is not set), ``progress`` (a callback; the CLI draws a bar on a terminal) and
    ``default_keep_alive`` (the orchestrator's local engine stays loaded this long after the run where the
    ``keep_alive`` option is unset; ``swarm run`` passes 300) are hints a kind without a use for them ignores.
    """
    plan = plan_backends(kind, model, base_url, subagent_kind, subagent_model, **options)
    cache_dir = plan.shared.subagent_cache
    if plan.kind == "scripted":
        return _scripted_backends(plan.model, cache_dir)
    hints = BackendHints(fanout, progress, default_keep_alive)
    adapter = _orchestrator_adapter(plan.kind, plan.model, plan.shared.orchestrator_adapter)
    sub: ModelBackend | None = None
    if adapter is not None and isinstance(plan.options, LocalOptions):  # one engine; only the orchestrator's
        _local_takes_no_url(plan.base_url)  # requests apply the adapter
        orch, sub = _local_with_adapter(plan.model, adapter, plan.options, hints)
    else:
        orch = BACKENDS.get(plan.kind).build(plan.model, plan.base_url, plan.options, hints)
    s_kind, s_model, s_url = plan.kind, plan.model, plan.base_url
    if plan.subagents is not None:
        s_kind, s_model, s_url, s_options = plan.subagents
        # Another model's engine: one resident engine at a time, and it serves the orchestrator's.
        sub = BACKENDS.get(s_kind).build(s_model, s_url, s_options, BackendHints(fanout, progress))
    if cache_dir is None:
        return orch, sub
    identity = model_identity(s_kind, s_model, s_url)  # the sub-agents' weights (a base under an adapter)
    return orch, with_subagent_cache(orch, sub, directory=cache_dir, model_id=identity)


def backend_option_keys(kind: str, base_url: str | None = None) -> frozenset[str]:
    """The options backend ``kind`` takes (with ``base_url``, for ``vllm``), less the ones every kind takes."""
    return frozenset(BACKENDS.get(kind).options_for(base_url).model_fields)


def _orchestrator_adapter(kind: str, model: str | None, choice: str | None) -> OrchestratorAdapter | None:
    """The adapter a ``local`` orchestrator on ``model`` runs with (``None``: the base model)."""
    if kind != "local":
        if choice not in (None, "default", "none"):
            raise ConfigError(
                f"--orchestrator-adapter {choice} needs --backend local (llama.cpp in-process applies "
                f"the adapter); with --backend {kind} serve the adapter from your server instead"
            )
        return None
    check_local_model(model)
    from agent_swarm.swarm.backends.local import planned_model_name

    name = planned_model_name(model)
    return resolve_orchestrator_adapter(choice, name) if name else None


def model_identity(kind: str, model: str | None, base_url: str | None = None) -> str:
    """What pins a backend's weights, for the sub-agent replay cache's key.

    ``local``: the sha256 of the GGUF file (pinned in the catalogue for a named model, hashed for a
    path), or the pinned package that ships it whole; any other kind: ``kind:url:model``, which pins
    nothing the server does not, so a user who changes the weights behind an endpoint must change the
    cache's namespace or directory.
    """
    if kind == "local":
        from agent_swarm.swarm.backends.local import LOCAL_MODELS, planned_model_name

        name = planned_model_name(model)
        if name in LOCAL_MODELS:  # pinned by hash, or shipped whole in a pinned package version
            entry = LOCAL_MODELS[name]
            return f"sha256:{entry.sha256}" if entry.sha256 else f"package:{entry.install}"
        if model and model.endswith(".gguf") and os.path.isfile(model):
            from agent_swarm.swarm.backends.local.catalogue import file_sha256

            return f"sha256:{file_sha256(Path(model))}"
        raise ConfigError(
            f"the sub-agent cache cannot pin the local model {model!r}: no sha256 known; turn the cache off"
        )
    return f"{kind}:{base_url or ''}:{model or ''}"


def with_subagent_cache(
    orchestrator: ModelBackend,
    subagent: ModelBackend | None,
    *,
    directory: str | Path,
    model_id: str,
    namespace: str = "",
) -> ModelBackend:
    """The sub-agents' backend answering repeated deterministic calls from the replay cache in
    ``directory`` (:mod:`agent_swarm.swarm.backends.replay_cache`); the orchestrator's backend is never cached.
    ``subagent`` ``None`` means the sub-agents share the orchestrator's backend (one engine)."""
    from agent_swarm.swarm.backends.replay_cache import CachedBackend, ReplayCache

    return CachedBackend(subagent or orchestrator, ReplayCache(directory), model_id=model_id, namespace=namespace)
