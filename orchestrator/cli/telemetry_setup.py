"""Installs the OpenTelemetry SDK for the ``swarm`` CLI (the only place that does).

What :func:`start_tracing` builds:

- a ``TracerProvider`` with resource ``service.name=agent-swarm`` (``OTEL_SERVICE_NAME`` and
  ``OTEL_RESOURCE_ATTRIBUTES`` still win) and ``service.version``;
- an OTLP exporter (HTTP/protobuf or gRPC) behind a ``BatchSpanProcessor``, configured by the standard
  ``OTEL_EXPORTER_OTLP_*`` variables or ``--otlp-endpoint``/``--otlp-protocol``. With nothing configured
  it targets a local Jaeger v2 on ``http://localhost:4318`` *if one is listening* (a 0.2 s TCP probe);
  when nothing listens there the run goes on without network export and says so once, instead of
  retrying into a dead port. An explicitly configured endpoint is always used;
- the always-on OTLP JSON-lines file ``<out>/<episode-id>/trace.jsonl`` beside ``episode.json``,
  written by the maintained ``opentelemetry-exporter-otlp-json-file`` exporter (the format Jaeger's UI
  "Upload JSON" accepts), one file per episode, one line per :data:`ENCODE_CHUNK` spans.

Encoding is most of what tracing costs (``bench/README.md``, "Tracing overhead"): the resource hashes
once instead of once per exported span, and the file is encoded in small chunks, whose temporary
objects die before the cyclic GC would promote them.

:meth:`Tracing.shutdown` flushes the file first (local, fast), then the network exporter on a daemon
thread bounded by a timeout, so an unreachable receiver can never hang the CLI on exit (normal exit,
error or Ctrl-C). In the CLI process the SDK's log lines (one per export retry) are held back during the
run and summarised in one warning. ``OTEL_SDK_DISABLED=true`` turns all of it off; ``OTEL_TRACES_EXPORTER=none`` turns
off only the network export.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, get_current_span
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

from agent_swarm.orchestrator.environment import environment
from agent_swarm.orchestrator.store import episode_dir
from agent_swarm.swarm import __version__
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.tracing import Telemetry, attr

if TYPE_CHECKING:
    from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter

__all__ = [
    "CONTENT_BATCH_SIZE",
    "DEFAULT_GRPC_ENDPOINT",
    "DEFAULT_HTTP_ENDPOINT",
    "DEFAULT_TRACED_SUBAGENTS",
    "QUEUE_SIZE",
    "SERVICE_NAME",
    "TRACE_FILE",
    "EpisodeTraceFiles",
    "OtlpTarget",
    "Protocol",
    "Tracing",
    "TracingOptions",
    "WideStageSampler",
    "claim_global_provider",
    "receiver_listening",
    "resolve_otlp",
    "start_tracing",
]

SERVICE_NAME = "agent-swarm"
TRACE_FILE = "trace.jsonl"
DEFAULT_HTTP_ENDPOINT = "http://localhost:4318"
DEFAULT_GRPC_ENDPOINT = "http://localhost:4317"
CONTENT_BATCH_SIZE = 64
"""Export batch size when content is captured: 64 spans x 2 capped attributes (16 KiB) stays ~2 MiB."""
ENCODE_CHUNK = 64
"""Spans per JSON line of the trace file. Encoding a span allocates dozens of short-lived objects; a chunk
of 64 keeps them few enough to die young (a whole 512-span batch measured ~10% slower per span)."""
QUEUE_SIZE = 32_768
"""Spans a batch processor may hold before dropping (the SDK default, 2048, is less than one wide
fan-out stage produces: 1024 sub-agents x 3 steps make ~6000 spans in about a second)."""

DEFAULT_TRACED_SUBAGENTS = 32
"""Sub-agents of one stage traced in full (spread evenly over the stage) when it is wider: a traced
sub-agent step costs ~2 spans of SDK work and encoding (``bench/README.md``, "Tracing overhead"),
which a 1,024-wide stage cannot pay and stay near its untraced wall time. Narrower stages are traced
whole; the episode record always holds every sub-agent."""

Protocol = Literal["grpc", "http/protobuf"]
_PROTOCOLS: tuple[str, ...] = ("grpc", "http/protobuf")


@dataclass(frozen=True)
class OtlpTarget:
    """Where OTLP spans go. ``endpoint`` is the full ``/v1/traces`` URL for HTTP, the server URL for gRPC."""

    protocol: Protocol
    endpoint: str
    explicit: bool
    """False for the zero-config default (a local Jaeger), which is only used when it listens."""

    @property
    def address(self) -> tuple[str, int]:
        parts = urlsplit(self.endpoint if "//" in self.endpoint else f"//{self.endpoint}")
        default = 4317 if self.protocol == "grpc" else (443 if parts.scheme == "https" else 80)
        return parts.hostname or "localhost", parts.port or default


@dataclass(frozen=True)
class TracingOptions:
    """The CLI's tracing flags."""

    otlp_endpoint: str | None = None
    otlp_protocol: str | None = None
    capture_content: bool = False
    trace_file: bool = True
    flush_timeout_s: float = 5.0
    probe_timeout_s: float = 0.2
    traced_subagents: int | None = DEFAULT_TRACED_SUBAGENTS
    """At most this many sub-agents of a stage are traced (see :class:`WideStageSampler`); ``None``: all."""


def _with_traces_path(url: str) -> str:
    parts = urlsplit(url)
    if parts.path in ("", "/"):
        return url.rstrip("/") + "/v1/traces"
    return url


def _check_url(url: str, source: str) -> str:
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ConfigError(f"{source} has an invalid port: {url!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"{source} must be a URL like http://localhost:4318 (HTTP) or http://localhost:4317 (gRPC); got {url!r}"
        )
    return url


def resolve_otlp(
    endpoint: str | None = None, protocol: str | None = None, env: Mapping[str, str] | None = None
) -> OtlpTarget | None:
    """Resolve the OTLP target from flags, then the standard environment variables, then the default.

    Returns ``None`` when ``OTEL_TRACES_EXPORTER=none`` (and no endpoint flag) asks for no export.
    Signal-specific ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is used as given; the generic
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` and ``--otlp-endpoint`` get ``/v1/traces`` appended for HTTP when
    they have no path, as the OTLP exporter spec says.
    """
    env = environment().values if env is None else env
    exporters = {e.strip().lower() for e in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if e.strip()}
    if endpoint is None and exporters and "otlp" not in exporters:
        if exporters <= {"none"}:
            return None
        raise ConfigError(
            f"OTEL_TRACES_EXPORTER={env['OTEL_TRACES_EXPORTER']!r} is not supported by swarm; "
            "use 'otlp' or 'none' (the OTLP JSON file is always written unless --no-trace-file)"
        )
    proto = (
        protocol
        or env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if proto not in _PROTOCOLS:
        raise ConfigError(
            f"OTLP protocol {proto!r} is not supported; use 'http/protobuf' (Jaeger port 4318) or 'grpc' (port 4317)"
        )
    p: Protocol = "grpc" if proto == "grpc" else "http/protobuf"
    if endpoint is not None:
        url = _check_url(endpoint.strip(), "--otlp-endpoint")
        return OtlpTarget(p, url if p == "grpc" else _with_traces_path(url), explicit=True)
    if specific := env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip():
        return OtlpTarget(p, _check_url(specific, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), explicit=True)
    if generic := env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip():
        url = _check_url(generic, "OTEL_EXPORTER_OTLP_ENDPOINT")
        return OtlpTarget(p, url if p == "grpc" else _with_traces_path(url), explicit=True)
    if p == "grpc":
        return OtlpTarget(p, DEFAULT_GRPC_ENDPOINT, explicit=False)
    return OtlpTarget(p, _with_traces_path(DEFAULT_HTTP_ENDPOINT), explicit=False)


def receiver_listening(target: OtlpTarget, timeout_s: float = 0.2) -> bool:
    """Whether something accepts TCP connections at the target (a refused port answers at once)."""
    host, port = target.address
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _otlp_exporter(target: OtlpTarget) -> SpanExporter:
    if target.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter(endpoint=target.endpoint)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter(endpoint=target.endpoint)


# -- per-episode JSON-lines files -------------------------------------------------------------------


class _RoutingExporter(SpanExporter):
    """Hands each span to the maintained ``FileSpanExporter`` of its episode's file, in chunks of at
    most :data:`ENCODE_CHUNK` spans (one JSON line each)."""

    def __init__(self, files: EpisodeTraceFiles) -> None:
        # Imported here, with the first trace file: the exporter's package loads the SDK's metrics (40 ms),
        # which a run without a trace file (`--no-trace-file`) never needs.
        from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter

        self._exporter = FileSpanExporter
        self._files = files
        self._open: dict[str, FileSpanExporter] = {}

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        groups: dict[str, list[ReadableSpan]] = {}
        finished: set[str] = set()
        take = self._files.take
        for s in spans:
            eid = take(s)
            if eid is None:
                continue
            groups.setdefault(eid, []).append(s)
            if s.attributes is not None and attr.EPISODE_ID in s.attributes:
                finished.add(eid)
        ok = True
        for eid, group in groups.items():
            exporter = self._open.get(eid)
            if exporter is None:
                path = self._files.path(eid)
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.touch(mode=0o600)  # private to the user, like episode.json (prompts, answers)
                    exporter = self._open[eid] = self._exporter(path)
                except OSError as exc:
                    self._files.errors.append(f"cannot write {path}: {exc}")
                    ok = False
                    continue
            for i in range(0, len(group), ENCODE_CHUNK):
                ok = exporter.export(group[i : i + ENCODE_CHUNK]) is SpanExportResult.SUCCESS and ok
            if eid in finished:  # the episode span is the last of its episode to end: close the file
                self._open.pop(eid).shutdown()
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        for exporter in self._open.values():
            exporter.shutdown()
        self._open.clear()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


class EpisodeTraceFiles(SpanProcessor):
    """Writes each episode's spans to ``<root>/<episode-id>/trace.jsonl`` (OTLP JSON lines).

    A span belongs to the episode whose span (the one carrying ``swarm.episode.id``) it descends from;
    ownership is inherited from the parent when a span starts, so episodes nested under a caller's
    span, or sharing one trace, still get a file each. Owned spans are batched off the event loop and
    appended to the episode's file by the maintained JSON-file exporter; the others (spans outside any
    episode) are only counted, in :attr:`unrouted`.
    """

    def __init__(
        self,
        root: Path,
        *,
        max_export_batch_size: int | None = None,
        max_queue_size: int | None = None,
        schedule_delay_millis: float | None = None,
    ) -> None:
        self.root = root
        self.unrouted = 0
        self.errors: list[str] = []
        self._owner: dict[int, str] = {}  # span id -> episode id, until the span is exported
        self._batch = BatchSpanProcessor(
            _RoutingExporter(self),
            max_export_batch_size=max_export_batch_size,
            max_queue_size=max_queue_size,
            schedule_delay_millis=schedule_delay_millis,
        )

    def path(self, episode_id: str) -> Path:
        return episode_dir(self.root, episode_id) / TRACE_FILE

    def take(self, span: ReadableSpan) -> str | None:
        """The episode owning an exported span (forgotten from then on)."""
        if span.context is None:
            return None
        return self._owner.pop(span.context.span_id, None)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        # No lock: each dict operation is atomic, and the exporter thread only pops ids of spans that
        # have ended, so the read-then-write below never races with a removal that matters.
        context = span.context
        if context is None:
            return
        attributes = span.attributes
        eid = attributes.get(attr.EPISODE_ID) if attributes is not None else None
        if isinstance(eid, str) and eid:
            self._owner[context.span_id] = eid
        elif span.parent is not None and (owner := self._owner.get(span.parent.span_id)) is not None:
            self._owner[context.span_id] = owner

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.span_id in self._owner:
            self._batch.on_end(span)
        else:
            self.unrouted += 1

    def shutdown(self) -> None:
        self._batch.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._batch.force_flush(timeout_millis)


# -- sampling ---------------------------------------------------------------------------------------


class WideStageSampler(Sampler):
    """Traces at most ``per_stage`` sub-agents of a stage, spread evenly over it, and every other span
    as ``base`` decides.

    A sub-agent's ``invoke_agent`` span carries its place in its stage (``swarm.agent.index`` of
    ``swarm.agent.stage_width``); in a stage wider than ``per_stage`` only every ``ceil(width / per_stage)``-th
    sub-agent is sampled, with everything under it. The spans of a sampled-out sub-agent are dropped
    with it (a span whose parent in this process was sampled out is dropped, whatever ``base`` is),
    so the trace never holds a span without its parent. The episode, its turns, every stage span
    (width, critical steps, failed sub-agents) and narrower stages stay complete.
    """

    def __init__(self, base: Sampler, per_stage: int) -> None:
        if per_stage < 1:
            raise ConfigError(f"traced sub-agents per stage must be at least 1, got {per_stage}")
        self.base = base
        self.per_stage = per_stage

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        parent = get_current_span(parent_context).get_span_context()
        if parent.is_valid and not parent.is_remote and not parent.trace_flags.sampled:
            return SamplingResult(Decision.DROP, None, parent.trace_state)
        if attributes is not None:
            index, width = attributes.get(attr.AGENT_INDEX), attributes.get(attr.AGENT_STAGE_WIDTH)
            stride = -(-width // self.per_stage) if isinstance(width, int) and width > self.per_stage else 1
            if isinstance(index, int) and index % stride:
                return SamplingResult(Decision.DROP, None, parent.trace_state if parent.is_valid else None)
        return self.base.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

    def get_description(self) -> str:
        return f"WideStageSampler{{perStage:{self.per_stage},base:{self.base.get_description()}}}"


# -- the installed SDK ------------------------------------------------------------------------------

_process = {"owns_global_provider": False}


def claim_global_provider() -> None:
    """Called by the console-script entry point: this process is the CLI, so its provider also becomes
    the *global* one (libraries that trace through the global API, e.g. the MCP client, then nest their
    spans under ours). In-process callers (tests, notebooks) never replace a global provider."""
    _process["owns_global_provider"] = True


class _ExportLog(logging.Handler):
    """Holds the OpenTelemetry SDK's log lines during a run (a retrying exporter logs every attempt,
    which would garble the live view) and summarises them once at the end."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.last = ""
        self._propagate = True

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        self.last = record.getMessage()

    def install(self) -> None:
        log = logging.getLogger("opentelemetry")
        self._propagate = log.propagate
        log.addHandler(self)
        log.propagate = False

    def remove(self) -> str | None:
        log = logging.getLogger("opentelemetry")
        log.removeHandler(self)
        log.propagate = self._propagate
        if not self.count:
            return None
        return f"OpenTelemetry reported {self.count} export problem(s); the last: {self.last[:300]}"


@dataclass
class Tracing:
    """The SDK the CLI installed; call :meth:`shutdown` exactly once, in a ``finally``."""

    provider: TracerProvider | None
    capture_content: bool = False
    files: EpisodeTraceFiles | None = None
    otlp: OtlpTarget | None = None
    notes: list[str] = field(default_factory=list)
    flush_timeout_s: float = 5.0
    _otlp_processor: BatchSpanProcessor | None = None
    _log: _ExportLog | None = None
    _closed: bool = False

    def trace_file(self, episode_id: str) -> Path | None:
        return self.files.path(episode_id) if self.files is not None else None

    def telemetry(self) -> Telemetry:
        """The runtime's :class:`~agent_swarm.swarm.tracing.Telemetry` on this provider. It opens no span under a
        sampled-out one (this provider's sampler drops those), so a sampled-out sub-agent of a wide
        stage costs one non-recording span instead of one per step."""
        if self.provider is None:  # a global provider someone else installed is still used
            return Telemetry(capture_content=self.capture_content)
        return Telemetry(self.provider, capture_content=self.capture_content, follow_parent_sampling=True)

    def shutdown(self, timeout_s: float | None = None) -> list[str]:
        """Flush and close exporters; returns warnings for the user (never raises, never hangs).

        A second Ctrl-C during the flush abandons what is left of it, with a warning."""
        if self.provider is None or self._closed:
            return []
        self._closed = True
        timeout_s = self.flush_timeout_s if timeout_s is None else timeout_s
        warnings: list[str] = []
        try:
            if self.files is not None:
                self.files.shutdown()  # local file: fast, and done first so a slow network cannot starve it
                warnings += self.files.errors
            if self._otlp_processor is not None and self.otlp is not None:
                worker = threading.Thread(target=self._otlp_processor.shutdown, name="swarm-otlp-flush", daemon=True)
                worker.start()
                worker.join(timeout_s)
                if worker.is_alive():
                    host, port = self.otlp.address
                    where = " (the trace file has them all)" if self.files is not None else ""
                    warnings.append(
                        f"OTLP export to {host}:{port} did not finish within {timeout_s:g}s; "
                        f"some spans may be missing there{where}"
                    )
            # Processors already shut down return at once, so this cannot block on a stuck exporter.
            self.provider.shutdown()
        except KeyboardInterrupt:
            warnings.append("span flush interrupted: the trace file and the OTLP receiver may miss spans")
        if self._log is not None and (summary := self._log.remove()) is not None:
            warnings.append(summary)
        return warnings


class _Resource(Resource):
    """A ``Resource`` that hashes once. Both OTLP encoders (JSON for the file, protobuf for the network)
    group spans by resource in a dict, so they hash it once *per span*; the SDK's ``Resource.__hash__``
    JSON-dumps the sorted attributes every time (~7 µs, a sixth of encoding a span). A resource's
    attributes are immutable, so the cached hash stays equal to the SDK's."""

    def __init__(self, resource: Resource) -> None:
        super().__init__(resource.attributes, resource.schema_url)
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash


def _resource(env: Mapping[str, str]) -> Resource:
    attributes: dict[str, str] = {"service.version": __version__}
    user_named = env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    if not user_named:
        attributes["service.name"] = SERVICE_NAME
    return _Resource(Resource.create(attributes))


def _probed_target(options: TracingOptions, env: Mapping[str, str]) -> tuple[OtlpTarget | None, list[str]]:
    """The OTLP target to export to, and notes for the user. A default endpoint with no receiver
    listening is dropped (spans go to the trace file only); an explicit one is kept with a note."""
    target = resolve_otlp(options.otlp_endpoint, options.otlp_protocol, env)
    notes: list[str] = []
    if target is not None and not target.explicit and not receiver_listening(target, options.probe_timeout_s):
        host, port = target.address
        notes.append(
            f"no OTLP receiver on {host}:{port}; spans go to the trace file only "
            "(`swarm traces push ID` sends them to a Jaeger started later; README, Traces)"
        )
        target = None
    elif target is not None and target.explicit and not receiver_listening(target, options.probe_timeout_s):
        host, port = target.address
        notes.append(f"the OTLP receiver at {host}:{port} does not accept connections (yet); exporting anyway")
    return target, notes


def _export_limits(options: TracingOptions, env: Mapping[str, str]) -> tuple[int | None, int | None]:
    """(max export batch size, max queue size) for the span processors; ``None`` leaves the SDK's
    default (read from its ``OTEL_BSP_*`` variables). Captured content gets smaller batches."""
    batch = CONTENT_BATCH_SIZE if options.capture_content else None
    if batch is not None and (configured := env.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "").strip()).isdigit():
        batch = min(batch, max(1, int(configured)))
    queue = None if env.get("OTEL_BSP_MAX_QUEUE_SIZE", "").strip() else QUEUE_SIZE
    return batch, queue


def start_tracing(
    options: TracingOptions,
    *,
    out: Path,
    env: Mapping[str, str] | None = None,
    install_global: bool | None = None,
    capture_logs: bool | None = None,
    note: Callable[[str], None] | None = None,
) -> Tracing:
    """Build the provider and exporters for one CLI run (see the module docstring).

    Raises :class:`~agent_swarm.swarm.errors.ConfigError` for a bad endpoint or protocol before anything runs.
    ``install_global`` (default: whether :func:`claim_global_provider` was called) also makes it the
    global provider, unless a real one is installed already. ``capture_logs`` (same default) holds the
    SDK's log lines until :meth:`Tracing.shutdown`, which summarises them in one warning.
    """
    env = environment().values if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return Tracing(provider=None)
    target, notes = _probed_target(options, env)
    if target is None and not options.trace_file:
        return Tracing(provider=None, notes=notes)
    batch, queue = _export_limits(options, env)
    sampler = None
    if options.traced_subagents is not None:  # the SDK's sampler from OTEL_TRACES_SAMPLER, kept as the base
        base = TracerProvider(shutdown_on_exit=False).sampler
        sampler = WideStageSampler(base, options.traced_subagents)
    provider = TracerProvider(resource=_resource(env), sampler=sampler)
    files = None
    if options.trace_file:
        files = EpisodeTraceFiles(out, max_export_batch_size=batch, max_queue_size=queue)
        provider.add_span_processor(files)
    processor = None
    if target is not None:
        processor = BatchSpanProcessor(_otlp_exporter(target), max_export_batch_size=batch, max_queue_size=queue)
        provider.add_span_processor(processor)
    if install_global is None:
        install_global = _process["owns_global_provider"]
    if install_global and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(provider)
    log = None
    if capture_logs if capture_logs is not None else _process["owns_global_provider"]:
        log = _ExportLog()
        log.install()
    for n in notes:
        if note is not None:
            note(n)
    return Tracing(
        provider=provider,
        capture_content=options.capture_content,
        files=files,
        otlp=target,
        notes=notes,
        flush_timeout_s=options.flush_timeout_s,
        _otlp_processor=processor,
        _log=log,
    )
