"""Model hash checks are cached by (path, size, mtime, inode); ``verify_models(force=True)`` reads again."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from agent_swarm.swarm.backends.local import (
    LOCAL_MODELS,
    QWEN_SHA256,
    file_sha256,
    model_available,
    resolve_model,
    verify_models,
)
from agent_swarm.swarm.backends.local.catalogue import cache_dir
from agent_swarm.swarm.errors import ConfigError


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests write fake model files into the cache: each gets its own, never the session's
    shared empty cache (tests/core/test_hermetic.py checks that one holds no model)."""
    monkeypatch.setenv("SWARM_CACHE_DIR", str(tmp_path / "swarm-cache"))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _rewrite_keeping_stat(path: Path, data: bytes) -> None:
    """New content of the same size under the same inode and mtime: what the cache cannot see."""
    st = path.stat()
    with path.open("r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _touch(path: Path) -> Path:
    path.write_bytes(b"f")
    return path


def test_a_hash_is_computed_once_per_file_version(tmp_path: Path) -> None:
    f = tmp_path / "m.gguf"
    f.write_bytes(b"a" * 1000)
    assert file_sha256(f) == _sha(b"a" * 1000)
    # Same size, mtime and inode: the cached digest answers without reading the file ...
    _rewrite_keeping_stat(f, b"b" * 1000)
    assert file_sha256(f) == _sha(b"a" * 1000)
    # ... a forced check reads it (swarm doctor --verify) and refreshes the cache.
    assert file_sha256(f, force=True) == _sha(b"b" * 1000)
    assert file_sha256(f) == _sha(b"b" * 1000)
    # Any change of mtime (or size, or inode) reads the file again.
    f.write_bytes(b"c" * 1000)
    os.utime(f, ns=(0, f.stat().st_mtime_ns + 10**9))
    assert file_sha256(f) == _sha(b"c" * 1000)
    replaced = tmp_path / "new.gguf"
    replaced.write_bytes(b"d" * 1000)
    replaced.replace(f)
    assert file_sha256(f) == _sha(b"d" * 1000)
    # Entries of deleted files go when the cache is next written.
    gone = tmp_path / "gone.gguf"
    gone.write_bytes(b"e")
    file_sha256(gone)
    gone.unlink()
    file_sha256(_touch(tmp_path / "other.gguf"))
    assert str(gone.resolve()) not in (cache_dir() / "hashes.json").read_text()


def test_a_cached_model_whose_bytes_changed_is_refused_only_when_its_stat_changed_too(tmp_path: Path) -> None:
    # The 0.5B's cached file with its parts uninstalled is served after a hash check against the pin.
    m = LOCAL_MODELS["qwen2.5-coder-0.5b"]
    if model_available(m.name):
        pytest.skip("the 0.5B parts are installed: resolve_model would assemble instead of checking the cache")
    f = cache_dir() / m.file
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(b"not the model")
    with pytest.raises(ConfigError, match=f"(?s)sha256 {_sha(b'not the model')}, expected {QWEN_SHA256}"):
        resolve_model(m.name)


def test_verify_models_reports_every_installed_model(tmp_path: Path) -> None:
    installed = [n for n in LOCAL_MODELS if model_available(n)]
    checks = verify_models(force=True)
    assert [c.name for c in checks] == installed
    for c in checks:
        assert c.ok, c.detail
        if c.path is not None:
            assert c.actual == _sha(c.path.read_bytes())
            assert c.expected in (None, c.actual)
        else:  # parts installed, not assembled into this (hermetic) cache yet
            assert LOCAL_MODELS[c.name].parts and "first use" in c.detail
    # The cached check gives the same answer.
    assert [(c.name, c.actual) for c in verify_models()] == [(c.name, c.actual) for c in checks]


def test_verify_models_flags_a_damaged_assembled_model(tmp_path: Path) -> None:
    m = LOCAL_MODELS["qwen2.5-coder-0.5b"]
    if not model_available(m.name):
        pytest.skip(f"needs the 0.5B parts: {m.install}")
    f = cache_dir() / m.file
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(b"damaged")
    (check,) = [c for c in verify_models(force=True) if c.name == m.name]
    assert not check.ok and check.actual == _sha(b"damaged") and str(f) in check.detail
