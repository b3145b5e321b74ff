"""A merchant's client for a running paymentcore server, over plain HTTP with httpx.

It does what a merchant integration does, one step after the other:

1. a direct charge: push a prompt to a phone, then poll ``GET /v1/collect/{reference}`` until final;
2. a hosted checkout: create the payment, print its ``checkoutUrl``, then act as the payer would in a
   browser (open the page, submit its form with a provider and a phone) and poll until final;
3. a payout from the balance those two collections funded, with the required ``Idempotency-Key``,
   polled until ``PAID``.

Amounts go out as exact JSON numbers: the bodies hold ``int`` and ``Decimal`` values and are written
with ``paymentcore.wire.dumps`` (a float is refused there). Responses are read back with
``paymentcore.wire.loads``, so amounts come back as ``Decimal`` too.

Start a server with a demo merchant, then run the client with the keys the server printed::

    paymentcore --db demo.db serve --demo --sandbox-delay 0
    python examples/merchant_client.py --base-url http://127.0.0.1:8000 \\
        --collect-key pck_... --disburse-key pck_...

Exit status 0 means the charge and the checkout succeeded and the payout was paid.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from collections.abc import Sequence
from decimal import Decimal
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin

import httpx

from paymentcore import wire

FINAL_COLLECTION = frozenset({"SUCCESS", "FAILED"})
FINAL_PAYOUT = frozenset({"PAID", "FAILED", "REJECTED"})
MAX_RATE_LIMIT_WAITS = 5


class ApiError(Exception):
    """An error answer of the API: branch on ``code`` (stable), show ``message`` (human text)."""

    def __init__(self, status: int, code: str, message: str, request_id: str | None) -> None:
        super().__init__(f"HTTP {status} {code}: {message} (request {request_id})")
        self.status = status
        self.code = code
        self.message = message


def sandbox_phone(prefix: str) -> str:
    """A random 9-digit Cameroon number on ``prefix`` that the sandbox lets succeed.

    Random, because the service allows only a few prompts per number in five minutes; the last two
    digits are fixed to ``50``, a tail that no sandbox failure rule uses (11-13, 21-23).
    """
    middle = "".join(random.choice("0123456789") for _ in range(9 - len(prefix) - 2))
    return f"{prefix}{middle}50"


class CheckoutForm(HTMLParser):
    """Reads the hosted page as a browser would: the form's action and the providers offered."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.providers: list[str] = []
        self._in_provider_select = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "form" and self.action is None:
            self.action = attributes.get("action")
        elif tag == "select":
            self._in_provider_select = attributes.get("name") == "provider"
        elif tag == "option" and self._in_provider_select and attributes.get("value"):
            self.providers.append(str(attributes["value"]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._in_provider_select = False


class MerchantApi:
    """The few calls this integration makes; every one goes through :meth:`request`."""

    def __init__(
        self, base_url: str, collect_key: str, disburse_key: str, *, poll_interval: float, deadline: float
    ) -> None:
        self.http = httpx.Client(base_url=base_url.rstrip("/"), timeout=15.0)
        self.collect_key = collect_key
        self.disburse_key = disburse_key
        self.poll_interval = poll_interval
        self.deadline = deadline

    def close(self) -> None:
        self.http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        key: str,
        body: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {key}", "Accept": "application/json"}
        content: bytes | None = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            content = wire.dumps(body).encode()
        if idempotency_key is not None:
            # The same key on a retry returns the original answer: safe to resend after a timeout.
            headers["Idempotency-Key"] = idempotency_key
        for _ in range(MAX_RATE_LIMIT_WAITS):
            response = self.http.request(method, path, headers=headers, content=content)
            if response.status_code == 429:  # rate limited: wait as told, then try again
                time.sleep(min(int(response.headers.get("Retry-After", "1")), 30))
                continue
            data: Any = wire.loads(response.content)
            if response.is_error:
                raise ApiError(
                    response.status_code,
                    str(data.get("code")),
                    str(data.get("message")),
                    response.headers.get("X-Request-Id"),
                )
            if not isinstance(data, dict):
                raise RuntimeError(f"{method} {path}: expected a JSON object, got {type(data).__name__}")
            return data
        raise RuntimeError(f"{method} {path}: still rate limited after {MAX_RATE_LIMIT_WAITS} waits")

    def poll(self, path: str, *, key: str, final: frozenset[str]) -> dict[str, Any]:
        """GET ``path`` until its ``status`` is one of ``final`` (or the deadline passes)."""
        give_up = time.monotonic() + self.deadline
        while True:
            record = self.request("GET", path, key=key)
            if record["status"] in final:
                return record
            if time.monotonic() > give_up:
                raise TimeoutError(f"{path} still {record['status']} after {self.deadline} s")
            time.sleep(self.poll_interval)


def direct_charge(api: MerchantApi) -> dict[str, Any]:
    body = {
        "amount": 5000,  # XAF has no decimals: a plain int is exact
        "currency": "XAF",
        "country": "CM",
        "provider": "mtn_cm",
        "phone": sandbox_phone("67"),
        "merchantReference": f"order-{uuid.uuid4().hex[:8]}",
        "description": "Two bags of rice",
    }
    accepted = api.request(
        "POST", "/v1/collect/charge", key=api.collect_key, body=body, idempotency_key=str(uuid.uuid4())
    )
    reference = accepted["reference"]
    print(f"charge {reference} accepted: {accepted['status']} {accepted['amount']} {accepted['currency']}")
    record = api.poll(f"/v1/collect/{reference}", key=api.collect_key, final=FINAL_COLLECTION)
    print(f"charge {reference} {record['status']} (settled {record['amount']} {record['currency']})")
    return record


def hosted_checkout(api: MerchantApi) -> dict[str, Any]:
    body = {
        "amount": Decimal("3000"),  # a Decimal is written as an exact JSON number too
        "currency": "XAF",
        "description": "Order of three books",
        "merchantReference": f"order-{uuid.uuid4().hex[:8]}",
        "expiresInMinutes": 30,
    }
    created = api.request(
        "POST", "/v1/collect/checkout", key=api.collect_key, body=body, idempotency_key=str(uuid.uuid4())
    )
    reference = created["reference"]
    checkout_url = created["checkoutUrl"]
    print(f"checkout {reference} created: {created['status']}")
    print(f"checkoutUrl: {checkout_url}")

    # The payer's side: a browser opens the link, which needs no API key, and submits the form.
    with httpx.Client(timeout=15.0) as browser:
        page = browser.get(checkout_url)
        page.raise_for_status()
        form = CheckoutForm()
        form.feed(page.text)
        if form.action is None or "orange_cm" not in form.providers:
            raise RuntimeError(f"the checkout page offers no usable form (providers: {form.providers})")
        submitted = browser.post(
            urljoin(checkout_url, form.action),
            data={"provider": "orange_cm", "phone": sandbox_phone("69")},
        )
        # 303 See Other back to the page, which then shows the live status.
        if submitted.status_code not in (200, 303):
            raise RuntimeError(f"the checkout form was refused: HTTP {submitted.status_code}")
    print(f"checkout {reference} form submitted with orange_cm")

    record = api.poll(f"/v1/collect/{reference}", key=api.collect_key, final=FINAL_COLLECTION)
    print(f"checkout {reference} {record['status']} via {record['providerCode']} ({record['method']})")
    return record


def payout(api: MerchantApi, amount: int) -> dict[str, Any]:
    limits = api.request("GET", "/v1/account/disburse-limits/XAF", key=api.disburse_key)
    if not limits["enabled"]:
        raise RuntimeError(f"payouts are not possible: {limits['blockedBy']}: {limits['message']}")
    balances = api.request("GET", "/v1/account/balances", key=api.disburse_key)
    for balance in balances["balances"]:
        print(f"balance {balance['currency']}: available {balance['available']}")

    body = {
        "amount": amount,
        "currency": "XAF",
        "country": "CM",
        "provider": "orange_cm",
        "phone": sandbox_phone("69"),
        "recipientName": "Supplier Ltd",
        "merchantReference": f"settlement-{uuid.uuid4().hex[:8]}",
    }
    # Keep the key with the payout you mean to make: resending after a timeout must reuse it, so the
    # money moves once. Here one key per run.
    idempotency_key = f"payout-{uuid.uuid4()}"
    created = api.request(
        "POST", "/v1/disburse", key=api.disburse_key, body=body, idempotency_key=idempotency_key
    )
    reference = created["reference"]
    print(f"payout {reference} created: {created['status']} {created['amount']} {created['currency']}")
    repeat = api.request(
        "POST", "/v1/disburse", key=api.disburse_key, body=body, idempotency_key=idempotency_key
    )
    if repeat["reference"] != reference:
        raise RuntimeError("a repeated Idempotency-Key created a second payout")
    record = api.poll(f"/v1/disburse/{reference}", key=api.disburse_key, final=FINAL_PAYOUT)
    print(f"payout {reference} {record['status']} (network reference {record['providerReference']})")
    return record


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A merchant client for a running paymentcore server.")
    parser.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000")
    parser.add_argument("--collect-key", required=True, help="an API key with the Collect scope")
    parser.add_argument("--disburse-key", required=True, help="an API key with the Disburse scope")
    parser.add_argument("--payout-amount", type=int, default=2000, help="XAF to pay out (default 2000)")
    parser.add_argument("--poll-interval", type=float, default=0.5, help="seconds between status reads")
    parser.add_argument("--deadline", type=float, default=60.0, help="seconds to wait for a final status")
    args = parser.parse_args(argv)

    api = MerchantApi(
        args.base_url,
        args.collect_key,
        args.disburse_key,
        poll_interval=args.poll_interval,
        deadline=args.deadline,
    )
    try:
        charge = direct_charge(api)
        checkout = hosted_checkout(api)
        paid = payout(api, args.payout_amount)
    except ApiError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except (httpx.HTTPError, RuntimeError, TimeoutError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        api.close()
    print(f"final statuses: charge={charge['status']} checkout={checkout['status']} payout={paid['status']}")
    ok = charge["status"] == "SUCCESS" and checkout["status"] == "SUCCESS" and paid["status"] == "PAID"
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
