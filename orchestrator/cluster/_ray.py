"""Ray, imported only when a cluster feature is used, and the connection to a cluster."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from agent_swarm.swarm._aio import running_loop
from agent_swarm.swarm.errors import ConfigError

__all__ = [
    "RayCluster",
    "check_actors",
    "check_fits",
    "kill_all",
    "pickled_size",
    "process_usage",
    "remote_class",
    "require_ray",
    "wait_started",
]

INSTALL_HINT = "pip install 'agent-swarm[ray]' (ray==2.60.0)"


def require_ray(asyncio_for: str | None = None) -> ModuleType:
    """The ``ray`` module, or a :class:`ConfigError` saying how to install it; with ``asyncio_for`` (a feature
    whose actors this event loop drives), also one when the loop is not asyncio: Ray's object refs are awaited
    on asyncio, trio cannot drive them."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            f"running on Ray needs the optional Ray extra, which is not installed: {INSTALL_HINT}"
        ) from None
    if asyncio_for is not None and running_loop() is None:
        raise ConfigError(
            f"{asyncio_for} runs on asyncio (Ray's event loop); start it with anyio.run(..., backend='asyncio')"
        )
    return ray


_remote_classes: dict[type, Any] = {}


def remote_class(cls: type) -> Any:
    """``ray.remote(cls)``, made once per class (the actor classes stay importable without Ray)."""
    hit = _remote_classes.get(cls)
    if hit is None:
        hit = _remote_classes[cls] = require_ray().remote(cls)
    return hit


@dataclass(frozen=True)
class RayCluster:
    """Where to run: ``address`` ``None``/``"local"`` starts a local Ray for this run (``num_cpus`` CPUs,
    default: all of this machine's); ``"auto"`` joins the running cluster (``RAY_ADDRESS`` or the one
    ``ray start`` left on this machine) and starts a local one when there is none; anything else
    (``host:port``, ``ray://host:10001``) connects there. A Ray already initialised in this process is
    used as it is.

    ``runtime_env`` is passed to ``ray.init`` (e.g. ``{"working_dir": "."}`` or ``{"pip": [...]}`` for
    a remote cluster whose nodes do not have this project installed).
    """

    address: str | None = None
    num_cpus: int | None = None
    runtime_env: dict[str, Any] | None = None
    init_options: dict[str, Any] = field(default_factory=dict)

    def _init(self, ray: ModuleType, address: str | None) -> None:
        opts: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING}
        if self.runtime_env:
            opts["runtime_env"] = self.runtime_env
        if address == "local":
            opts["num_cpus"] = self.num_cpus
            # Results keep Ray's own limit for travelling inside the reply (100 KiB): larger ones go
            # through the object store. An episode's lines are ≈ 180 KiB and an exchange brings back
            # every episode finished since the last one (megabytes), which the store moves for less CPU
            # than the gRPC reply (bench_ray.py rollout, ray 2.60: the driver spends 0.23 ms of CPU per
            # episode against 0.32 ms with replies inline up to 8 MiB, and 2 actors run 3 % more
            # episodes/s).
            # Ray lowers its workers' priority by 15 below the raylet's (so that a driver doing the work
            # stays responsive); here the actors do the work and the driver only writes files, so they
            # run at the driver's own priority: on a shared machine nice-15 actors were starved (a
            # 10,000-wide stage took 6× its ideal time beside the 3.9× of one process; bench_ray.py).
            opts["_system_config"] = {"worker_niceness": 0}
        opts.update(self.init_options)
        # ray.init replaces the SIGTERM handler with sys.exit(); the caller's (the CLI stops like Ctrl-C,
        # keeping finished episodes) stays.
        main = threading.current_thread() is threading.main_thread()
        previous = signal.getsignal(signal.SIGTERM) if main else None
        try:
            ray.init(address=address, **opts)
        finally:
            if main and previous is not None:
                signal.signal(signal.SIGTERM, previous)

    def connect(self) -> bool:
        """Initialise Ray unless it already is; returns whether this call did (then :meth:`shutdown`)."""
        ray = require_ray()
        if ray.is_initialized():
            return False
        address = self.address or "local"
        if address == "auto":
            try:
                self._init(ray, "auto")
            except ConnectionError:
                self._init(ray, "local")
        else:
            try:
                self._init(ray, address)
            except ConnectionError as exc:
                raise ConfigError(
                    f"cannot connect to the Ray cluster at {address!r}: {exc}; start one with `ray start --head` "
                    "or leave the address out to start a local Ray"
                ) from None
        return True

    @staticmethod
    def shutdown() -> None:
        require_ray().shutdown()

    @contextmanager
    def session(self) -> Iterator[bool]:
        """Connected inside the block; a Ray started here is shut down on leaving it."""
        started = self.connect()
        try:
            yield started
        finally:
            if started:
                self.shutdown()


def check_actors(owner: str, *, actors: int | None, num_cpus: float, max_attempts: int) -> None:
    """The options every Ray feature gives its actors, checked where the feature is built (``actors``
    ``None``: as many as the cluster's CPUs hold)."""
    if actors is not None and actors < 1:
        raise ConfigError(f"{owner} needs at least one actor, got actors={actors}")
    if max_attempts < 1:
        raise ConfigError(f"{owner} needs max_attempts >= 1, got {max_attempts}")
    if num_cpus < 0:
        raise ConfigError(f"{owner} needs num_cpus per actor >= 0, got {num_cpus}")


async def wait_started(ray: ModuleType, actors: list[tuple[str, Any]], doing: str) -> None:
    """Wait until each ``(name, handle)`` actor answers ``ping``; one that could not start (its
    constructor raised) is a :class:`ConfigError` saying which and what it was ``doing``."""
    for name, handle in actors:
        try:
            await handle.ping.remote()
        except ray.exceptions.RayActorError as exc:
            raise ConfigError(f"{name} could not {doing}: {exc}") from None


def check_fits(ray: ModuleType, what: str, count: int, num_cpus: float) -> None:
    """Refuse, with the numbers, actors that the cluster's CPUs can never hold (they would wait forever)."""
    total = float(ray.cluster_resources().get("CPU", 0.0))
    need = count * num_cpus
    if need > total + 1e-9:
        raise ConfigError(
            f"{count} {what} actor(s) × {num_cpus:g} CPU need {need:g} CPUs but the Ray cluster has {total:g}; "
            "ask for fewer actors, fewer CPUs per actor, or a bigger cluster"
        )


def kill_all(ray: ModuleType, handles: list[Any]) -> None:
    """Kill actors for good (no restart); an actor that is already gone is fine."""
    for h in handles:
        try:
            ray.kill(h, no_restart=True)
        except Exception:  # already dead, or the cluster is gone: nothing left to stop
            logging.getLogger(__name__).debug("actor already gone", exc_info=True)


def pickled_size(ray: ModuleType, obj: object, what: str, hint: str) -> int:
    """Serialise ``obj`` as Ray will, or raise a :class:`ConfigError` naming what could not be shipped."""
    try:
        return len(ray.cloudpickle.dumps(obj))
    except Exception as exc:
        raise ConfigError(f"{what} cannot be sent to Ray actors ({type(exc).__name__}: {exc}); {hint}") from None


def process_usage() -> dict[str, float]:
    """CPU seconds (user + system) and resident set size in bytes of this process."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return {"cpu_s": ru.ru_utime + ru.ru_stime, "rss_b": float(rss)}
