"""Reconcile one day with a running paymentcore server: payouts, the balance, and the webhooks you missed.

What a merchant's back office runs every morning (docs/reconciliation.md walks through it):

1. the day's payouts: ``GET /v1/disburse`` pages newest first, so it reads until the first payout older
   than the day and stops;
2. match them to your own records, a JSON file ``{"<merchantReference>": <amount>, ...}``: each payout
   is *matched*, has a *different amount*, or is *not in your records*; a record the service does not
   have is *missing*;
3. the ledger: ``GET /v1/account/ledger?currency=XAF`` from the newest movement to the oldest, replayed
   from the oldest on, must end at the balance ``GET /v1/account/balances`` shows;
4. the webhook events that never arrived: ``GET /v1/events?deliveryStatus=FAILED``, and with
   ``--resend`` one more delivery of each (``POST /v1/events/{id}/resend``). Your receiver drops the
   ones it already has by ``eventId`` (the same on every delivery, also in ``X-Service-Event-Id``).

Any key of the merchant reads the ledger and the events; the payouts need a key with Disburse::

    python examples/reconcile.py --base-url http://127.0.0.1:8000 --key pck_... \\
        --records my-payouts.json --day 2026-11-24 --resend

Amounts are read with ``paymentcore.wire.loads`` (exact ``Decimal``, never a float). The exit status is
0 when the ledger replay equals the balance, 1 when it does not.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx

from paymentcore import wire

PAGE = 100  # the largest page the API serves
MAX_RATE_LIMIT_WAITS = 5


class ApiError(Exception):
    """An error answer of the API: ``code`` is stable, ``message`` is for people."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(f"HTTP {status} {body.get('code')}: {body.get('message')} ({body.get('requestId')})")
        self.status = status
        self.code = body.get("code")


class Api:
    def __init__(self, base_url: str, key: str) -> None:
        self._http = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30)

    def close(self) -> None:
        self._http.close()

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        for _ in range(MAX_RATE_LIMIT_WAITS):
            response = self._http.request(method, path, **kwargs)
            if response.status_code == 429:  # over the key's rate limit: wait as told, then retry
                time.sleep(int(response.headers.get("Retry-After", "1")))
                continue
            body = wire.loads(response.content)
            if response.status_code >= 400:
                raise ApiError(response.status_code, body)
            return body
        raise ApiError(429, {"code": "RATE_LIMITED", "message": "still rate limited"})

    def every(self, path: str, **params: Any) -> Iterator[dict[str, Any]]:
        """Every item of a list, newest first, page after page (``startingAfter`` = the last item's id
        for ledger items and events, its reference for payouts and collections)."""
        after: str | None = None
        while True:
            query = {**params, "limit": PAGE, **({"startingAfter": after} if after else {})}
            page = self.call("GET", path, params=query)
            yield from page["data"]
            if not page["hasMore"]:
                return
            last = page["data"][-1]
            after = last["id"] if "id" in last else last["reference"]


# --- 1 and 2: the day's payouts against your records -------------------------------------------------


def payouts_of(api: Api, day: date) -> list[dict[str, Any]]:
    found = []
    for payout in api.every("/v1/disburse"):
        created = datetime.fromisoformat(payout["createdAt"].replace("Z", "+00:00")).date()
        if created > day:
            continue  # newer than the day
        if created < day:
            break  # newest first: everything after this is older still
        found.append(payout)
    return found


def match(payouts: list[dict[str, Any]], records: dict[str, Decimal]) -> None:
    seen: set[str] = set()
    for payout in payouts:
        ours = payout["merchantReference"]
        amount = Decimal(payout["amount"])
        line = f"{payout['reference']} {amount} {payout['currency']} {payout['status']}"
        if ours is None or ours not in records:
            print(f"not in your records: {line} (merchantReference {ours})")
            continue
        seen.add(ours)
        if records[ours] != amount:
            print(f"amount differs for {ours}: yours {records[ours]}, the service's {line}")
        else:
            print(f"matched {ours}: {line}")
    for missing in sorted(set(records) - seen):
        print(f"missing from the service: {missing} ({records[missing]})")


# --- 3: the ledger replayed ------------------------------------------------------------------------


def replay_ledger(api: Api, currency: str) -> bool:
    items = list(api.every("/v1/account/ledger", currency=currency))
    available = reserved = Decimal(0)
    for item in reversed(items):  # from the oldest on
        amount = Decimal(item["amount"])
        if item["type"] == "PAYOUT_PAID":  # the money left the reserved balance
            reserved += amount
        elif item["type"] == "COLLECTION_SETTLED":
            available += amount
        else:  # PAYOUT_RESERVED, PAYOUT_RELEASED: between available and reserved
            available += amount
            reserved -= amount
        if (available, reserved) != (Decimal(item["available"]), Decimal(item["reserved"])):
            print(f"ledger {currency}: the replay disagrees at {item['id']}")
            return False
    balances = api.call("GET", "/v1/account/balances")["balances"]
    balance = next((b for b in balances if b["currency"] == currency), None)
    shown = (Decimal(0), Decimal(0)) if balance is None else (balance["available"], balance["reserved"])
    agrees = (available, reserved) == (Decimal(shown[0]), Decimal(shown[1]))
    verdict = "equals" if agrees else "DIFFERS FROM"
    print(
        f"ledger {currency}: {len(items)} movements; replayed available={available} reserved={reserved} "
        f"{verdict} the balance"
    )
    return agrees


# --- 4: failed events ------------------------------------------------------------------------------


def failed_events(api: Api, *, resend: bool, day: date) -> None:
    failed = list(api.every("/v1/events", deliveryStatus="FAILED"))
    print(f"failed events: {len(failed)}")
    for event in failed:
        print(
            f"failed {event['id']} {event['type']} {event['reference']} after {event['attempts']} attempt(s)"
        )
        if resend:
            # the key makes a retried resend (a timeout, a crash of this script) resend only once a day
            headers = {"Idempotency-Key": f"resend-{event['id']}-{day.isoformat()}"}
            again = api.call("POST", f"/v1/events/{event['id']}/resend", headers=headers)
            print(f"resent {again['id']} {again['type']} {again['reference']}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--key", required=True, help="an API key of the merchant with the Disburse scope")
    parser.add_argument("--records", type=Path, help='your payouts: {"<merchantReference>": <amount>}')
    parser.add_argument("--day", default=None, help="YYYY-MM-DD, or 'today'; default yesterday (UTC)")
    parser.add_argument("--currency", default="XAF")
    parser.add_argument("--resend", action="store_true", help="resend every failed event")
    args = parser.parse_args(argv)
    today = datetime.now(UTC).date()
    day = (
        today if args.day == "today" else (date.fromisoformat(args.day) if args.day else today - timedelta(1))
    )
    records: dict[str, Decimal] = {}
    if args.records is not None:
        loaded = json.loads(args.records.read_text("utf-8"), parse_float=Decimal, parse_int=Decimal)
        records = {str(reference): Decimal(amount) for reference, amount in loaded.items()}

    api = Api(args.base_url, args.key)
    try:
        payouts = payouts_of(api, day)
        statuses: dict[str, int] = {}
        for payout in payouts:
            statuses[payout["status"]] = statuses.get(payout["status"], 0) + 1
        counts = ", ".join(f"{status} {n}" for status, n in sorted(statuses.items()))
        print(f"payouts on {day.isoformat()}: {len(payouts)}" + (f" ({counts})" if counts else ""))
        match(payouts, records)
        balanced = replay_ledger(api, args.currency)
        failed_events(api, resend=args.resend, day=day)
    except ApiError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    finally:
        api.close()
    return 0 if balanced else 1


if __name__ == "__main__":
    sys.exit(main())
