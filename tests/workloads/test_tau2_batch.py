"""τ²-batch: real retail tickets on one shared DB, scored by the DB diff against the gold replay.

The reward tests run on both domains; the airline tools and batches have their own file."""

from __future__ import annotations

import json

import pytest

from agent_swarm.orchestrator.engine import Orchestrator
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.messages import ToolCall, ToolMessage
from agent_swarm.swarm.records import EpisodeRecord, Task
from agent_swarm.swarm.testing import FunctionBackend, call
from agent_swarm.workloads import get_workload
from agent_swarm.workloads.base import Episode, Mode, user_text
from agent_swarm.workloads.tau2_airline import AirlineDB
from agent_swarm.workloads.tau2_batch import _tickets, commutes, db_diff, diff_f1, replay
from agent_swarm.workloads.tau2_retail import RetailDB, retail_tools

WL = get_workload("tau2-batch")


@pytest.fixture(scope="module")
def k8_task() -> Task:
    return WL.tasks(1, seed=0, k=8)[0]


@pytest.fixture(scope="module", params=["retail", "airline"])
def k8_any(request: pytest.FixtureRequest) -> Task:
    """A K=8 job of each domain."""
    return WL.tasks(1, seed=0, k=8, domain=request.param)[0]


def _unrelated_write(task: Task) -> ToolCall:
    """A write on a record no ticket of ``task`` touches."""
    domain = task.metadata["domain"]
    tmap = {t.id: t for t in _tickets("train", domain)}
    touched = {rid for tid in task.metadata["tickets"] for _, rid in tmap[tid].records}
    if domain == "airline":
        victim = next(r for r in AirlineDB().data["reservations"] if r not in touched)
        return call("cancel_reservation", reservation_id=victim)
    orders = RetailDB().data["orders"]
    victim = next(o for o, v in orders.items() if v["status"] == "pending" and o not in touched)
    return call("cancel_pending_order", order_id=victim, reason="ordered by mistake")


async def _run(
    task: Task, mode: Mode, orch_backend: object = None, sub_backend: object = None
) -> tuple[EpisodeRecord, Episode]:
    ep = WL.episode(task, mode)
    gold = WL.gold_policy(task, mode)
    orch = Orchestrator(
        orch_backend or gold.orchestrator,  # type: ignore[arg-type]
        ep.config,
        tools=ep.tools,
        agents=ep.agents,
        subagent_backend=sub_backend or gold.subagent,  # type: ignore[arg-type]
        reward_fn=ep.reward,
    )
    return await orch.run(task), ep


async def test_gold_k8_reaches_reward_one_in_both_modes(k8_any: Task) -> None:
    swarm, _ = await _run(k8_any, "swarm")
    single, _ = await _run(k8_any, "single")
    for rec in (swarm, single):
        assert rec.reward is not None and rec.reward.r_perf == 1.0
        assert rec.reward.details["exact_db"] is True
        assert rec.reward.details["ticket_success_rate"] == 1.0
    domain = k8_any.metadata["domain"]
    assert swarm.dag.stage_widths[0] == 8 and {s.name for s in swarm.subagent_results} == {f"{domain}_agent"}
    assert swarm.answer is not None and swarm.answer.count(f"| {domain}-") == 8
    # One tool call per step: the gold critical paths are Σ n_i + 1 (single) against max n_i + 3 (swarm).
    tmap = {t.id: t for t in _tickets("train", domain)}
    n = [tmap[i].n_actions for i in k8_any.metadata["tickets"]]
    assert (single.dag.critical_steps, swarm.dag.critical_steps) == (sum(n) + 1, max(n) + 3)
    if domain == "retail":  # the issue-7 target (balanced 5–6 action tickets)
        assert single.dag.critical_steps / swarm.dag.critical_steps >= 4.5


@pytest.mark.parametrize(("domain", "band"), [("retail", (5, 6)), ("airline", (1, 20))])
def test_batches_are_disjoint_commuting_and_reproducible(domain: str, band: tuple[int, int]) -> None:
    a = WL.tasks(3, seed=7, k=6, domain=domain)
    b = WL.tasks(3, seed=7, k=6, domain=domain)
    c = WL.tasks(3, seed=8, k=6, domain=domain)
    assert [t.metadata["tickets"] for t in a] == [t.metadata["tickets"] for t in b]
    assert [t.metadata["tickets"] for t in a] != [t.metadata["tickets"] for t in c]
    tmap = {t.id: t for t in _tickets("train", domain)}
    for task in a:
        tickets = [tmap[i] for i in task.metadata["tickets"]]
        assert len(tickets) == 6 and task.metadata["domain"] == domain
        for i, x in enumerate(tickets):
            for y in tickets[i + 1 :]:
                assert not (x.records & y.records), (x.id, y.id)
        assert commutes(tickets)
        assert all(band[0] <= t.n_actions <= band[1] for t in tickets)
        for t in tickets:
            assert t.id.removeprefix(f"{domain}-") in json.dumps(task.metadata) and f"Ticket {t.id}" in task.prompt


def test_train_and_test_splits_do_not_share_tickets() -> None:
    train = {t.id for t in _tickets("train")}
    test = {t.id for t in _tickets("test")}
    assert train and test and not (train & test)
    with pytest.raises(ConfigError, match="unknown split"):
        WL.tasks(1, split="validation")


def test_bad_knobs_fail_loudly_naming_the_knobs() -> None:
    with pytest.raises(ConfigError, match="min_actions"):
        WL.tasks(1, min_actions=7, max_actions=3)
    with pytest.raises(ConfigError, match="Known knobs: k"):
        WL.tasks(1, kk=3)
    with pytest.raises(ConfigError, match="Widen the band"):
        WL.tasks(1, k=16, min_actions=5, max_actions=5)


async def test_an_agent_that_skips_one_ticket_loses_recall_not_precision(k8_any: Task) -> None:
    skipped = k8_any.metadata["tickets"][0]
    gold = WL.gold_policy(k8_any, "swarm")

    async def lazy(request: ModelRequest) -> Completion:
        if f"Ticket {skipped}\n" in user_text(request):
            return Completion(text="I will not do this one.")
        return await gold.subagent.complete(request)

    rec, _ = await _run(k8_any, "swarm", sub_backend=FunctionBackend(lazy))
    d = rec.reward.details if rec.reward else {}
    assert d["item_precision"] == 1.0
    assert 0.0 < d["item_recall"] < 1.0
    assert d["exact_db"] is False
    assert d["per_ticket"][skipped] is False
    assert d["ticket_success_rate"] == 7 / 8
    assert d["items"] == {t: float(t != skipped) for t in k8_any.metadata["tickets"]}  # per-ticket items


async def test_collateral_writes_lower_precision(k8_any: Task) -> None:
    single = WL.gold_policy(k8_any, "single")
    collateral = _unrelated_write(k8_any)
    state = {"done": False}

    async def clumsy(request: ModelRequest) -> Completion:
        out = await single.orchestrator.complete(request)
        if not out.tool_calls and not state["done"]:  # before answering, cancel an unrelated order/reservation
            state["done"] = True
            return Completion(tool_calls=(collateral,))
        return out

    rec, _ = await _run(k8_any, "single", orch_backend=FunctionBackend(clumsy))
    d = rec.reward.details if rec.reward else {}
    assert d["item_recall"] == 1.0 and d["item_precision"] < 1.0
    assert d["ticket_success_rate"] == 1.0 and d["exact_db"] is False


async def test_doing_nothing_scores_zero(k8_any: Task) -> None:
    rec, _ = await _run(k8_any, "single", orch_backend=FunctionBackend(lambda r: Completion(text="done")))
    assert rec.reward is not None and rec.reward.r_perf == 0.0
    assert rec.reward.details["ticket_success_rate"] == 0.0
    assert set(rec.reward.details["items"].values()) == {0.0}


def test_db_diff_and_f1() -> None:
    before = {"orders": {"a": {"status": "pending", "items": [1, 2]}, "b": {"status": "x"}}}
    after = {"orders": {"a": {"status": "cancelled", "items": [1]}, "b": {"status": "x"}, "c": {"s": 1}}}
    diff = db_diff(before, after)
    assert ("orders", "a", "status", '"cancelled"') in diff
    assert ("orders", "a", "items[1]", "<absent>") in diff
    assert ("orders", "c", "s", "1") in diff
    assert all(item[1] != "b" for item in diff)
    assert diff_f1(set(), set()) == (1.0, 1.0, 1.0)
    p, r, f = diff_f1({1, 2}, {2, 3, 4})
    assert (p, r) == (0.5, 1 / 3) and f == pytest.approx(0.4)


def test_retail_tools_enforce_the_policy_and_leave_the_db_untouched_on_error() -> None:
    db = RetailDB()
    tools = {t.name: t for t in retail_tools(db)}
    orders = db.data["orders"]
    delivered = next(o for o, v in orders.items() if v["status"] == "delivered")
    snapshot = json.dumps(db.data, sort_keys=True)
    from agent_swarm.swarm.errors import ToolError

    with pytest.raises(ToolError, match="only pending orders can be cancelled"):
        tools["cancel_pending_order"].fn(order_id=delivered, reason="no longer needed")
    pending = next(o for o, v in orders.items() if v["status"] == "pending")
    with pytest.raises(ToolError, match="invalid reason"):
        tools["cancel_pending_order"].fn(order_id=pending, reason="changed my mind")
    with pytest.raises(ToolError, match="order not found"):
        tools["get_order_details"].fn(order_id="W0000000")
    assert json.dumps(db.data, sort_keys=True) == snapshot

    # A gift-card order is refunded to the card at once.
    gc = next(
        o
        for o, v in orders.items()
        if v["status"] == "pending" and v["payment_history"][0]["payment_method_id"].startswith("gift_card")
    )
    order = orders[gc]
    card = db.data["users"][order["user_id"]]["payment_methods"][order["payment_history"][0]["payment_method_id"]]
    before = card["balance"]
    tools["cancel_pending_order"].fn(order_id=gc, reason="ordered by mistake")
    assert order["status"] == "cancelled" and order["cancel_reason"] == "ordered by mistake"
    assert card["balance"] == pytest.approx(before + order["payment_history"][0]["amount"])
    assert order["payment_history"][-1]["transaction_type"] == "refund"


def test_both_address_tools_store_an_address_as_the_retail_db_does() -> None:
    db = RetailDB()
    tools = {t.name: t for t in retail_tools(db)}
    user = sorted(db.data["users"])[0]
    pending = next(o for o, v in sorted(db.data["orders"].items()) if v["status"] == "pending")
    where = {"address1": "1 Main St", "address2": "", "city": "Austin", "state": "TX", "country": "USA", "zip": "78701"}
    stored = db.data["users"][user]["address"]
    assert list(stored) == ["address1", "address2", "city", "country", "state", "zip"]  # the upstream key order
    for tool, key in (
        ("modify_user_address", {"user_id": user}),
        ("modify_pending_order_address", {"order_id": pending}),
    ):
        out = tools[tool].fn(**key, **where)
        assert list(out["address"].items()) == [(k, where[k]) for k in stored], tool


def test_both_address_tools_describe_their_arguments_to_the_model_in_order() -> None:
    tools = {t.name: t for t in retail_tools(RetailDB())}
    address = {
        "address1": "first address line.",
        "address2": 'second address line ("" when none).',
        "city": "city.",
        "state": 'state, e.g. "CA".',
        "country": 'country, e.g. "USA".',
        "zip": "zip code.",
    }
    for tool, first in (
        ("modify_user_address", {"user_id": 'the user id, e.g. "sara_doe_496".'}),
        ("modify_pending_order_address", {"order_id": 'the order id, e.g. "#W0000000".'}),
    ):
        props = tools[tool].spec.parameters["properties"]
        assert {k: v["description"] for k, v in props.items()} == {**first, **address}, tool
        assert list(props) == [*first, *address], tool
    assert tools["modify_user_address"].description == "Change a user's default address."


def test_gold_replay_is_deterministic_and_changes_the_db() -> None:
    tickets = list(_tickets("train"))[:5]
    a, b = replay(tickets), replay(tickets)
    assert a.data == b.data
    assert db_diff(RetailDB().data, a.data)


async def test_every_gold_tool_call_goes_through_the_real_tools(k8_task: Task) -> None:
    rec, _ = await _run(k8_task, "swarm")
    calls = [m for s in rec.subagent_results for m in s.transcript if isinstance(m, ToolMessage)]
    writes = [m for m in calls if m.name in ("exchange_delivered_order_items", "return_delivered_order_items")]
    assert writes and all('"status"' in m.content for m in writes)
    # The orchestrator's table reports what the tools returned.
    assert rec.answer is not None and rec.answer.count("| retail-") == 8


def test_modify_items_gives_each_item_its_own_variant_and_records_the_price_difference() -> None:
    db = RetailDB()
    tools = {t.name: t for t in retail_tools(db)}
    oid = "#W9911714"  # pending, four items of four products (τ² retail task 20)
    order = db.data["orders"][oid]
    old = {it["item_id"]: it["price"] for it in order["items"]}
    new_ids = ["4579334072", "1151293680", "4107812777", "2882812427"]
    tools["modify_pending_order_items"].fn(
        order_id=oid, item_ids=list(old), new_item_ids=new_ids, payment_method_id="gift_card_4332117"
    )
    prices = [it["price"] for it in order["items"]]
    assert [it["item_id"] for it in order["items"]] == new_ids
    assert len(set(prices)) == 4  # each item took its own variant's price and options
    paid = order["payment_history"][-1]
    assert paid["transaction_type"] == "payment"
    assert paid["amount"] == pytest.approx(sum(prices) - sum(old.values()))
    assert order["status"] == "pending (item modified)"
    from agent_swarm.swarm.errors import ToolError

    with pytest.raises(ToolError, match="only pending orders"):  # once per order
        tools["modify_pending_order_items"].fn(
            order_id=oid, item_ids=new_ids[:1], new_item_ids=new_ids[:1], payment_method_id="gift_card_4332117"
        )
