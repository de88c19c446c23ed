"""The τ²-bench retail domain: its database and its 16 tools, reimplemented.

The tools follow the documented behaviour of τ²-bench's retail tools and the domain policy
(``data/tau2_retail/policy.md``): look-ups by email or name + zip, order/product/item details, and the
write actions (cancel, modify address/payment/items of pending orders, return/exchange delivered
orders, modify a user's default address). No upstream code is copied. A failing precondition raises
:class:`~agent_swarm.swarm.errors.ToolError`, which the model sees as an error result; the database is left
untouched by a failed call.

One :class:`RetailDB` is the shared state of an episode; :func:`retail_tools` binds the tools to it.
The tools are synchronous and declared non-blocking, so they run on the event loop one at a time and
parallel sub-agents never interleave inside one write.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from agent_swarm.swarm.errors import ToolError
from agent_swarm.tools.registry import Tool
from agent_swarm.workloads.tau2_common import Record, Tau2DB, domain_tools, load_db

__all__ = [
    "CANCEL_REASONS",
    "WRITE_TOOLS",
    "RetailDB",
    "load_initial_db",
    "retail_tools",
]

CANCEL_REASONS = ("no longer needed", "ordered by mistake")
WRITE_TOOLS = frozenset(
    {
        "cancel_pending_order",
        "exchange_delivered_order_items",
        "modify_pending_order_address",
        "modify_pending_order_items",
        "modify_pending_order_payment",
        "modify_user_address",
        "return_delivered_order_items",
    }
)


def load_initial_db() -> dict[str, Any]:
    """A fresh copy of the initial retail database (``products``, ``users``, ``orders``)."""
    return load_db("retail")


def _address(address1: str, address2: str, city: str, state: str, country: str, zip: str) -> dict[str, str]:
    """An address as the τ² retail database stores it (its key order)."""
    return {"address1": address1, "address2": address2, "city": city, "country": country, "state": state, "zip": zip}


_ADDRESS_ARGS = """\
address1: first address line.
address2: second address line ("" when none).
city: city.
state: state, e.g. "CA".
country: country, e.g. "USA".
zip: zip code."""
"""The ``Args:`` lines of a tool taking an address (:func:`_address`'s arguments), last in its list."""

F = TypeVar("F", bound=Callable[..., Any])


def _takes_address(tool: F) -> F:
    """``tool`` with :data:`_ADDRESS_ARGS` at the end of its docstring's ``Args:`` (the model reads them)."""
    tool.__doc__ = f"{inspect.getdoc(tool)}\n{textwrap.indent(_ADDRESS_ARGS, '    ')}"
    return tool


def _r2(x: float) -> float:
    return round(x + 0.0, 2)


class RetailDB(Tau2DB):
    """The mutable retail database of one episode."""

    domain = "retail"
    owned = ("order_id", "orders")

    # -- look-ups that raise ToolError ---------------------------------------------------------------

    def user(self, user_id: str) -> dict[str, Any]:
        return self.get("users", user_id, "user")

    def order(self, order_id: str) -> dict[str, Any]:
        return self.get("orders", order_id, "order", " (order ids look like '#W1234567')")

    def product(self, product_id: str) -> dict[str, Any]:
        return self.get("products", product_id, "product")

    def order_payment_method(self, order: dict[str, Any], payment_method_id: str) -> dict[str, Any]:
        return self.payment_method(order["user_id"], payment_method_id)

    def touched(self, name: str, args: Mapping[str, Any], result: str | None) -> set[Record]:
        """Users and orders named, the orders' owners, and the users a look-up finds."""
        recs = super().touched(name, args, result)
        if result is not None and name.startswith("find_user_id"):
            recs.add(("users", result))
        return recs

    # -- helpers -------------------------------------------------------------------------------------

    def _check_items(
        self, order: dict[str, Any], item_ids: list[str], new_item_ids: list[str] | None, *, rounded: bool = True
    ) -> float:
        """Validate an item change; returns the price difference (new − old), rounded to cents unless
        ``rounded`` is False (τ² records a modification's payment amount unrounded)."""
        if not item_ids:
            raise ToolError("item_ids must not be empty")
        in_order = [it["item_id"] for it in order["items"]]
        for iid in set(item_ids):
            if item_ids.count(iid) > in_order.count(iid):
                raise ToolError(f"item {iid!r} not found in order {order['order_id']} (often enough)")
        if new_item_ids is None:
            return 0.0
        if len(item_ids) != len(new_item_ids):
            raise ToolError("item_ids and new_item_ids must have the same length")
        diff = 0.0
        for old_id, new_id in zip(item_ids, new_item_ids, strict=True):
            item = next(it for it in order["items"] if it["item_id"] == old_id)
            variants = self.product(item["product_id"])["variants"]
            if new_id not in variants:
                raise ToolError(f"new item {new_id!r} not found in product {item['product_id']} ({item['name']})")
            variant = variants[new_id]
            if not variant["available"]:
                raise ToolError(f"new item {new_id!r} is not available")
            diff += variant["price"] - item["price"]
        return _r2(diff) if rounded else diff

    def _gift_card_check(self, pm: dict[str, Any], amount: float) -> None:
        if pm["source"] == "gift_card" and pm.get("balance", 0.0) < amount:
            raise ToolError(f"insufficient gift card balance ({pm.get('balance', 0.0)}) to pay {amount}")


def retail_tools(db: RetailDB) -> tuple[Tool, ...]:
    """The 16 retail tools bound to ``db``."""

    def find_user_id_by_email(email: str) -> str:
        """Find a user id by email address.

        Args:
            email: the user's email, e.g. "something@example.com".
        """
        for uid, u in db.data["users"].items():
            if u["email"].lower() == email.strip().lower():
                return str(uid)
        raise ToolError(f"no user with email {email!r}")

    def find_user_id_by_name_zip(first_name: str, last_name: str, zip: str) -> str:
        """Find a user id by first name, last name and zip code (use when the email is unknown).

        Args:
            first_name: the first name, e.g. "John".
            last_name: the last name, e.g. "Doe".
            zip: the zip code of the user's address, e.g. "12345".
        """
        for uid, u in db.data["users"].items():
            if (
                u["name"]["first_name"].lower() == first_name.strip().lower()
                and u["name"]["last_name"].lower() == last_name.strip().lower()
                and u["address"]["zip"] == zip.strip()
            ):
                return str(uid)
        raise ToolError(f"no user named {first_name} {last_name} with zip {zip!r}")

    def get_user_details(user_id: str) -> dict[str, Any]:
        """Get a user's profile: name, address, email, payment methods and order ids.

        Args:
            user_id: the user id, e.g. "sara_doe_496".
        """
        return db.user(user_id)

    def get_order_details(order_id: str) -> dict[str, Any]:
        """Get the status and details of an order.

        Args:
            order_id: the order id, e.g. "#W0000000" (include the '#').
        """
        return db.order(order_id)

    def get_product_details(product_id: str) -> dict[str, Any]:
        """Get a product type with all its variant items (options, availability, price).

        Args:
            product_id: the product id, e.g. "6086499569" (not an item id).
        """
        return db.product(product_id)

    def get_item_details(item_id: str) -> dict[str, Any]:
        """Get one variant item (its product, options, availability and price) by item id.

        Args:
            item_id: the item id, e.g. "1008292230" (not a product id).
        """
        for p in db.data["products"].values():
            if item_id in p["variants"]:
                return {"product_id": p["product_id"], "name": p["name"], **p["variants"][item_id]}
        raise ToolError(f"item not found: {item_id!r}")

    def list_all_product_types() -> dict[str, str]:
        """List the name and product id of every product type in the store."""
        return dict(sorted((p["name"], pid) for pid, p in db.data["products"].items()))

    def cancel_pending_order(order_id: str, reason: str) -> dict[str, Any]:
        """Cancel a pending order; the payment is refunded (gift cards immediately).

        Args:
            order_id: the order id, e.g. "#W0000000".
            reason: either "no longer needed" or "ordered by mistake".
        """
        order = db.order(order_id)
        if order["status"] != "pending":
            raise ToolError(f"order {order_id} is {order['status']!r}; only pending orders can be cancelled")
        if reason not in CANCEL_REASONS:
            raise ToolError(f"invalid reason {reason!r}; use one of {list(CANCEL_REASONS)}")
        # Resolve every payment method before writing anything: a failed call leaves the DB as it was.
        payments = [(p, db.order_payment_method(order, p["payment_method_id"])) for p in order["payment_history"]]
        refunds = []
        for payment, pm in payments:
            refunds.append(
                {
                    "transaction_type": "refund",
                    "amount": payment["amount"],
                    "payment_method_id": payment["payment_method_id"],
                }
            )
            if pm["source"] == "gift_card":
                pm["balance"] = _r2(pm["balance"] + payment["amount"])
        order["status"] = "cancelled"
        order["cancel_reason"] = reason
        order["payment_history"].extend(refunds)
        return order

    @_takes_address
    def modify_pending_order_address(
        order_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
    ) -> dict[str, Any]:
        """Change the shipping address of a pending order.

        Args:
            order_id: the order id, e.g. "#W0000000".
        """
        order = db.order(order_id)
        if order["status"] != "pending":
            raise ToolError(f"order {order_id} is {order['status']!r}; only pending orders can be modified")
        order["address"] = _address(address1, address2, city, state, country, zip)
        return order

    def modify_pending_order_payment(order_id: str, payment_method_id: str) -> dict[str, Any]:
        """Pay a pending order with another of the user's payment methods (the old one is refunded).

        Args:
            order_id: the order id, e.g. "#W0000000".
            payment_method_id: the new payment method, e.g. "gift_card_0000000".
        """
        order = db.order(order_id)
        if order["status"] != "pending":
            raise ToolError(f"order {order_id} is {order['status']!r}; only pending orders can be modified")
        pm = db.order_payment_method(order, payment_method_id)
        payments = order["payment_history"]
        if len(payments) != 1 or payments[0]["transaction_type"] != "payment":
            raise ToolError("the order must have exactly one payment to change its payment method")
        old = payments[0]
        if old["payment_method_id"] == payment_method_id:
            raise ToolError("the new payment method must differ from the current one")
        amount = old["amount"]
        db._gift_card_check(pm, amount)
        old_pm = db.order_payment_method(order, old["payment_method_id"])
        payments.append({"transaction_type": "payment", "amount": amount, "payment_method_id": payment_method_id})
        payments.append({"transaction_type": "refund", "amount": amount, "payment_method_id": old["payment_method_id"]})
        if pm["source"] == "gift_card":
            pm["balance"] = _r2(pm["balance"] - amount)
        if old_pm["source"] == "gift_card":
            old_pm["balance"] = _r2(old_pm["balance"] + amount)
        return order

    def modify_pending_order_items(
        order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> dict[str, Any]:
        """Change items of a pending order to other options of the same product (callable once per
        order; the status becomes 'pending (item modified)'). The price difference is paid or refunded
        with the given payment method.

        Args:
            order_id: the order id, e.g. "#W0000000".
            item_ids: the item ids to change, e.g. ["1008292230"].
            new_item_ids: the new item ids, in the same order, e.g. ["1008292231"].
            payment_method_id: pays or receives the price difference, e.g. "gift_card_0000000".
        """
        order = db.order(order_id)
        if order["status"] != "pending":
            raise ToolError(f"order {order_id} is {order['status']!r}; only pending orders can be modified")
        diff = db._check_items(order, item_ids, new_item_ids, rounded=False)
        pm = db.order_payment_method(order, payment_method_id)
        db._gift_card_check(pm, diff)
        order["payment_history"].append(
            {
                "transaction_type": "payment" if diff > 0 else "refund",
                "amount": abs(diff),
                "payment_method_id": payment_method_id,
            }
        )
        if pm["source"] == "gift_card":
            pm["balance"] = _r2(pm["balance"] - diff)
        for old_id, new_id in zip(item_ids, new_item_ids, strict=True):
            item = next(it for it in order["items"] if it["item_id"] == old_id)
            variant = db.product(item["product_id"])["variants"][new_id]
            item["item_id"], item["price"], item["options"] = new_id, variant["price"], variant["options"]
        order["status"] = "pending (item modified)"
        return order

    def return_delivered_order_items(order_id: str, item_ids: list[str], payment_method_id: str) -> dict[str, Any]:
        """Request a return of items of a delivered order (status becomes 'return requested').

        Args:
            order_id: the order id, e.g. "#W0000000".
            item_ids: the item ids to return, e.g. ["1008292230"].
            payment_method_id: receives the refund: the original payment method or a gift card.
        """
        order = db.order(order_id)
        if order["status"] != "delivered":
            raise ToolError(f"order {order_id} is {order['status']!r}; only delivered orders can be returned")
        pm = db.order_payment_method(order, payment_method_id)
        original = order["payment_history"][0]["payment_method_id"]
        if payment_method_id != original and pm["source"] != "gift_card":
            raise ToolError("the refund must go to the original payment method or a gift card")
        db._check_items(order, item_ids, None)
        order["status"] = "return requested"
        order["return_items"] = sorted(item_ids)
        order["return_payment_method_id"] = payment_method_id
        return order

    def exchange_delivered_order_items(
        order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> dict[str, Any]:
        """Exchange items of a delivered order for other options of the same product (callable once
        per order; status becomes 'exchange requested').

        Args:
            order_id: the order id, e.g. "#W0000000".
            item_ids: the item ids to exchange, e.g. ["1008292230"].
            new_item_ids: the new item ids, in the same order, e.g. ["1008292231"].
            payment_method_id: pays or receives the price difference, e.g. "gift_card_0000000".
        """
        order = db.order(order_id)
        if order["status"] != "delivered":
            raise ToolError(f"order {order_id} is {order['status']!r}; only delivered orders can be exchanged")
        diff = db._check_items(order, item_ids, new_item_ids)
        pm = db.order_payment_method(order, payment_method_id)
        db._gift_card_check(pm, diff)
        order["status"] = "exchange requested"
        order["exchange_items"] = sorted(item_ids)
        order["exchange_new_items"] = sorted(new_item_ids)
        order["exchange_payment_method_id"] = payment_method_id
        order["exchange_price_difference"] = diff
        return order

    @_takes_address
    def modify_user_address(
        user_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
    ) -> dict[str, Any]:
        """Change a user's default address.

        Args:
            user_id: the user id, e.g. "sara_doe_496".
        """
        user = db.user(user_id)
        user["address"] = _address(address1, address2, city, state, country, zip)
        return user

    return domain_tools(
        (
            cancel_pending_order,
            exchange_delivered_order_items,
            find_user_id_by_email,
            find_user_id_by_name_zip,
            get_item_details,
            get_order_details,
            get_product_details,
            get_user_details,
            list_all_product_types,
            modify_pending_order_address,
            modify_pending_order_items,
            modify_pending_order_payment,
            modify_user_address,
            return_delivered_order_items,
        )
    )
