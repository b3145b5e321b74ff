"""Pay many people in one request: a marketplace's settlement run and a payroll, over HTTP.

Against a running server (``paymentcore serve --demo`` prints the two keys)::

    python examples/bulk_payouts.py --base-url http://127.0.0.1:8000 \\
        --collect-key pck_... --disburse-key pck_...

1. funds the balance with two charges (the sandbox settles them), when it holds less than the run
   needs;
2. settles five sellers in one ``POST /v1/disburse/bulk`` with mode ``each``: each item is a payout or a
   refusal of its own (one seller's number is not a mobile number, one amount has a decimal XAF does
   not have), and the others are paid;
3. sends a payroll with mode ``all``: one employee's amount is over the balance, so the whole payroll is
   refused (422 ``BATCH_REFUSED``, every refused item listed) and nothing is reserved; corrected, the
   same request is sent again with the same ``Idempotency-Key`` (nothing was kept under it) and taken;
4. follows both batches with ``GET /v1/disburse/bulk/{id}`` until ``COMPLETED``, printing their progress,
   and lists the payroll's payouts with ``GET /v1/disburse?batch=...``;
5. finds the ``disburse.bulk.completed`` event of each batch among the merchant's events (a webhook
   endpoint, if one is registered, receives it signed, after the payouts' own events).

Amounts are built from ``int`` and ``Decimal`` and written with ``paymentcore.wire.dumps``; answers are
read with ``paymentcore.wire.loads`` (exact decimals, never a float). Exits 0 when both batches
completed as described, 1 otherwise.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import time
from decimal import Decimal
from typing import Any

import httpx

from paymentcore import wire

MAX_RATE_LIMIT_WAITS = 10


class Api:
    """A merchant's client: one key, JSON both ways with exact numbers, waits out a 429."""

    def __init__(self, base_url: str, key: str) -> None:
        self._http = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30)

    def close(self) -> None:
        self._http.close()

    def call(self, method: str, path: str, body: Any = None, *, key: str | None = None, **params: Any) -> Any:
        """``(status, body)``; an error answer is returned too, for the caller to branch on its code."""
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Idempotency-Key"] = key
        content = None if body is None else wire.dumps(body)
        for _ in range(MAX_RATE_LIMIT_WAITS):
            response = self._http.request(method, path, content=content, headers=headers, params=params)
            if response.status_code == 429:  # over the key's rate limit: wait as told, then again
                time.sleep(int(response.headers.get("Retry-After", "1")))
                continue
            return response.status_code, wire.loads(response.content)
        raise SystemExit(f"{method} {path}: still rate limited")


def fund(collect: Api, disburse: Api, needed: Decimal) -> None:
    """Charge two sandbox numbers until the available XAF balance holds ``needed``."""
    _, balances = disburse.call("GET", "/v1/account/balances")
    available = sum((b["available"] for b in balances["balances"] if b["currency"] == "XAF"), Decimal(0))
    if available >= needed:
        return
    references = []
    for _ in range(2):
        phone = f"67{secrets.randbelow(10**7):07d}"
        if phone[-2:] in ("11", "12", "13"):  # the sandbox declines these
            phone = phone[:-2] + "50"
        charge = {"amount": 30_000, "currency": "XAF", "country": "CM", "provider": "mtn_cm", "phone": phone}
        status, answer = collect.call(
            "POST", "/v1/collect/charge", charge, key=f"fund-{secrets.token_hex(6)}"
        )
        if status != 202:
            raise SystemExit(f"charge refused: {answer}")
        references.append(answer["reference"])
    for reference in references:
        while True:
            _, record = collect.call("GET", f"/v1/collect/{reference}")
            if record["status"] in ("SUCCESS", "FAILED"):
                print(f"funding charge {reference}: {record['status']} {record['amount']} XAF")
                break
            time.sleep(0.5)


def show_items(batch: dict[str, Any]) -> None:
    for item in batch["items"]:
        if item["payout"] is not None:
            payout = item["payout"]
            held = " (held for review)" if payout["awaitingReview"] else ""
            where = f"{payout['reference']} {payout['status']}{held}"
            print(f"  {item['index']} {item['merchantReference']}: {where}")
        else:
            error = item["error"]
            print(
                f"  {item['index']} {item['merchantReference']}: refused {error['code']} ({error['message']})"
            )


def progress(batch: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for row in batch["progress"]:
        counts[row["status"]] = counts.get(row["status"], 0) + row["count"]
    return ", ".join(f"{status} {count}" for status, count in counts.items() if count) or "no payout"


def follow(disburse: Api, batch_id: str, timeout: float = 60) -> dict[str, Any]:
    """The batch once COMPLETED (every accepted item PAID, FAILED or REJECTED), printing its progress."""
    deadline = time.monotonic() + timeout
    shown = ""
    while True:
        _, answer = disburse.call("GET", f"/v1/disburse/bulk/{batch_id}", limit=100)
        batch: dict[str, Any] = answer
        now = progress(batch)
        if now != shown:
            print(f"  {batch_id}: {batch['status']}: {now}")
            shown = now
        if batch["status"] == "COMPLETED" or time.monotonic() > deadline:
            return batch
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--collect-key", required=True, help="funds the balance with charges")
    parser.add_argument("--disburse-key", required=True, help="sends and reads the payouts")
    args = parser.parse_args(argv)
    collect, disburse = Api(args.base_url, args.collect_key), Api(args.base_url, args.disburse_key)
    run = secrets.token_hex(4)  # this run's own merchant references and idempotency keys
    try:
        fund(collect, disburse, Decimal(40_000))

        # 2. a settlement run: each seller on their own
        sellers = [
            {"amount": 2500, "currency": "XAF", "phone": "690000002", "recipientName": "Awa N."},
            {"amount": Decimal("1500"), "currency": "XAF", "phone": "670000001"},
            {"amount": 4000, "currency": "XAF", "phone": "600000000"},  # not a mobile number here
            {"amount": Decimal("999.5"), "currency": "XAF", "phone": "650000009"},  # XAF has no decimals
            {"amount": 3000, "currency": "XAF", "phone": "670000021"},  # the sandbox network refuses it
        ]
        items = [{**seller, "merchantReference": f"seller-{run}-{n}"} for n, seller in enumerate(sellers)]
        status, settlement = disburse.call(
            "POST", "/v1/disburse/bulk", {"mode": "each", "items": items}, key=f"settle-{run}"
        )
        if status != 201:
            raise SystemExit(f"settlement refused: {settlement}")
        print(
            f"settlement {settlement['id']}: {settlement['acceptedCount']} accepted, "
            f"{settlement['refusedCount']} refused"
        )
        show_items(settlement)

        # 3. a payroll: all or none
        staff = [Decimal(8000), Decimal(9000), Decimal(10**6)]  # the last one is far over the balance
        payroll_items = [
            {"amount": pay, "currency": "XAF", "phone": f"69000010{n}", "merchantReference": f"pay-{run}-{n}"}
            for n, pay in enumerate(staff)
        ]
        payroll_key = f"payroll-{run}"
        status, refusal = disburse.call(
            "POST", "/v1/disburse/bulk", {"mode": "all", "items": payroll_items}, key=payroll_key
        )
        print(f"payroll: {status} {refusal['code']}: {refusal['message']}")
        for item in refusal.get("details", {}).get("items", []):
            print(f"  refused {item['index']} {item['merchantReference']}: {item['error']['code']}")
        payroll_items[2]["amount"] = Decimal(7000)  # corrected
        status, payroll = disburse.call(
            "POST", "/v1/disburse/bulk", {"mode": "all", "items": payroll_items}, key=payroll_key
        )
        if status != 201:
            raise SystemExit(f"payroll refused again: {payroll}")
        print(f"payroll {payroll['id']}: {payroll['acceptedCount']} accepted, total {payroll['totals']}")

        # 4. follow both to the end
        done = [follow(disburse, settlement["id"]), follow(disburse, payroll["id"])]
        _, listed = disburse.call("GET", "/v1/disburse", batch=payroll["id"], limit=100)
        print(f"payroll payouts: {sorted(p['status'] for p in listed['data'])}")

        # 5. the completion events
        _, events = disburse.call("GET", "/v1/events", limit=100)
        completed = {e["reference"]: e for e in events["data"] if e["type"] == "disburse.bulk.completed"}
        for batch in done:
            event = completed.get(batch["id"])
            where = f"{event['id']} ({event['deliveryStatus']})" if event else "not written"
            print(f"{batch['id']}: {batch['status']}, {progress(batch)}; disburse.bulk.completed {where}")
        ok = (
            all(b["status"] == "COMPLETED" and b["id"] in completed for b in done)
            and refusal.get("code") == "BATCH_REFUSED"
        )
        return 0 if ok else 1
    finally:
        collect.close()
        disburse.close()


if __name__ == "__main__":
    sys.exit(main())
