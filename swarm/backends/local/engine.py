"""llama.cpp's server in this process (``xllamacpp``) on one GGUF model, with parallel slots."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import threading
import time
import warnings
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from agent_swarm.swarm.backends.local.catalogue import (
    ENGINE_INSTALL,
    LOCAL_MODELS,
    Progress,
    cache_dir,
    engine_available,
    file_sha256,
    planned_model_name,
    resolve_model,
)
from agent_swarm.swarm.backends.local.cpu import default_threads
from agent_swarm.swarm.backends.local.keepalive import ServeRequest, spawn_resident
from agent_swarm.swarm.backends.local.prefix import CacheRoom, PrefixCache, Slot, SlotPool
from agent_swarm.swarm.backends.local.resident import Attachment, EngineRequest, FileIdentity, attach, resident_dir
from agent_swarm.swarm.backends.local.sizing import MIN_CONTEXT, auto_context
from agent_swarm.swarm.errors import BackendError, ConfigError

if TYPE_CHECKING:
    import httpx

__all__ = ["EngineStartup", "LocalEngine"]

GRAMMARS_FILE = "grammars.json"
"""Beside the prefix states: action grammar digest -> whether this model and engine enforce it."""


@dataclass(frozen=True, slots=True)
class EngineStartup:
    """What one start of the engine cost (seconds): finding, assembling (first run only) and
    hash-checking the model file, then loading it and probing its template."""

    hash_check_s: float = 0.0
    model_load_s: float = 0.0
    total_s: float = 0.0


class LocalEngine:
    """llama.cpp's server running in this process on one GGUF model with ``slots`` parallel slots.

    Independent of any event loop (it runs in its own threads), so one engine can serve many
    :class:`LocalBackend` objects, test cases and ``anyio.run`` calls. :meth:`start` blocks while the
    model is assembled (first use) and loaded.

    Args:
        model: a name from :data:`LOCAL_MODELS`, a path to a ``.gguf`` file, or ``None`` for the best
            installed model.
        slots: parallel sequences (size it to the sub-agent fan-out).
        fit_slots: with ``ctx_per_slot=None``, start fewer than ``slots`` where the free memory cannot
            give each its own cache of the model's full context up to 32,768 tokens (``auto_context``);
            the :attr:`slots` chosen are known after :meth:`plan` or :meth:`start`. (A shared cache,
            ``pool``, starts faster but llama.cpp then clears idle slots, so every turn of a
            conversation is prefilled again: ``docs/local-speed.md``.)
        ctx_per_slot: context length of each slot in tokens; ``None`` sizes it at start from the
            model and the free memory (:func:`~agent_swarm.swarm.backends.local.sizing.auto_context`, at least
            8,192, at most the trained context), said in :attr:`context_note`.
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
        prefix_cache: keep the KV state of fixed prompt prefixes on disk across runs
            (:mod:`agent_swarm.swarm.backends.local.prefix`, under ``cache_dir()/prefixes``).
        resident: a directory where a resident engine (``swarm serve``,
            :mod:`agent_swarm.swarm.backends.local.resident`) may run: when the model is found, this
            engine attaches to it if it serves exactly this model file with settings asked alike (its
            slots and context are then the resident engine's, said in :attr:`context_note`), else it
            starts its own as without one. ``None`` (default) always starts its own.
        pool: with ``ctx_per_slot`` set, the tokens of one KV cache all slots share, each slot
            holding up to ``ctx_per_slot`` of it (0, the default: each slot has its own).
        keep_alive: with ``resident`` set and no resident engine running there, :meth:`start` starts one
            with exactly this engine's settings in a background process
            (:mod:`agent_swarm.swarm.backends.local.keepalive`) and attaches to it, so the model stays loaded
            for this many seconds after the last run lets go of it; ``0`` (default) starts an own engine.
    """

    # What a start finds out and sets (the values before the first start; immutable, so shared safely).
    path: Path | None = None
    """The model file (set when the model is found: :meth:`plan` or :meth:`start`)."""
    prefixes: PrefixCache | None = None
    """The fixed-prefix cache (set at start when ``prefix_cache``)."""
    adapter_key: str = ""
    """The sha256 of the LoRA adapter files, naming the prefixes computed with them."""
    startup: EngineStartup = EngineStartup()
    """What the last start cost."""
    _startup_reported: bool = True
    generation: int = 0
    """Incremented at every start; backends reconnect when it changes (a restart moves the port)."""
    tools_in_prompt: bool = False
    """True when the model's chat template ignores ``tools`` (SmolLM2): tools go in the system prompt."""
    tool_tags: tuple[str | int, str | int] = ("<tool_call>", "</tool_call>")
    """The hermes tool-call tags as the action grammar writes them: token ids when the tokenizer
    has them as single tokens (Qwen), else their text."""
    _server: Any = None
    attached: Attachment | None = None
    """The resident engine this engine uses instead of its own (set when the model is found)."""
    resident_note: str = ""
    """Why a resident engine that runs was not used (empty when none runs or it is used)."""

    def __init__(
        self,
        model: str | None = None,
        *,
        slots: int = 4,
        ctx_per_slot: int | None = 4096,
        threads: int | None = None,
        progress: Progress | None = None,
        lora_adapters: Sequence[Path] = (),
        adapter_version: str | None = None,
        adapter_slots: int | None = None,
        prefix_cache: bool = True,
        fit_slots: bool = False,
        resident: Path | None = None,
        pool: int = 0,
        keep_alive: float = 0.0,
    ) -> None:
        _check_layout(slots, ctx_per_slot, pool)
        if keep_alive < 0:
            raise ConfigError(f"keep_alive must be 0 (off) or a number of seconds, not {keep_alive!r}")
        self.keep_alive = keep_alive
        self.pool = pool
        """Tokens of the KV cache all slots share (set; never planned); 0: each slot has its own
        (``slots x ctx_per_slot`` in all)."""
        self.requested = model
        self.request = EngineRequest(slots=slots, fit_slots=fit_slots, ctx=ctx_per_slot, threads=threads)
        """The settings as asked (a resident engine is used only when it was asked for alike)."""
        self.resident = resident
        # Known before the model loads (a prompt profile is chosen from it when an orchestrator is
        # built, which is before the first request starts the engine).
        self.name = planned_model_name(model)
        self.slots = slots
        self.auto_context = ctx_per_slot is None
        self.ctx_per_slot = MIN_CONTEXT if ctx_per_slot is None else ctx_per_slot
        """Each slot's context in tokens (with ``ctx_per_slot=None``: a floor until :meth:`start` sizes it)."""
        shared = f" sharing a KV cache of {pool} tokens" if pool else ""
        self.context_note = (
            "" if ctx_per_slot is None else f"{ctx_per_slot} tokens per slot x {slots} slots{shared} (set)"
        )
        """How :attr:`ctx_per_slot` was chosen (the run header and ``swarm doctor`` show it)."""
        self._planned = ctx_per_slot is not None
        self.fit_slots = fit_slots
        self._threads = threads
        self.progress = progress
        self.lora_adapters = tuple(Path(a) for a in lora_adapters)
        self.adapter_version = adapter_version
        self.adapter_slots = max(1, slots // 2) if adapter_slots is None else adapter_slots
        if self.lora_adapters and not 1 <= self.adapter_slots < slots:
            raise ConfigError(
                f"adapter_slots must leave slots to both kinds of request: 1 <= {self.adapter_slots} < slots={slots}"
            )
        self._pools = {True: SlotPool(()), False: SlotPool(())}
        """Slots for requests that apply an adapter (True) and for the others; set at start."""
        self.use_prefix_cache = prefix_cache
        self.pieces: dict[int, str] = {}
        """Token id -> text, for the end-of-generation tokens seen (see ``LocalBackend._eog_text``)."""
        self.grammars: dict[str, bool] = {}
        """Action grammars checked on this engine: digest -> whether llama.cpp enforces it (kept
        beside the prefix states, so later runs of the same model and engine skip the check)."""
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
        """Assemble (if needed) and load the model, or attach to a matching resident engine;
        idempotent and thread-safe."""
        with self._lock:
            if self._server is not None:
                return self
            if not engine_available():
                raise ConfigError(f"the local engine is not installed; install it with\n  {ENGINE_INSTALL}")
            started = time.perf_counter()
            self._plan()
            if self.attached is not None and not self.attached.alive():  # it stopped since: run our own
                self.attached.close()
                self.attached = None
            prefix_dir = self._prefix_dir() if self.use_prefix_cache else None
            checked = time.perf_counter()
            if self.progress is not None:
                self.progress("load", 0, 1)
            if self._keeps_alive():
                self._start_resident()
                if self.attached is not None and prefix_dir is not None:
                    prefix_dir = self._prefix_dir()  # named by the layout, now the resident engine's
            self._server = self.attached or self._launch(prefix_dir)
            self.generation += 1
            first_base = self.adapter_slots if self.lora_adapters else 0
            # A new server's slots hold nothing; a resident one's may hold anything, which no request
            # assumes: a slot's prefix state is restored or computed unless this engine put it there.
            room = CacheRoom(self.pool) if self.pool else None  # both kinds' requests share it
            self._pools = {
                True: SlotPool(range(first_base), room),
                False: SlotPool(range(first_base, self.slots), room),
            }
            self.tools_in_prompt, self.tool_tags = _template_facts(self.base_url)
            self.prefixes = PrefixCache.open(prefix_dir) if prefix_dir is not None else None
            self.grammars = _read_grammars(prefix_dir) if prefix_dir is not None else {}
            done = time.perf_counter()
            self.startup = EngineStartup(checked - started, done - checked, done - started)
            self._startup_reported = False
            if self.progress is not None:
                self.progress("load", 1, 1)
            return self

    def _launch(self, prefix_dir: Path | None) -> Any:
        """llama.cpp's server in this process on the planned model and layout."""
        import xllamacpp

        p = xllamacpp.CommonParams()
        p.model.path = str(self.path)
        p.n_parallel = self.slots
        if self.pool:  # one cache all slots share, each capped at its context (sizing.py)
            p.kv_unified = True
            p.n_ctx = self.pool
            p.kv_unified_per_slot = self.ctx_per_slot
        else:
            p.n_ctx = self.slots * self.ctx_per_slot
        p.cpuparams.n_threads = self.threads
        p.cpuparams_batch.n_threads = self.threads
        p.use_jinja = True
        p.verbosity = -1
        p.lora_adapters = [_lora_info(xllamacpp, a) for a in self.lora_adapters]
        p.lora_init_without_apply = True
        if prefix_dir is not None:
            p.slot_save_path = f"{prefix_dir}/"
        return xllamacpp.Server(p)

    def warm_up(self) -> None:
        """Decode one grammar-constrained token on the started server (best effort). llama.cpp sets up
        its grammar engine (llguidance) at the first constrained request of a process, 0.7-1.1 s
        measured, which is else part of the first turn that a run waits for; ``swarm serve`` pays it
        before it says it is ready. What the slot holds afterwards no request assumes."""
        import httpx

        from agent_swarm.swarm.backend import ToolSpec
        from agent_swarm.swarm.backends.toolparse import action_grammar

        grammar = action_grammar([ToolSpec(name="warm_up")], allow_answer=False)
        body = {"prompt": "Hi", "n_predict": 1, "temperature": 0.0, "cache_prompt": False, "grammar": grammar}
        with contextlib.suppress(httpx.HTTPError), httpx.Client(timeout=120) as client:
            client.post(f"{self.base_url}/completion", json=body)

    def plan(self) -> str:
        """Find the model (assembling it on first use) and size each slot's context, without loading
        anything; how, in one line (the run header and ``swarm doctor`` show it). The size is chosen
        once: :meth:`start` and every restart keep it, so the KV layout never changes under a run."""
        with self._lock:
            self._plan()
        if self.resident_note:
            return f"{self.context_note}; {self.resident_note}"
        if self._keeps_alive():
            return (
                f"{self.context_note}; loaded in a background engine that stays {self.keep_alive:g} s after the "
                "run for the next one (`swarm serve --stop` ends it; [backend] keep_alive = 0: no background engine)"
            )
        if not self.lora_adapters:
            return self.context_note
        return f"{self.context_note}; {self.adapter_slots} of the slots serve the orchestrator's adapter"

    def _plan(self) -> None:
        self.name, self.path = resolve_model(self.requested, self.progress)
        if self.resident is not None and not self.lora_adapters and self.attached is None and self._server is None:
            self._attach(self.resident)
        if not self._planned:
            keep = self.adapter_slots + 1 if self.lora_adapters else 1
            plan = auto_context(self.path, self.slots, fit_slots=self.fit_slots, keep=keep)
            self.ctx_per_slot, self.context_note, self.slots = plan.ctx_per_slot, plan.note, plan.slots
            self._planned = True

    def serve_request(self, idle_s: float, directory: Path | None = None) -> ServeRequest:
        """What a background process needs to serve this engine's model with this engine's settings
        (so this engine attaches to it) in ``directory`` (default: :attr:`resident`, else
        :func:`~agent_swarm.swarm.backends.local.resident.resident_dir`), exiting after ``idle_s`` unused."""
        r = self.request
        return ServeRequest(
            model=self.requested,
            slots=r.slots,
            fit_slots=r.fit_slots,
            ctx_per_slot=r.ctx,
            threads=r.threads,
            pool=self.pool,
            prefix_cache=self.use_prefix_cache,
            idle_s=idle_s,
            directory=str(directory or self.resident or resident_dir()),
        )

    @classmethod
    def serving(cls, request: ServeRequest) -> LocalEngine:
        """The engine ``request`` asks for (not started; it never attaches to another)."""
        return cls(
            request.model,
            slots=request.slots,
            fit_slots=request.fit_slots,
            ctx_per_slot=request.ctx_per_slot,
            threads=request.threads,
            pool=request.pool,
            prefix_cache=request.prefix_cache,
        )

    def _keeps_alive(self) -> bool:
        """Whether :meth:`start` would start a resident engine: asked to, and none runs (planned)."""
        return (
            self.keep_alive > 0
            and self.resident is not None
            and not self.lora_adapters
            and self.attached is None
            and self._server is None
            and not self.resident_note  # one runs that this engine may not use: never a second
        )

    def _start_resident(self) -> None:
        """Start a resident engine of exactly this engine's settings and attach to it; where that
        fails, :attr:`resident_note` says why and this engine starts its own."""
        assert self.resident is not None
        state, why = spawn_resident(self.serve_request(self.keep_alive))
        if state is not None:
            self._attach(self.resident)
            if self.attached is not None:
                return
        self.resident_note = why or self.resident_note or "the background engine was taken by another run"
        # The run header promised a background engine: say, once, that this run loads its own.
        warnings.warn(f"{self.resident_note}; this run loads the model itself", RuntimeWarning, stacklevel=2)

    def _attach(self, directory: Path) -> None:
        """Use the resident engine in ``directory`` if it serves exactly this model and settings."""
        assert self.path is not None
        found, why = attach(
            directory, file=FileIdentity.of(self.path), sha256=self.model_sha256(), request=self.request
        )
        if found is None:
            self.resident_note = why
            return
        s = found.state
        self.attached = found
        self.slots, self.ctx_per_slot, self._threads, self._planned = s.slots, s.ctx_per_slot, s.threads, True
        self.pool = s.pool  # its one client at a time counts the room of a shared cache, as its own
        self.context_note = f"{s.context_note}; attached to the resident engine of `swarm serve` (pid {s.pid})"
        self.resident_note = ""

    def model_sha256(self) -> str:
        """The model file's sha256: pinned in the catalogue, else computed (cached by the file's identity)."""
        assert self.path is not None, "the model is not found yet: call plan() or start()"
        entry = LOCAL_MODELS.get(self.name)
        return entry.sha256 if entry is not None and entry.sha256 else file_sha256(self.path)

    def remember_grammar(self, key: str, enforced: bool) -> None:
        """Record whether llama.cpp enforces the action grammar with digest ``key`` (best effort on disk)."""
        self.grammars[key] = enforced
        if self.prefixes is None:
            return
        target = self.prefixes.directory / GRAMMARS_FILE
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        try:
            tmp.write_text(json.dumps({**_read_grammars(self.prefixes.directory), key: enforced}), encoding="utf-8")
            tmp.replace(target)
        except OSError:
            tmp.unlink(missing_ok=True)

    def take_startup(self) -> EngineStartup | None:
        """What the last start cost, the first time it is asked for after that start (so that one
        completion per start carries it into the record), else ``None``."""
        with self._lock:
            if self._startup_reported or self._server is None:
                return None
            self._startup_reported = True
            return self.startup

    def _prefix_dir(self) -> Path:
        """Where this model's prefix states live: named by the model file's sha256, the engine's
        version and the KV layout (a state is only valid for the exact weights and layout that wrote it)."""
        model_sha = self.model_sha256()
        self.adapter_key = "".join(file_sha256(a)[:16] for a in self.lora_adapters)
        version = importlib.metadata.version("xllamacpp")
        # and the KV layout: llama.cpp refuses a state written by an engine of other slot sizes
        # ("No available space in KV cache"), so engines of different layouts never share states
        layout = f"{self.slots}x{self.ctx_per_slot}" + (f"-pool{self.pool}" if self.pool else "")
        return cache_dir() / "prefixes" / f"{model_sha[:32]}-xllamacpp{version}-{layout}"

    @contextlib.asynccontextmanager
    async def slot(self, adapter: bool, prompt: Sequence[int] = (), tokens: int = 0) -> AsyncIterator[Slot]:
        """A slot reserved for one request of this kind: of the free ones, the one whose KV cache
        shares the longest prefix with ``prompt``, else the least recently used. The caller sets
        :attr:`Slot.held` to what the slot holds afterwards (a failed request leaves it unknown).
        With a shared cache (:attr:`pool`), it waits until the requests under way leave room for
        ``tokens`` (the request's prompt and completion)."""
        pool = self._pools[adapter and bool(self.lora_adapters)]
        while True:
            slot = pool.take(prompt, tokens)
            if slot is not None:
                break
            # Every slot of this kind is busy (several backends, maybe on other event loops, share
            # it), or the shared cache is full.
            await anyio.sleep(0.01)
        try:
            yield slot
        except BaseException:
            slot.held = ()
            raise
        finally:
            pool.give(slot)

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
            attached, self.attached = self.attached, None
        if attached is not None:  # the resident engine goes on; only our hold on it ends
            attached.close()
        del server  # xllamacpp stops its server thread in the destructor

    def __enter__(self) -> LocalEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_layout(slots: int, ctx_per_slot: int | None, pool: int) -> None:
    """A KV layout llama.cpp can start, else a :class:`ConfigError` that says what to set."""
    if slots < 1:
        raise ConfigError(f"slots must be >= 1, got {slots}")
    if ctx_per_slot is not None and ctx_per_slot < 256:
        raise ConfigError(f"ctx_per_slot must be >= 256 tokens, got {ctx_per_slot}")
    if pool and (ctx_per_slot is None or pool < ctx_per_slot):
        raise ConfigError(
            f"pool={pool} tokens cannot hold one slot's context (ctx_per_slot={ctx_per_slot}); "
            "set ctx_per_slot to at most the pool, or pool=0"
        )


def _read_grammars(directory: Path) -> dict[str, bool]:
    try:
        data = json.loads((directory / GRAMMARS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, bool)} if isinstance(data, dict) else {}


def _lora_info(xllamacpp: Any, path: Path) -> Any:
    info = xllamacpp.CommonAdapterLoraInfo()
    info.path = str(path)
    info.scale = 0.0  # loaded, not applied: requests that name no adapter get the base model
    return info


def _template_facts(base_url: str) -> tuple[bool, tuple[str | int, str | int]]:
    """Whether tools go in the system prompt, and the tool-call tags, asked of a started server through one
    client (each client builds a TLS context, about 20 ms, which plain HTTP to loopback never uses)."""
    import httpx

    with httpx.Client(timeout=30) as client:
        return not _template_renders_tools(client, base_url), _tag_tokens(client, base_url)


def _template_renders_tools(client: httpx.Client, base_url: str) -> bool:
    """Whether the model's chat template renders a ``tools`` list (SmolLM2's does not)."""
    probe = "swarm_probe_tool_7f3a"
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": probe, "parameters": {"type": "object"}}}],
    }
    resp = client.post(f"{base_url}/apply-template", json=body)
    if resp.status_code != 200:
        raise BackendError(f"llama.cpp /apply-template failed with HTTP {resp.status_code}: {resp.text[:200]}")
    return probe in str(resp.json().get("prompt", ""))


def _tag_tokens(client: httpx.Client, base_url: str) -> tuple[str | int, str | int]:
    """The hermes tool-call tags as token ids when the tokenizer has each as one token, else text."""
    tags: list[str | int] = []
    for tag in ("<tool_call>", "</tool_call>"):
        resp = client.post(f"{base_url}/tokenize", json={"content": tag, "parse_special": True})
        ids = resp.json().get("tokens") if resp.status_code == 200 else None
        tags.append(ids[0] if isinstance(ids, list) and len(ids) == 1 and isinstance(ids[0], int) else tag)
    return tags[0], tags[1]
