"""Build the packaged τ² retail/airline corpus (``tools/corpora/tau2/documents.jsonl.gz``).

A maintainer's script, not part of the package. Run from the repository root, with the project
installed, on a directory holding the τ²-bench ``{retail,airline}/db.json.gz`` and ``policy.md``
(``tools/corpora/tau2/SOURCE.md`` names the upstream commit)::

    python scripts/build_tau2.py TAU2_DATA_DIR

It is deterministic: the same source gives the same bytes. What goes in (kept small, and closed under
references so multi-hop questions always resolve inside the corpus):

* every retail product (50) and every airline flight (300);
* the first ``--users`` retail users and airline users by sorted id, with all of their orders and
  reservations;
* both policy documents, one document per ``##``/``###`` section.

Each document has a stable id (``retail/product/<id>``, ``airline/flight/<number>`` …), a title,
a text rendering with the key attributes, a ``kind`` and ``fields`` = the source record.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from pathlib import Path
from typing import Any

from agent_swarm.tools.builtin.search import Document, _dump_jsonl

__all__ = ["build_documents", "main"]

OUT = Path(__file__).resolve().parents[1] / "tools" / "corpora" / "tau2" / "documents.jsonl.gz"


def _addr(a: dict[str, Any]) -> str:
    parts = [a.get("address1", ""), a.get("address2", ""), a.get("city", ""), a.get("state", ""), a.get("zip", "")]
    return ", ".join(p for p in parts if p) + (f", {a['country']}" if a.get("country") else "")


def _opts(o: dict[str, Any]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in o.items())


def _payments(pm: dict[str, Any]) -> str:
    out = []
    for pid, p in pm.items():
        extra = ""
        if p.get("brand"):
            extra = f" ({p['brand']} ending {p.get('last_four', '?')})"
        elif "balance" in p:
            extra = f" (balance ${p['balance']})"
        elif "amount" in p:
            extra = f" (amount ${p['amount']})"
        out.append(f"{pid}: {p.get('source', '?')}{extra}")
    return "; ".join(out)


def _product(p: dict[str, Any]) -> Document:
    variants = p["variants"].values()
    lines = [f"Product {p['name']} (product id {p['product_id']}), {len(p['variants'])} variants:"]
    for v in variants:
        avail = "available" if v["available"] else "unavailable"
        lines.append(f"- item {v['item_id']}: {_opts(v['options'])}; price ${v['price']:.2f}; {avail}")
    return Document(
        id=f"retail/product/{p['product_id']}",
        title=f"{p['name']} (product {p['product_id']})",
        text="\n".join(lines),
        kind="retail_product",
        source="tau2/retail/db.json",
        fields=p,
    )


def _retail_user(u: dict[str, Any]) -> Document:
    name = f"{u['name']['first_name']} {u['name']['last_name']}"
    text = (
        f"Retail customer {name} (user id {u['user_id']}).\nEmail: {u['email']}\n"
        f"Address: {_addr(u['address'])}\nPayment methods: {_payments(u['payment_methods'])}\n"
        f"Orders: {', '.join(u['orders']) or 'none'}"
    )
    return Document(
        id=f"retail/user/{u['user_id']}",
        title=f"{name} (retail user {u['user_id']})",
        text=text,
        kind="retail_user",
        source="tau2/retail/db.json",
        fields=u,
    )


def _order(o: dict[str, Any]) -> Document:
    total = round(sum(i["price"] for i in o["items"]), 2)
    lines = [
        f"Order {o['order_id']} by user {o['user_id']}, status {o['status']}.",
        f"Shipping address: {_addr(o['address'])}",
        f"Items ({len(o['items'])}, total ${total:.2f}):",
    ]
    lines += [
        f"- {i['name']} (product {i['product_id']}, item {i['item_id']}): {_opts(i['options'])}; ${i['price']:.2f}"
        for i in o["items"]
    ]
    for f in o.get("fulfillments", []):
        lines.append(f"Fulfillment: tracking {', '.join(f['tracking_id'])} for items {', '.join(f['item_ids'])}")
    for t in o.get("payment_history", []):
        lines.append(f"Payment: {t['transaction_type']} ${t['amount']} via {t['payment_method_id']}")
    return Document(
        id=f"retail/order/{o['order_id'].lstrip('#')}",
        title=f"Order {o['order_id']}",
        text="\n".join(lines),
        kind="retail_order",
        source="tau2/retail/db.json",
        fields=o,
    )


def _flight(f: dict[str, Any]) -> Document:
    lines = [
        f"Flight {f['flight_number']} from {f['origin']} to {f['destination']}, scheduled departure "
        f"{f['scheduled_departure_time_est']} EST, arrival {f['scheduled_arrival_time_est']} EST.",
    ]
    for date, d in f["dates"].items():
        if d["status"] == "available":
            cabins = ", ".join(f"{c} ${d['prices'][c]} ({d['available_seats'][c]} seats)" for c in d["prices"])
            lines.append(f"{date}: available; {cabins}")
        else:
            lines.append(f"{date}: {d['status']}")
    return Document(
        id=f"airline/flight/{f['flight_number']}",
        title=f"Flight {f['flight_number']} {f['origin']}→{f['destination']}",
        text="\n".join(lines),
        kind="airline_flight",
        source="tau2/airline/db.json",
        fields=f,
    )


def _airline_user(u: dict[str, Any]) -> Document:
    name = f"{u['name']['first_name']} {u['name']['last_name']}"
    passengers = "; ".join(f"{p['first_name']} {p['last_name']} (born {p['dob']})" for p in u["saved_passengers"])
    text = (
        f"Airline customer {name} (user id {u['user_id']}), {u['membership']} member, born {u['dob']}.\n"
        f"Email: {u['email']}\nAddress: {_addr(u['address'])}\n"
        f"Payment methods: {_payments(u['payment_methods'])}\n"
        f"Saved passengers: {passengers or 'none'}\nReservations: {', '.join(u['reservations']) or 'none'}"
    )
    return Document(
        id=f"airline/user/{u['user_id']}",
        title=f"{name} (airline user {u['user_id']})",
        text=text,
        kind="airline_user",
        source="tau2/airline/db.json",
        fields=u,
    )


def _reservation(r: dict[str, Any]) -> Document:
    lines = [
        f"Reservation {r['reservation_id']} by user {r['user_id']}: {r['flight_type'].replace('_', ' ')} "
        f"{r['origin']}→{r['destination']}, cabin {r['cabin']}, created {r['created_at']}.",
        f"Flights ({len(r['flights'])}):",
    ]
    lines += [
        f"- {f['flight_number']} {f['origin']}→{f['destination']} on {f['date']}, ${f['price']}" for f in r["flights"]
    ]
    lines.append(
        "Passengers: " + "; ".join(f"{p['first_name']} {p['last_name']} (born {p['dob']})" for p in r["passengers"])
    )
    lines.append(f"Baggage: {r['total_baggages']} total, {r['nonfree_baggages']} paid; insurance: {r['insurance']}")
    lines += [f"Payment: ${p['amount']} via {p['payment_id']}" for p in r.get("payment_history", [])]
    if r.get("status"):
        lines.append(f"Status: {r['status']}")
    return Document(
        id=f"airline/reservation/{r['reservation_id']}",
        title=f"Reservation {r['reservation_id']}",
        text="\n".join(lines),
        kind="airline_reservation",
        source="tau2/airline/db.json",
        fields=r,
    )


def _slug(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")


def _policy(domain: str, text: str) -> list[Document]:
    docs: list[Document] = []
    sections = re.split(r"(?m)^(?=#{1,3} )", text)
    parent = ""
    for sec in sections:
        if not sec.strip():
            continue
        head, _, body = sec.partition("\n")
        title = head.lstrip("#").strip() if head.startswith("#") else "Introduction"
        if head.startswith("## "):
            parent = title
        elif head.startswith("# "):
            parent = ""
        full = f"{parent} / {title}" if head.startswith("### ") and parent else title
        if not body.strip():
            continue
        sid = f"{domain}/policy/{_slug(full)}"
        n = 2
        while any(d.id == sid for d in docs):
            sid, n = f"{domain}/policy/{_slug(full)}-{n}", n + 1
        docs.append(
            Document(
                id=sid,
                title=f"{domain.capitalize()} policy: {full}",
                text=body.strip(),
                kind="policy",
                source=f"tau2/{domain}/policy.md",
                fields={"domain": domain, "section": full},
            )
        )
    return docs


def build_documents(source: Path, users: int = 60) -> list[Document]:
    """All corpus documents from the τ² data directory, in a fixed order."""
    retail = json.loads(gzip.decompress((source / "retail" / "db.json.gz").read_bytes()))
    airline = json.loads(gzip.decompress((source / "airline" / "db.json.gz").read_bytes()))
    docs: list[Document] = []
    docs += _policy("retail", (source / "retail" / "policy.md").read_text(encoding="utf-8"))
    docs += _policy("airline", (source / "airline" / "policy.md").read_text(encoding="utf-8"))
    docs += [_product(retail["products"][k]) for k in sorted(retail["products"])]
    r_users = [retail["users"][k] for k in sorted(retail["users"])[:users]]
    docs += [_retail_user(u) for u in r_users]
    docs += [_order(retail["orders"][o]) for u in r_users for o in sorted(u["orders"]) if o in retail["orders"]]
    docs += [_flight(airline["flights"][k]) for k in sorted(airline["flights"])]
    a_users = [airline["users"][k] for k in sorted(airline["users"])[:users]]
    docs += [_airline_user(u) for u in a_users]
    docs += [
        _reservation(airline["reservations"][r])
        for u in a_users
        for r in sorted(u["reservations"])
        if r in airline["reservations"]
    ]
    return docs


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("source", type=Path, help="the tau2-retail-airline data directory")
    ap.add_argument("--users", type=int, default=60, help="users per domain (with their orders/reservations)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    docs = build_documents(args.source, args.users)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    _dump_jsonl(docs, args.out)
    print(f"wrote {len(docs)} documents to {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
