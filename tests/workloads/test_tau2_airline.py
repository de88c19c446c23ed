"""τ²-batch on the airline domain: the reimplemented airline tools, disjoint batches, gold replay, reward."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_swarm.swarm.errors import ConfigError, ToolError
from agent_swarm.swarm.records import Task
from agent_swarm.swarm.testing import call
from agent_swarm.tools.registry import Tool, ToolContext, execute_tool
from agent_swarm.workloads import get_workload
from agent_swarm.workloads.tau2_airline import AirlineDB, airline_tools
from agent_swarm.workloads.tau2_batch import _tickets, commutes, db_diff, replay

WL = get_workload("tau2-batch")
RES, USER = "4N6DW4", "mohamed_ahmed_6263"  # economy SEA→BOS HAT194 on 2024-05-26, 2 passengers, paid $410
GC_BIG, GC_SMALL, CERT = "gift_card_8266587", "gift_card_9433216", "certificate_4639803"  # $179, $24, $150
FLIGHT = [{"flight_number": "HAT194", "date": "2024-05-26"}]  # economy $162, basic economy $94, business $330
PAX = [{"first_name": "Mohamed", "last_name": "Ahmed", "dob": "1956-04-24"}]
BOOK: dict[str, Any] = {
    "user_id": USER,
    "origin": "SEA",
    "destination": "BOS",
    "flight_type": "one_way",
    "cabin": "economy",
    "flights": FLIGHT,
    "passengers": PAX,
    "total_baggages": 0,
    "nonfree_baggages": 0,
    "insurance": "no",
}


@pytest.fixture(scope="module")
def k8_task() -> Task:
    return WL.tasks(1, seed=0, k=8, domain="airline")[0]


@pytest.fixture
def env() -> tuple[AirlineDB, dict[str, Tool]]:
    db = AirlineDB()
    return db, {t.name: t for t in airline_tools(db)}


def use(tools: dict[str, Tool], name: str, **args: Any) -> Any:
    """Call a tool as the runtime does: validate the JSON arguments, then call."""
    t = tools[name]
    return t.fn(**t.validate(args))


def pay(*parts: tuple[str, Any]) -> list[dict[str, Any]]:
    return [{"payment_id": p, "amount": a} for p, a in parts]


def snapshot(db: AirlineDB) -> str:
    return json.dumps(db.data, sort_keys=True)


# -- the workload ---------------------------------------------------------------------------------------


def test_airline_k8_batches_come_from_the_train_tickets_with_at_most_one_booking() -> None:
    tmap = {t.id: t for t in _tickets("train", "airline")}
    dev_ids = {t.id for t in _tickets("dev", "airline")}
    test_ids = {t.id for t in _tickets("test", "airline")}
    assert len(tmap) + len(dev_ids) == 13 and len(tmap) >= 8 and len(test_ids) >= 8  # τ²'s 13 usable train tickets
    assert not (set(tmap) & test_ids) and not (set(tmap) & dev_ids) and not (dev_ids & test_ids)
    for task in WL.tasks(5, seed=3, k=8, domain="airline"):
        assert task.id.startswith("tau2-batch-airline-train-s3-") and "the airline" in task.prompt
        tickets = [tmap[i] for i in task.metadata["tickets"]]  # KeyError if a test ticket slipped in
        assert len(set(task.metadata["tickets"])) == 8 and commutes(tickets)
        assert sum(any(n == "book_reservation" for n, _ in t.actions) for t in tickets) <= 1
    assert WL.tasks(1, k=8, domain="airline", split="test")[0].metadata["tickets"][0] in test_ids


def test_two_bookings_share_the_new_reservation_id_so_they_never_meet_in_a_batch() -> None:
    tmap = {t.id: t for t in _tickets("train", "airline")}
    a, b = tmap["airline-20"], tmap["airline-14"]  # both book a new reservation (HATHAT)
    assert ("reservations", "HATHAT") in a.records & b.records
    assert not commutes([a, b])  # either order gives the other one HATHAU
    assert {("flights", "HAT136"), ("flights", "HAT039")} <= a.records  # the booking takes seats there


def test_airline_knobs_default_to_every_ticket_and_unknown_domains_fail() -> None:
    task = WL.tasks(1, k=4, domain="airline")[0]
    assert task.metadata["knobs"] == {"k": 4, "min_actions": 1, "max_actions": 20, "domain": "airline"}
    assert WL.tasks(1, k=4)[0].metadata["knobs"]["min_actions"] == 5  # retail keeps its band
    with pytest.raises(ConfigError, match="domain"):
        WL.tasks(1, domain="telecom")
    with pytest.raises(ConfigError, match="only 5 airline train tickets have 5–20 gold actions"):
        WL.tasks(1, k=6, domain="airline", min_actions=5)


def test_the_airline_episode_is_built_from_the_task_metadata(k8_task: Task) -> None:
    ep = WL.episode(Task.model_validate_json(k8_task.model_dump_json()), "swarm")
    assert {t.name for t in ep.tools} >= {"book_reservation", "search_onestop_flight", "calculate"}
    assert len(ep.tools) == 14
    (agent,) = ep.agents
    assert agent.name == "airline_agent" and "# Airline Agent Policy" in agent.system_prompt
    assert "airline_agent" in ep.instructions
    single = WL.episode(k8_task, "single")
    assert "Airline Agent Policy" in single.instructions and "retail" not in single.instructions
    for t in ep.tools:  # schemas are self-contained: they get embedded in larger schemas
        assert "$ref" not in json.dumps(t.parameters) and "$defs" not in t.parameters


def test_gold_replay_changes_exactly_what_the_tickets_write() -> None:
    tickets = _tickets("train", "airline")
    gold = replay(tickets[:3]).data
    assert gold == replay(tickets[:3]).data
    changed = {(table, rid) for table, rid, _, _ in db_diff(AirlineDB().data, gold)}
    assert changed and changed <= set().union(*(t.records for t in tickets[:3]))


# -- the tools ------------------------------------------------------------------------------------------


def test_book_reservation_prices_pays_takes_seats_and_numbers_the_new_reservation(env: Any) -> None:
    db, tools = env
    user = db.data["users"][USER]
    seats = db.data["flights"]["HAT194"]["dates"]["2024-05-26"]["available_seats"]
    before = snapshot(db)
    with pytest.raises(ToolError, match="total price is 162, but 100 is paid"):
        use(tools, "book_reservation", **BOOK, payment_methods=pay((GC_BIG, 100)))
    with pytest.raises(ToolError, match="not enough balance on certificate"):
        use(tools, "book_reservation", **BOOK, payment_methods=pay((CERT, 162)))
    with pytest.raises(ToolError, match="payment method 'credit_card_1' not found"):
        use(tools, "book_reservation", **BOOK, payment_methods=pay(("credit_card_1", 162)))
    four = {**BOOK, "cabin": "basic_economy", "passengers": PAX * 4}
    with pytest.raises(ToolError, match="not enough basic_economy seats"):  # 3 left
        use(tools, "book_reservation", **four, payment_methods=pay((GC_BIG, 376)))
    assert snapshot(db) == before  # failed calls write nothing

    res = use(tools, "book_reservation", **BOOK, payment_methods=pay((CERT, 150), (GC_SMALL, 12)))
    assert res["reservation_id"] == "HATHAT" and res["created_at"] == "2024-05-15T15:00:00"
    assert res["flights"] == [{**FLIGHT[0], "origin": "SEA", "destination": "BOS", "price": 162}]
    assert CERT not in user["payment_methods"]  # a certificate is used up whole
    assert user["payment_methods"][GC_SMALL]["amount"] == 12.0
    assert seats["economy"] == 15 and user["reservations"][-1] == "HATHAT"
    # Insurance ($30 per passenger) and a non-free bag ($50) on top of the $94 basic economy fare.
    extras = {**BOOK, "cabin": "basic_economy", "insurance": "yes", "total_baggages": 1, "nonfree_baggages": 1}
    res = use(tools, "book_reservation", **extras, payment_methods=pay((GC_BIG, 174)))
    assert res["reservation_id"] == "HATHAU" and user["payment_methods"][GC_BIG]["amount"] == 5.0


def test_flight_changes_charge_or_refund_the_difference_for_every_passenger(env: Any) -> None:
    db, tools = env
    res = db.data["reservations"][RES]
    cards = db.data["users"][USER]["payment_methods"]

    def change(cabin: str, payment_id: str, flights: list[dict[str, str]] = FLIGHT) -> Any:
        return use(tools, "update_reservation_flights", reservation_id=RES, cabin=cabin, flights=flights,
                   payment_id=payment_id)  # fmt: skip

    with pytest.raises(ToolError, match="certificate cannot pay"):
        change("business", CERT)
    with pytest.raises(ToolError, match="not enough to pay 310"):  # (330 − 175) × 2
        change("business", GC_SMALL)
    with pytest.raises(ToolError, match="is 'landed'"):
        change("economy", GC_BIG, [{"flight_number": "HAT194", "date": "2024-05-01"}])
    # Same flight, same cabin: the old price is kept and nothing is charged.
    change("economy", GC_BIG)
    assert res["flights"][0]["price"] == 175 and len(res["payment_history"]) == 1
    # Down to basic economy: (94 − 175) × 2 = −162 goes back onto the gift card at once.
    change("basic_economy", GC_SMALL)
    assert res["cabin"] == "basic_economy" and res["flights"][0]["price"] == 94
    assert res["payment_history"][-1] == {"payment_id": GC_SMALL, "amount": -162}
    assert cards[GC_SMALL]["amount"] == 186.0


def test_bags_passengers_certificates_and_cancellation(env: Any) -> None:
    db, tools = env
    res = db.data["reservations"][RES]
    cards = db.data["users"][USER]["payment_methods"]

    def bags(total: int, nonfree: int, payment_id: str) -> Any:
        return use(tools, "update_reservation_baggages", reservation_id=RES, total_baggages=total,
                   nonfree_baggages=nonfree, payment_id=payment_id)  # fmt: skip

    with pytest.raises(ToolError, match="certificate cannot pay"):
        bags(3, 2, CERT)
    with pytest.raises(ToolError, match="nonfree_baggages <= total_baggages"):
        bags(1, 3, GC_BIG)
    bags(3, 2, GC_BIG)
    assert (res["total_baggages"], res["nonfree_baggages"]) == (3, 2) and cards[GC_BIG]["amount"] == 79.0
    bags(3, 1, GC_BIG)
    assert cards[GC_BIG]["amount"] == 79.0  # removing a paid bag refunds nothing

    with pytest.raises(ToolError, match="has 2 passengers; 1 given"):
        use(tools, "update_reservation_passengers", reservation_id=RES, passengers=PAX)
    new = [*PAX, {"first_name": "Liam", "last_name": "Moore", "dob": "1964-08-17"}]
    use(tools, "update_reservation_passengers", reservation_id=RES, passengers=new)
    assert res["passengers"] == new

    assert use(tools, "send_certificate", user_id=USER, amount=100).startswith("Certificate certificate_3221322 added")
    use(tools, "send_certificate", user_id=USER, amount=50)
    assert cards["certificate_3221323"] == {"source": "certificate", "id": "certificate_3221323", "amount": 50.0}

    seats = dict(db.data["flights"]["HAT194"]["dates"]["2024-05-26"]["available_seats"])
    paid = list(res["payment_history"])
    use(tools, "cancel_reservation", reservation_id=RES)
    assert res["status"] == "cancelled"
    assert res["payment_history"] == paid + [{"payment_id": p["payment_id"], "amount": -p["amount"]} for p in paid]
    assert db.data["flights"]["HAT194"]["dates"]["2024-05-26"]["available_seats"] == seats  # as in τ²
    with pytest.raises(ToolError, match="is cancelled"):
        use(tools, "cancel_reservation", reservation_id=RES)


def test_searches_and_look_ups(env: Any) -> None:
    _, tools = env
    direct = use(tools, "search_direct_flight", origin="SEA", destination="BOS", date="2024-05-26")
    assert "HAT194" in {f["flight_number"] for f in direct}
    assert all(f["status"] == "available" and f["date"] == "2024-05-26" for f in direct)
    assert use(tools, "search_direct_flight", origin="SEA", destination="BOS", date="2024-05-01") == []  # all landed
    # HAT082 lands at 03:00 the next day, so the connection leaves on 2024-05-21.
    pairs = use(tools, "search_onestop_flight", origin="SFO", destination="JFK", date="2024-05-20")
    legs = {(a["flight_number"], a["date"], b["flight_number"], b["date"]) for a, b in pairs}
    assert ("HAT082", "2024-05-20", "HAT025", "2024-05-21") in legs
    assert all(a["destination"] == b["origin"] and b["destination"] == "JFK" for a, b in pairs)
    assert use(tools, "get_flight_status", flight_number="HAT194", date="2024-05-15") == "on time"
    assert {"iata": "LGA", "city": "LaGuardia"} in use(tools, "list_all_airports")
    assert use(tools, "calculate", expression="2 * (330 - 175)") == "310.0"


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("get_user_details", {"user_id": "nobody_1"}, "user not found: 'nobody_1'"),
        ("get_reservation_details", {"reservation_id": "ZZZZZZ"}, "reservation not found"),
        ("cancel_reservation", {"reservation_id": "zfa04y"}, "reservation not found"),
        ("get_flight_status", {"flight_number": "HAT999", "date": "2024-05-20"}, "flight not found"),
        ("get_flight_status", {"flight_number": "HAT194", "date": "2024-06-30"}, "does not fly on"),
        ("search_direct_flight", {"origin": "SEA", "destination": "BOS", "date": "May 26"}, "invalid date"),
        ("send_certificate", {"user_id": USER, "amount": -5}, "positive"),
        ("book_reservation", {**BOOK, "payment_methods": []}, "payment_methods must not be empty"),
        ("book_reservation", {**BOOK, "flights": [], "payment_methods": []}, "flights must not be empty"),
        ("book_reservation", {**BOOK, "flights": [{"flight_number": "HAT194"}], "payment_methods": []}, "date"),
        ("book_reservation", {**BOOK, "insurance": "maybe", "payment_methods": []}, "insurance"),
        ("book_reservation", {**BOOK, "payment_methods": pay((GC_BIG, "lots"))}, "amount"),
        (
            "update_reservation_flights",
            {"reservation_id": RES, "cabin": "first", "flights": FLIGHT, "payment_id": GC_BIG},
            "cabin",
        ),
        ("update_reservation_passengers", {"reservation_id": RES, "passengers": [{"name": "A B"}]}, "first_name"),
        ("update_reservation_baggages", {"reservation_id": RES, "total_baggages": "two"}, "total_baggages"),
    ],
)
async def test_bad_input_is_a_tool_error_the_model_reads_and_changes_nothing(
    env: Any, name: str, args: dict[str, Any], message: str
) -> None:
    db, tools = env
    before = snapshot(db)
    result = await execute_tool(call(name, **args), tools, ToolContext())
    assert result.is_error and result.error_type == "ToolError", result.content  # not a crash inside the tool
    assert message in result.content
    assert snapshot(db) == before
