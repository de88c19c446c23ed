"""Train / dev / test splits that mean something, and the seed policy.

Every workload answers ``tasks(n, seed=S, split=X, **knobs)`` for ``X`` in :data:`SPLITS`:

* ``train`` — what RL and SFT train on (``swarm train``, ``swarm rollout``, the ``train-mix`` generator);
* ``dev`` — what every tuning decision is made on: prompts, coaching, budgets, benchmark fixes;
* ``test`` — held out: final tables only, from a seed never used before (see below).

**The same task never appears in two splits.** Two mechanisms, one per kind of workload:

* *data-backed pools* (BFCL items, τ² tickets, starter facts, the τ² corpus's entities): a fixed
  partition of the items. Each workload keeps the held-out rule it always had for ``test`` (so old test
  items stay test items); :func:`pool_splits` sends a fixed quarter of the remaining items, chosen by a
  hash of the item's key, to ``dev``; the rest is ``train``.
* *procedural generators* (generated fictional entities, arithmetic): every generated key (an entity
  name, an expression) belongs to one split by :func:`key_split` (a hash of the key: 60 % train,
  20 % dev, 20 % test); a generator drawing for split X rejects candidates of another split. Tasks are
  drawn with :func:`split_rng`, whose stream is namespaced by workload, split and seed.

**Seed policy.** A seed is meaningful only together with its split: ``(split="dev", seed=3)`` and
``(split="test", seed=3)`` are unrelated draws. Seeds of ``train`` and ``dev`` may be reused freely.
A *fresh* test seed is one never used before for that workload: every final table names its split and
seed, and a test seed once used is burnt. The ledger is a JSONL file (``experiments/test_seeds.jsonl``
in this repository, one ``{"workload", "seed", "report"}`` object per line): :func:`fresh_test_seed`
gives the next unused seed, :func:`record_test_seed` burns one, :func:`check_fresh_test_seed` refuses a
burnt one. Procedural workloads make a fresh seed give entirely new tasks (new entities, new facts);
data-backed ones recombine the same held-out items.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

from agent_swarm.swarm.errors import ConfigError

__all__ = [
    "SPLITS",
    "Split",
    "check_fresh_test_seed",
    "check_split",
    "fresh_test_seed",
    "item_split",
    "key_split",
    "pool_splits",
    "record_test_seed",
    "split_rng",
    "used_test_seeds",
]

Split = Literal["train", "dev", "test"]
SPLITS: tuple[Split, ...] = get_args(Split)


def check_split(split: str, workload: str = "") -> Split:
    """``split`` as a :data:`Split`; an unknown one raises ConfigError naming the three."""
    if split not in SPLITS:
        who = f" for {workload}" if workload else ""
        raise ConfigError(
            f"unknown split {split!r}{who}; use 'train' (training), 'dev' (tuning) or 'test' (held out, fresh seed)"
        )
    return split


def _bucket(namespace: str, key: str, buckets: int) -> int:
    return int(hashlib.sha1(f"{namespace}:{key}".encode()).hexdigest(), 16) % buckets


def pool_splits(keys: Sequence[str], test: Sequence[bool]) -> tuple[Split, ...]:
    """The splits of a fixed pool of items (parallel to ``keys``): ``test`` where the workload's held-out
    rule says so; of the rest, ordered by a hash of the key, every fourth is ``dev`` and the others
    ``train``. Exactly a quarter (rounded up) of a small pool goes to dev, so no split is left empty."""
    if len(keys) != len(test) or len(set(keys)) != len(keys):
        raise ConfigError(
            f"pool_splits needs unique keys, one held-out flag each; got {len(keys)} keys, {len(test)} flags"
        )
    rest = sorted((k for k, t in zip(keys, test, strict=True) if not t), key=lambda k: (_bucket("dev", k, 2**32), k))
    dev = set(rest[::4])
    return tuple("test" if t else "dev" if k in dev else "train" for k, t in zip(keys, test, strict=True))


def item_split(key: str, *, test: bool) -> Split:
    """The split of one item of an open-ended set (an arithmetic expression) outside the held-out
    range: ``test`` when ``test``, else ``dev`` for a quarter of the keys (by a hash), else ``train``."""
    if test:
        return "test"
    return "dev" if _bucket("dev", key, 4) == 0 else "train"


def key_split(key: str) -> Split:
    """The split a generated key (an entity name, an expression) belongs to: 60 % train, 20 % dev, 20 % test.

    Case and spacing do not matter, so "Drari Robotics" and "drari  robotics" are one key."""
    b = _bucket("key", " ".join(key.lower().split()), 5)
    return "test" if b == 0 else "dev" if b == 1 else "train"


def split_rng(workload: str, split: str, seed: int) -> random.Random:
    """The random stream of ``workload``'s tasks for ``(split, seed)``: unrelated across splits and seeds."""
    return random.Random(f"{workload}:{check_split(split, workload)}:{seed}")


# -- the ledger of burnt test seeds ------------------------------------------------------------------------


def _scope(knobs: Mapping[str, Any] | None) -> str | None:
    return None if knobs is None else json.dumps(dict(knobs), sort_keys=True, default=str)


def _same_tasks(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether knob sets ``a`` and ``b`` may make the same tasks: they agree on every knob both name. A knob
    only one of them names (one added after the entry was written) burns the seed too: entries from before
    wide-research's ``snippets`` knob hold the same names and facts as a run with it."""
    return all(_scope({k: a[k]}) == _scope({k: b[k]}) for k in a.keys() & b.keys())


def used_test_seeds(ledger: Path, workload: str, knobs: Mapping[str, Any] | None = None) -> set[int]:
    """Test seeds already used for ``workload`` according to the JSONL ``ledger`` (empty if it is missing).

    An entry with ``knobs`` burns its seed only for knobs that differ from none of its own (a width curve's
    N = 2 and N = 8 tables are different tasks from one seed; a knob the entry does not name matches); an
    entry without, and a query without ``knobs``, match any knobs."""
    if not ledger.is_file():
        return set()
    seeds: set[int] = set()
    for no, line in enumerate(ledger.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            got = entry.get("knobs")
            if entry["workload"] == workload and (got is None or knobs is None or _same_tasks(got, knobs)):
                seeds.add(int(entry["seed"]))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(
                f"{ledger}:{no}: not a test-seed entry ({exc}); each line is {{'workload', 'seed', 'report'}} "
                "and optionally 'knobs'"
            ) from None
    return seeds


def fresh_test_seed(ledger: Path, workload: str, knobs: Mapping[str, Any] | None = None) -> int:
    """The smallest test seed ``workload`` (with ``knobs``) has not used yet."""
    used = used_test_seeds(ledger, workload, knobs)
    return next(s for s in range(len(used) + 1) if s not in used)


def check_fresh_test_seed(ledger: Path, workload: str, seed: int, knobs: Mapping[str, Any] | None = None) -> None:
    """Raise ConfigError when ``seed`` was already used for a test table of ``workload`` (with ``knobs``)."""
    if seed in used_test_seeds(ledger, workload, knobs):
        with_knobs = f" with knobs {_scope(knobs)}" if knobs else ""
        raise ConfigError(
            f"test seed {seed} of {workload}{with_knobs} was already used (see {ledger}); a final table needs a "
            f"fresh one: --seed {fresh_test_seed(ledger, workload, knobs)}"
        )


def record_test_seed(
    ledger: Path, workload: str, seed: int, report: str, knobs: Mapping[str, Any] | None = None
) -> None:
    """Burn ``seed`` for ``workload`` (for those ``knobs`` only, when given): append it to ``ledger`` with the
    report that used it."""
    ledger.parent.mkdir(parents=True, exist_ok=True)
    entry: dict[str, Any] = {"workload": workload, "seed": seed, "report": report}
    if knobs is not None:
        entry["knobs"] = dict(knobs)
    with ledger.open("a", encoding="utf-8") as f:
        f.write(json.dumps(entry, sort_keys=True, default=str) + "\n")
