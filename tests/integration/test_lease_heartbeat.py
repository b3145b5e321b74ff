"""Claims on work are short and renewed while the work goes on (a heartbeat).

- After ``kill -9`` of a server whose payouts were claimed (their network calls hanging), a restarted
  server moves every accepted payout on within 10 s: the dead process's claims lapse in seconds.
- While a worker is still on a call, its claim is renewed, so another worker (another process) never
  makes the same network call at the same time, however long the call takes.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_partitioned_work import Server, auth, library, make_shop  # type: ignore[import-not-found, unused-ignore]

from paymentcore import Config, PaymentCore, PayoutStatus, SandboxNetwork, wire
from paymentcore.ports import PayoutRequest, PayoutResult
from paymentcore.testing import fund

from conftest import HTTP_ENGINES, postgres_url  # type: ignore[import-not-found, unused-ignore]

pytestmark = pytest.mark.slow

MOVES_ON_WITHIN = 10.0


@pytest.mark.parametrize("engine", HTTP_ENGINES)
def test_after_kill_9_every_accepted_payout_moves_on_within_ten_seconds(engine: str, tmp_path: Path) -> None:
    db = postgres_url(tmp_path) if engine == "postgres" else str(tmp_path / "crash.db")
    core = library(db)
    try:
        shop = make_shop(core, "Crashing")
        fund(core, shop.merchant_id, "XAF", 1_000_000)
    finally:
        core.close()
    first_life = tmp_path / "first"
    first_life.mkdir()
    # every MTN call hangs: the payouts are claimed, their calls under way, when the process dies
    first = Server(db, first_life, "--sandbox-hang", "mtn_cm", "--sandbox-hang-seconds", "600")
    references = []
    try:
        with httpx.Client(base_url=first.base, timeout=10) as http:
            for n in range(8):
                answer = http.post(
                    "/v1/disburse",
                    content=wire.dumps({"amount": 1000, "currency": "XAF", "phone": f"6770003{n:02d}"}),
                    headers=auth(shop.disburse_key, f"crash-{n}"),
                )
                assert answer.status_code == 201, answer.text
                references.append(answer.json()["reference"])
        time.sleep(1.0)  # the worker has claimed them and is waiting on the network
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(timeout=10)
    finally:
        first.stop()

    second_life = tmp_path / "second"
    second_life.mkdir()
    second = Server(db, second_life)
    try:
        restarted = time.monotonic()
        with httpx.Client(base_url=second.base, timeout=10) as http:
            waiting = set(references)
            while waiting and time.monotonic() - restarted < MOVES_ON_WITHIN:
                for reference in sorted(waiting):
                    record = http.get(f"/v1/disburse/{reference}", headers=auth(shop.disburse_key)).json()
                    if record["status"] == "PAID":
                        waiting.discard(reference)
                time.sleep(0.1)
            assert not waiting, f"still not paid {MOVES_ON_WITHIN} s after the restart: {sorted(waiting)}"
    finally:
        second.stop()


class CountingHang:
    """The sandbox, except that handing a payout over takes ``seconds``; counts calls under way per
    reference, and the most ever under way at once for one reference."""

    def __init__(self, seconds: float) -> None:
        self.inner = SandboxNetwork(delay_seconds=0)
        self.seconds = seconds
        self.lock = threading.Lock()
        self.under_way: Counter[str] = Counter()
        self.most_at_once: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()

    def send_payout(self, request: PayoutRequest) -> PayoutResult:
        with self.lock:
            self.calls[request.reference] += 1
            self.under_way[request.reference] += 1
            self.most_at_once[request.reference] = max(
                self.most_at_once[request.reference], self.under_way[request.reference]
            )
        try:
            time.sleep(self.seconds)
            return self.inner.send_payout(request)
        finally:
            with self.lock:
                self.under_way[request.reference] -= 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_call_longer_than_the_lease_is_never_made_twice_at_once(tmp_path: Path) -> None:
    db = tmp_path / "two-workers.db"
    network = CountingHang(seconds=4.0)  # four leases long
    config = Config(sandbox_delay=0, dispatch_lease_seconds=1)
    cores = [PaymentCore.sqlite(db, config=config, network=network) for _ in range(2)]
    try:
        shop = cores[0].operator.create_merchant("Shop", settlement_currency="XAF")
        fund(cores[0], shop.id, "XAF", 1_000_000)
        payouts = [
            cores[0].disburse.create(
                shop.id,
                amount=Decimal(1000),
                currency="XAF",
                phone=f"6770004{n:02d}",
                idempotency_key=f"k{n}",
            )
            for n in range(4)
        ]
        for core in cores:  # two workers, as two processes on one database would run
            core.start_worker(interval=0.05)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if all(cores[0].disburse.get(shop.id, p.reference).status is PayoutStatus.PAID for p in payouts):
                break
            time.sleep(0.1)
        assert all(cores[0].disburse.get(shop.id, p.reference).status is PayoutStatus.PAID for p in payouts)
        assert set(network.calls) == {p.reference for p in payouts}
        assert max(network.most_at_once.values()) == 1, network.most_at_once
        assert max(network.calls.values()) == 1, network.calls  # the claim held: no second call at all
    finally:
        for core in cores:
            core.close()


def test_a_lease_is_renewed_without_a_worker_and_a_failed_claim_does_not_drop_it(tmp_path: Path) -> None:
    """An inline run (tick, an operator's release) renews its lease too, and another caller that could
    not claim the item leaves the renewal alone; a worker in another process never calls twice."""
    db = tmp_path / "inline.db"
    network = CountingHang(seconds=4.0)
    config = Config(sandbox_delay=0, dispatch_lease_seconds=1)
    here = PaymentCore.sqlite(db, config=config, network=network)
    elsewhere = PaymentCore.sqlite(db, config=config, network=network)
    try:
        shop = here.operator.create_merchant("Shop", settlement_currency="XAF")
        fund(here, shop.id, "XAF", 10_000)
        payout = here.disburse.create(
            shop.id, amount=Decimal(1000), currency="XAF", phone="677000500", idempotency_key="inline"
        )
        first = threading.Thread(target=here.disburse.advance, args=(payout.reference,))
        first.start()  # claims it and waits on the network, with no worker running here
        time.sleep(0.3)
        here.disburse.advance(payout.reference)  # cannot claim it: must not end the first one's renewal
        elsewhere.start_worker(interval=0.05)  # another process's worker, ready to take a lapsed lease
        first.join(timeout=30)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if here.disburse.get(shop.id, payout.reference).status is PayoutStatus.PAID:
                break
            time.sleep(0.1)
        assert here.disburse.get(shop.id, payout.reference).status is PayoutStatus.PAID
        assert network.calls[payout.reference] == 1, network.calls
    finally:
        elsewhere.close()
        here.close()
