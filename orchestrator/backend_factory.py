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
``subagent_backend`` / ``subagent_model`` / ``subagent_base_url``) or from the environment:
``SWARM_BACKEND``, ``SWARM_MODEL``, ``SWARM_BASE_URL``, ``SWARM_SUBAGENT_BACKEND``,
``SWARM_SUBAGENT_MODEL`` (read by the CLI), and here ``SWARM_SUBAGENT_BASE_URL``, ``SWARM_API_KEY``
(else ``OPENAI_API_KEY``), ``SWARM_TIMEOUT``, ``SWARM_LOCAL_SLOTS``, ``SWARM_LOCAL_CTX``, ``SWARM_LOCAL_THREADS``.
Explicit arguments win over the environment.

When the sub-agents ask for the same kind, model and URL as the orchestrator, one backend (one
engine) serves both, so a local model is loaded once and its slots batch every agent. A ``local``
orchestrator runs with a trained LoRA adapter when ``orchestrator_adapter`` (``--orchestrator-adapter``)
names one or a shipped adapter is the default for its model (:mod:`orchestrator.adapters`): the
engine then loads it once, the orchestrator's requests apply it and the sub-agents' do not.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.adapters import OrchestratorAdapter, resolve_orchestrator_adapter
from orchestrator.environment import environment
from swarm.backend import ModelBackend
from swarm.backends.openai_http import Flavour
from swarm.errors import ConfigError, UnknownNameError
from swarm.registry import Registry

if TYPE_CHECKING:
    from orchestrator.demo import Demo

__all__ = [
    "BACKENDS",
    "BACKEND_TABLE_KEYS",
    "BackendBuilder",
    "build_backend",
    "build_backends",
    "check_local_model",
    "model_identity",
    "with_subagent_cache",
]

_FLAVOURS: tuple[Flavour, ...] = ("auto", "vllm", "llamacpp", "openai")
_OPTIONS = frozenset(
    {
        "api_key",
        "constrain_actions",
        "ctx",
        "device",
        "dtype",
        "fanout",
        "flavour",
        "launch_burst",
        "launch_rate",
        "max_concurrency",
        "max_retries",
        "orchestrator_adapter",
        "progress",
        "retry_base_delay",
        "slots",
        "stop_repeats",
        "subagent_base_url",
        "subagent_cache",
        "threads",
        "timeout",
    }
)

BACKEND_TABLE_KEYS = _OPTIONS | {"kind", "model", "base_url", "subagent_backend", "subagent_model"}
"""The keys a config file's ``[backend]`` table may hold."""


def _local_ctx(options: dict[str, Any]) -> int | None:
    """Each slot's context: as set (``[backend] ctx``, ``SWARM_LOCAL_CTX``), else ``None``: the engine
    sizes it from the model and the free memory (swarm.backends.local.sizing; 4,096 once overflowed
    on a 6-entity wide lookup, 8,192 on a single agent reading four companies' documents)."""
    value = options.get("ctx") or environment().local_ctx
    return None if value is None else int(value)


def _local_slots(options: dict[str, Any]) -> int:
    # One slot per parallel sub-agent (capped: each slot reserves its own context memory).
    return int(options.get("slots") or environment().local_slots or min(int(options.get("fanout") or 8), 16))


def _fit_slots(options: dict[str, Any]) -> bool:
    # Slots nobody set give way to context: fewer, each with the model's full context (sizing.py).
    return not (options.get("slots") or environment().local_slots)


def _local_progress(options: dict[str, Any]) -> Any:
    # The CLI passes a terminal bar (orchestrator/cli/progress.py); library callers pass their own.
    return options.get("progress") or None


def _local_with_adapter(
    model: str | None, adapter: OrchestratorAdapter, options: dict[str, Any]
) -> tuple[ModelBackend, ModelBackend]:
    """(orchestrator applying ``adapter``, sub-agents on the base model): one engine, whose slots
    are the sub-agents' plus ``max(1, slots // 8)`` reserved for the orchestrator's requests."""
    from swarm.backends.local import LocalBackend, LocalEngine

    slots = _local_slots(options)
    orch_slots = max(1, slots // 8)
    engine = LocalEngine(
        model,
        slots=slots + orch_slots,
        fit_slots=_fit_slots(options),
        ctx_per_slot=_local_ctx(options),
        threads=options.get("threads") or environment().local_threads,
        progress=_local_progress(options),
        lora_adapters=[adapter.path],
        adapter_version=adapter.version,
        adapter_slots=orch_slots,
    )
    common: dict[str, Any] = {
        "engine": engine,
        "constrain_actions": bool(options.get("constrain_actions", True)),
        "timeout": options.get("timeout") or environment().timeout_s or 600.0,
        "stop_repeats": bool(options.get("stop_repeats", True)),
    }
    return LocalBackend(lora_scale=1.0, owns_engine=True, **common), LocalBackend(**common)


BackendBuilder = Callable[[str | None, str | None, dict[str, Any]], ModelBackend]
"""``builder(model, base_url, options) -> ModelBackend``: one entry of :data:`BACKENDS`."""

BACKENDS: Registry[BackendBuilder] = Registry("backend")
"""Backend builders by kind (``--backend`` / ``--subagent-backend`` / ``[backend] kind``)."""


def build_backend(kind: str, model: str | None = None, base_url: str | None = None, **options: Any) -> ModelBackend:
    """One backend of ``kind``; ``options`` as in :func:`build_backends` (``orchestrator_adapter``
    is applied by :func:`build_backends` only)."""
    return BACKENDS.get(kind)(model, base_url, options)


def _timeout(options: dict[str, Any], default: float) -> float:
    return float(options.get("timeout") or environment().timeout_s or default)


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
    from swarm.backends.local import LOCAL_MODELS, model_available

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


@BACKENDS.register("local")
def _build_local(model: str | None, base_url: str | None, options: dict[str, Any]) -> ModelBackend:
    _local_takes_no_url(base_url)
    check_local_model(model)
    from swarm.backends.local import LocalBackend

    return LocalBackend(
        model,
        slots=_local_slots(options),
        fit_slots=_fit_slots(options),
        ctx_per_slot=_local_ctx(options),
        threads=options.get("threads") or environment().local_threads,
        # Small local models write far fewer broken calls with grammar-constrained actions.
        constrain_actions=bool(options.get("constrain_actions", True)),
        timeout=_timeout(options, 600.0),
        progress=_local_progress(options),
        stop_repeats=bool(options.get("stop_repeats", True)),
    )


def _build_http(kind: str, model: str | None, base_url: str, options: dict[str, Any]) -> ModelBackend:
    from swarm.backends.openai_http import LaunchRamp, OpenAIBackend, RetryPolicy

    burst, rate = options.get("launch_burst"), options.get("launch_rate")
    ramp = None
    if burst is not None or rate is not None:
        if burst is None or rate is None:
            raise ConfigError(
                f"a launch ramp needs both launch_burst and launch_rate (got {burst=}, {rate=}); "
                "e.g. launch_burst = 5, launch_rate = 1.4 (requests per second)"
            )
        ramp = LaunchRamp(burst=int(burst), per_second=float(rate))
    flavour = options.get("flavour") or ("vllm" if kind == "vllm" else "auto")
    if flavour not in _FLAVOURS:
        raise UnknownNameError("server flavour", str(flavour), _FLAVOURS)
    return OpenAIBackend(
        base_url,
        model or "",
        flavour=flavour,
        api_key=options.get("api_key") or environment().api_key,
        timeout=_timeout(options, 120.0),
        max_concurrency=int(options.get("max_concurrency") or 8),
        constrain_actions=bool(options.get("constrain_actions", False)),
        ramp=ramp,
        retry=RetryPolicy(
            max_retries=int(options.get("max_retries", 4)),
            base_delay=float(options.get("retry_base_delay", 0.5)),
        ),
    )


@BACKENDS.register("openai")
def _build_openai(model: str | None, base_url: str | None, options: dict[str, Any]) -> ModelBackend:
    if not base_url:
        raise ConfigError(
            "--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1) or SWARM_BASE_URL; "
            "for a model in this process use --backend local"
        )
    return _build_http("openai", model, base_url, options)


@BACKENDS.register("vllm")
def _build_vllm(model: str | None, base_url: str | None, options: dict[str, Any]) -> ModelBackend:
    if base_url:
        return _build_http("vllm", model, base_url, options)
    if not model:
        raise ConfigError(
            "--backend vllm needs --base-url of a running `vllm serve`, or --model DIR to run vLLM in-process"
        )
    from swarm.backends.vllm_engine import VLLMEngineBackend

    return VLLMEngineBackend(model)


@BACKENDS.register("transformers")
def _build_transformers(model: str | None, base_url: str | None, options: dict[str, Any]) -> ModelBackend:
    if not model:
        raise ConfigError("--backend transformers needs --model DIR (a local transformers model directory)")
    try:
        from swarm.backends.transformers_backend import TransformersBackend
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ConfigError(f"the transformers backend is unavailable ({exc}); pip install 'agent-swarm[rl]'") from None
    return TransformersBackend.from_pretrained(
        model, device=options.get("device") or "cpu", dtype=options.get("dtype") or "float32"
    )


def _scripted_demo(model: str | None) -> Demo:
    from orchestrator.demo import DEMO_TASKS, demo

    name = model or "capitals"
    if name not in DEMO_TASKS:
        raise UnknownNameError("demo", name, DEMO_TASKS)
    return demo(name)


@BACKENDS.register("scripted")
def _build_scripted(model: str | None, base_url: str | None, options: dict[str, Any]) -> ModelBackend:
    """The built-in scripted demo policy (``--model`` names the demo)."""
    return _scripted_demo(model).orchestrator_backend


def build_backends(
    kind: str | None = None,
    model: str | None = None,
    base_url: str | None = None,
    subagent_kind: str | None = None,
    subagent_model: str | None = None,
    **options: Any,
) -> tuple[ModelBackend, ModelBackend | None]:
    """(orchestrator backend, sub-agent backend or ``None`` = the same one).

    Options: ``subagent_base_url``, ``api_key``, ``timeout`` (s), ``max_concurrency`` (HTTP requests
    in flight per endpoint), ``max_retries`` and ``retry_base_delay`` (s, doubled per retry) for
    429/5xx/connection errors/timeouts/broken bodies, ``launch_burst`` and ``launch_rate`` (HTTP: a
    launch ramp, ``launch_burst`` requests at once then ``launch_rate`` per second),
    ``flavour`` (openai/vllm/llamacpp/auto),
    ``constrain_actions`` (JSON schema-constrained tool calls), ``stop_repeats`` (local: stop a
    generation that loops verbatim, default on), ``slots``/``ctx``/``threads`` (local
    engine; ``fanout``, the widest stage, sizes ``slots`` when it is not given), ``device``/``dtype``
    (transformers), ``progress`` (a callback; the CLI draws a bar on a terminal),
    ``orchestrator_adapter`` (``local`` only: ``default``, ``none``, ``shipped`` or a LoRA ``.gguf``
    path; see :mod:`orchestrator.adapters`), ``subagent_cache`` (a directory: the sub-agents' backend
    answers repeated deterministic calls from the replay cache there, keyed by what pins the
    sub-agents' weights, :func:`model_identity`; see :mod:`swarm.backends.replay_cache`).
    """
    unknown = set(options) - _OPTIONS
    if unknown:
        raise ConfigError(
            f"unknown backend option(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(_OPTIONS))}"
        )
    kind = kind or environment().backend or "local"
    cache_dir = options.pop("subagent_cache", None)
    sub_url = options.pop("subagent_base_url", None) or environment().subagent_base_url
    if kind == "scripted":
        d = _scripted_demo(model)
        if cache_dir is None:
            return d.orchestrator_backend, d.subagent_backend
        demo_id = f"scripted:{model or 'capitals'}"
        cached = with_subagent_cache(d.orchestrator_backend, d.subagent_backend, directory=cache_dir, model_id=demo_id)
        return d.orchestrator_backend, cached
    s_kind = subagent_kind or kind
    s_model = subagent_model or model
    s_url = sub_url or (base_url if s_kind == kind else None)
    adapter_choice = options.pop("orchestrator_adapter", None)
    adapter = _orchestrator_adapter(kind, model, adapter_choice)
    base_sub: ModelBackend | None = None
    if adapter is not None:  # one engine: the orchestrator applies the adapter, base_sub does not
        _local_takes_no_url(base_url)
        orch, base_sub = _local_with_adapter(model, adapter, options)
    else:
        orch = build_backend(kind, model, base_url, **options)
    sub: ModelBackend | None = base_sub
    if (s_kind, s_model, s_url) != (kind, model, base_url):
        if s_kind == "scripted":
            raise ConfigError("--subagent-backend scripted only works with --backend scripted (the built-in demo)")
        sub = build_backend(s_kind, s_model, s_url, **options)
    if cache_dir is None:
        return orch, sub
    identity = model_identity(s_kind, s_model, s_url)  # the sub-agents' weights (a base under an adapter)
    return orch, with_subagent_cache(orch, sub, directory=cache_dir, model_id=identity)


def _orchestrator_adapter(kind: str, model: str | None, choice: Any) -> OrchestratorAdapter | None:
    """The adapter a ``local`` orchestrator on ``model`` runs with (``None``: the base model)."""
    if choice is not None and not isinstance(choice, str):
        raise ConfigError(f"orchestrator_adapter must be a string (default, none, shipped or a path); got {choice!r}")
    if kind != "local":
        if choice not in (None, "default", "none"):
            raise ConfigError(
                f"--orchestrator-adapter {choice} needs --backend local (llama.cpp in-process applies "
                f"the adapter); with --backend {kind} serve the adapter from your server instead"
            )
        return None
    check_local_model(model)
    from swarm.backends.local import planned_model_name

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
        from swarm.backends.local import LOCAL_MODELS, planned_model_name

        name = planned_model_name(model)
        if name in LOCAL_MODELS:  # pinned by hash, or shipped whole in a pinned package version
            entry = LOCAL_MODELS[name]
            return f"sha256:{entry.sha256}" if entry.sha256 else f"package:{entry.install}"
        if model and model.endswith(".gguf") and os.path.isfile(model):
            from swarm.backends.local.catalogue import file_sha256

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
    ``directory`` (:mod:`swarm.backends.replay_cache`); the orchestrator's backend is never cached.
    ``subagent`` ``None`` means the sub-agents share the orchestrator's backend (one engine)."""
    from swarm.backends.replay_cache import CachedBackend, ReplayCache

    return CachedBackend(subagent or orchestrator, ReplayCache(directory), model_id=model_id, namespace=namespace)
