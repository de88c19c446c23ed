"""Train / dev / test splits: every workload answers all three, deterministically, and no item is in two."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.records import Task
from agent_swarm.workloads import get_workload, workload_names
from agent_swarm.workloads.splits import (
    SPLITS,
    check_fresh_test_seed,
    check_split,
    fresh_test_seed,
    item_split,
    key_split,
    pool_splits,
    record_test_seed,
    split_rng,
    used_test_seeds,
)

pytest.importorskip("bm25s")  # the lookup workloads search the τ² corpus


def _items(task: Task) -> set[str]:
    """What a task is made of, the thing that must not leak across splits."""
    md = task.metadata
    name = md["workload"]
    if name in ("wide-lookup", "deep-lookup"):  # a retail and an airline customer may share a name
        return {f"{md.get('kind', 'retail_user')}:{x}" for x in md["labels"] if x not in md.get("distractors", ())}
    if name == "starter":
        return {f"{md['kind']}:{it['key']}" for it in md["items"]}
    if name == "tau2-batch":
        return {str(t) for t in md["tickets"]}
    if name == "bfcl-parallel":
        return {task.id}
    if name in ITEMS:
        return ITEMS[name](task)
    raise AssertionError(f"no item extractor for workload {name!r}; add one to this test")


ITEMS: dict[str, Callable[[Task], set[str]]] = {
    "wide-research": lambda t: {f"{t.metadata['kind']}:{x}" for x in t.metadata["labels"]},
    "deep-research": lambda t: {f"company:{x}" for x in t.metadata["labels"]},
    "controls": lambda t: (
        {f"{t.metadata['kind']}:{x}" for x in t.metadata["labels"]}
        if t.metadata["control"] == "lookup"
        else {f"{t.metadata['kind']}:{it['key']}" for it in t.metadata["items"]}
    ),
}

# Knobs small enough for every split's pool (the τ² pools are small: tickets of 1–20 actions, k=3).
KNOBS: dict[str, dict[str, Any]] = {
    "tau2-batch": {"k": 3, "min_actions": 1, "max_actions": 20},
    "wide-lookup": {"entities": 4, "attributes": 2},
    "deep-lookup": {"branches": 3},
}


@pytest.mark.parametrize("name", [n for n in workload_names() if n != "train-mix"])  # train only: test_train_mix
def test_every_workload_has_three_disjoint_deterministic_splits(name: str) -> None:
    wl = get_workload(name)
    knobs = KNOBS.get(name, {})
    drawn: dict[str, set[str]] = {}
    for split in SPLITS:
        tasks = wl.tasks(6, seed=1, split=split, **knobs)
        assert tasks == wl.tasks(6, seed=1, split=split, **knobs), f"{name}/{split} is not deterministic"
        assert all(t.metadata["split"] == split and t.metadata["seed"] == 1 for t in tasks)
        assert name == "bfcl-parallel" or all(f"-{split}-" in t.id for t in tasks)  # BFCL tasks keep item ids
        drawn[split] = set().union(*(_items(t) for t in tasks))
        more = wl.tasks(6, seed=2, split=split, **knobs)
        drawn[split] |= set().union(*(_items(t) for t in more))
    assert not drawn["train"] & drawn["dev"], name
    assert not drawn["train"] & drawn["test"], name
    assert not drawn["dev"] & drawn["test"], name


@pytest.mark.parametrize("name", workload_names())
def test_an_unknown_split_is_refused_naming_the_three(name: str) -> None:
    with pytest.raises(ConfigError, match=r"'train'.*'dev'.*'test'"):
        get_workload(name).tasks(1, split="validation", **KNOBS.get(name, {}))


@pytest.mark.parametrize("name", workload_names())
def test_every_workload_refuses_zero_tasks_and_unknown_knobs_the_same_way(name: str) -> None:
    wl = get_workload(name)
    with pytest.raises(ConfigError, match="n must be at least 1, got 0"):
        wl.tasks(0, **KNOBS.get(name, {}))
    with pytest.raises(ConfigError, match=f"invalid knobs for workload '{name}'.*Known knobs"):
        wl.tasks(1, no_such_knob=1)


def test_a_request_with_another_workloads_knob_model_is_a_bug_not_a_user_error() -> None:
    from agent_swarm.workloads.lookup import DeepLookupKnobs

    with pytest.raises(TypeError, match="validates knobs as WideLookupKnobs, not DeepLookupKnobs"):
        get_workload("wide-lookup").request(1, "train", {}, DeepLookupKnobs)


def test_pool_splits_keep_the_held_out_items_and_take_a_quarter_of_the_rest_for_dev() -> None:
    keys = [f"item-{i}" for i in range(40)]
    held = [i % 4 == 0 for i in range(40)]
    parts = pool_splits(keys, held)
    assert [p == "test" for p in parts] == held
    assert parts.count("dev") == 8 and parts.count("train") == 22  # ceil(30 / 4) dev
    assert pool_splits(list(reversed(keys)), list(reversed(held))) == tuple(reversed(parts))  # order-free
    small = pool_splits(["a", "b", "c"], [False, False, False])
    assert small.count("dev") == 1 and small.count("train") == 2  # a small pool still has a dev item
    with pytest.raises(ConfigError, match="unique keys"):
        pool_splits(["a", "a"], [False, False])


def test_key_and_item_splits_are_stable_hashes() -> None:
    names = [f"Company {i}" for i in range(2000)]
    counts = {s: sum(key_split(n) == s for n in names) for s in SPLITS}
    assert 1000 < counts["train"] < 1400 and 300 < counts["dev"] < 500 and 300 < counts["test"] < 500
    assert key_split("Drari Robotics") == key_split("  drari   ROBOTICS ")
    assert item_split("12 * 13", test=True) == "test"
    assert {item_split(f"{i} + 1", test=False) for i in range(100)} == {"train", "dev"}
    assert split_rng("w", "dev", 3).random() == split_rng("w", "dev", 3).random()
    assert split_rng("w", "dev", 3).random() != split_rng("w", "test", 3).random()
    assert check_split("dev") == "dev"


def test_the_test_seed_ledger_burns_seeds(tmp_path: Path) -> None:
    ledger = tmp_path / "experiments" / "test_seeds.jsonl"
    assert used_test_seeds(ledger, "controls") == set() and fresh_test_seed(ledger, "controls") == 0
    record_test_seed(ledger, "controls", 0, report="r1")
    record_test_seed(ledger, "controls", 2, report="r2")
    record_test_seed(ledger, "wide-research", 1, report="r3")
    assert used_test_seeds(ledger, "controls") == {0, 2}
    assert fresh_test_seed(ledger, "controls") == 1 and fresh_test_seed(ledger, "wide-research") == 0
    check_fresh_test_seed(ledger, "controls", 1)
    with pytest.raises(ConfigError, match=r"already used.*--seed 1"):
        check_fresh_test_seed(ledger, "controls", 2)
    # an entry with knobs burns its seed for those knobs only; one without burns it for every knob
    record_test_seed(ledger, "wide-research", 5, report="r4", knobs={"entities": 2})
    assert used_test_seeds(ledger, "wide-research", {"entities": 2}) == {1, 5}
    assert used_test_seeds(ledger, "wide-research", {"entities": 8}) == {1}
    check_fresh_test_seed(ledger, "wide-research", 5, {"entities": 8})
    with pytest.raises(ConfigError, match=r"seed 5 of wide-research with knobs \{\"entities\": 2\}.*--seed 0"):
        check_fresh_test_seed(ledger, "wide-research", 5, {"entities": 2})
    # A knob added after an entry was written (wide research's snippets) makes the same tasks: still burnt.
    assert 5 in used_test_seeds(ledger, "wide-research", {"entities": 2, "snippets": "named"})
    assert 5 not in used_test_seeds(ledger, "wide-research", {"entities": 8, "snippets": "named"})
    ledger.write_text(ledger.read_text() + "not json\n")
    with pytest.raises(ConfigError, match=r"test_seeds\.jsonl:5"):
        used_test_seeds(ledger, "controls")
