"""The worker works in batches: many items claimed in one write transaction, many outcomes recorded in
one, and one item that cannot be recorded holds back no other (issue 27, item 3).

On every store. The transactions are counted where the services open them (the store's
``transaction``, and ``transaction_for`` on a store partitioned by merchant).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from paymentcore import FakeClock, PaymentCore
from paymentcore._domain.event_types import EventType
from paymentcore._domain.models import PayoutStatus
from paymentcore._services.ledger import check_invariant
from paymentcore.ports import NetworkError, NetworkOutcome, PayoutResult
from paymentcore.testing import fund

from conftest import STORE_KINDS, make_core  # type: ignore[import-not-found, unused-ignore]

PAYOUTS = 30
AMOUNT = 100


class Transactions:
    """Counts the write transactions opened on a core's store."""

    def __init__(self, core: PaymentCore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self._lock = threading.Lock()
        store = core.store
        for name in ("transaction", "transaction_for", "transaction_for_many", "transaction_for_claims"):
            opener = getattr(store, name, None)
            if opener is not None:
                monkeypatch.setattr(store, name, self._counting(opener))

    def _counting(self, opener: Callable[..., AbstractContextManager[Any]]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> AbstractContextManager[Any]:
            with self._lock:
                self.count += 1
            return opener(*args, **kwargs)

        return counted

    def since(self, before: int) -> int:
        with self._lock:
            return self.count - before


@pytest.fixture(params=STORE_KINDS)
def core(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PaymentCore]:
    made = make_core(request.param, tmp_path, FakeClock(1_767_225_600_000))
    try:
        yield made
    finally:
        made.close()


def _payouts(core: PaymentCore, count: int) -> tuple[str, list[str]]:
    merchant = core.operator.create_merchant("Batch", settlement_currency="XAF")
    fund(core, merchant.id, "XAF", 10_000_000)
    references = [
        core.disburse.create(
            merchant.id, amount=AMOUNT, currency="XAF", phone="670000000", idempotency_key=f"k{n}"
        ).reference
        for n in range(count)
    ]
    return merchant.id, references


def _in_flight(core: PaymentCore) -> int:
    [payouts] = [item for item in core.work_backlog() if item.kind == "payouts"]
    return payouts.in_flight


def _check_money(core: PaymentCore, merchant_id: str, paid: int) -> None:
    with core.store.read() as tx:
        balance = check_invariant(tx, merchant_id, "XAF")  # raises when the ledger disagrees
    assert balance.paid_out == paid * AMOUNT
    [xaf] = core.operator.balances(merchant_id)
    assert xaf.reserved == Decimal(0)


def test_a_batch_is_claimed_in_one_transaction_and_its_outcomes_recorded_in_one(
    core: PaymentCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    merchant_id, references = _payouts(core, PAYOUTS)
    runner = core.disburse.runner
    counted = Transactions(core, monkeypatch)

    due = runner.due(100)
    assert {item.key for item in due} == set(references)
    before = counted.count
    claimed = runner.claim_many(due)
    assert counted.since(before) == 1
    assert len(claimed) == PAYOUTS
    assert runner.claim_many(due) == []  # claimed items are no longer anyone's to take
    assert _in_flight(core) == PAYOUTS  # each claim holds its lease, written with the batch

    # each hand-over with the status asked at once (the sandbox answers at once): one write for both
    sent = [(one, outcome) for one in claimed if (outcome := runner.act(one)) is not None]
    before = counted.count
    assert runner.record_many(sent) == []  # nothing left to ask: no next step claimed
    assert counted.since(before) == 1
    assert _in_flight(core) == 0  # every lease dropped
    assert {core.disburse.get(merchant_id, ref).status for ref in references} == {PayoutStatus.PAID}
    _check_money(core, merchant_id, PAYOUTS)


def test_an_outcome_that_cannot_be_written_holds_back_no_other(
    core: PaymentCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    merchant_id, references = _payouts(core, 10)
    bad = references[4]
    runner = core.disburse.runner
    record = core.disburse.record

    def failing(tx: Any, claim: Any, outcome: Any, now: int) -> bool:
        if claim.reference == bad:
            raise RuntimeError("injected: this outcome cannot be written")
        return record(tx, claim, outcome, now)

    monkeypatch.setattr(core.disburse, "record", failing)
    claimed = runner.claim_many(runner.due(100))
    sent = [(one, outcome) for one in claimed if (outcome := runner.act(one)) is not None]
    assert runner.record_many(sent) == []  # the batch fails, then is written item by item
    statuses = {ref: core.disburse.get(merchant_id, ref).status for ref in references}
    assert statuses[bad] is PayoutStatus.PENDING  # its hand-over is not written: it stays due
    assert {statuses[ref] for ref in references if ref != bad} == {PayoutStatus.PAID}

    with pytest.raises(RuntimeError):  # a tick's caller sees the error; nothing is swallowed
        runner.record_many([done for done in sent if done[0].item.key == bad], isolate=False)
    monkeypatch.setattr(core.disburse, "record", record)
    clock = core.clock
    assert isinstance(clock, FakeClock)
    clock.advance(core.config.dispatch_lease_seconds + 1)  # the bad item's claim runs out
    core.run_until_idle()
    assert {core.disburse.get(merchant_id, ref).status for ref in references} == {PayoutStatus.PAID}
    _check_money(core, merchant_id, 10)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_the_running_worker_uses_fewer_transactions_than_payouts(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one at a time, a payout costs two write transactions in the background (its claim, then its
    # hand-over written with the status the network gave at once); batched, many payouts share each
    core = make_core(kind, tmp_path, FakeClock(1_767_225_600_000))
    try:
        merchant_id, references = _payouts(core, 120)
        counted = Transactions(core, monkeypatch)
        core.start_worker(interval=0.05)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with core.store.read() as tx:
                found = [tx.payouts.get(ref) for ref in references]
                if all(one is not None and one.status is PayoutStatus.PAID for one in found):
                    break
            time.sleep(0.05)
        core.stop_worker()
        assert {core.disburse.get(merchant_id, ref).status for ref in references} == {PayoutStatus.PAID}
        # one at a time it is 2 x 120; how far below depends on the machine's timing (the first round
        # alone claims a lane's 16 items in one transaction), so the bound is loose
        assert counted.count < 2 * len(references), counted.count
        _check_money(core, merchant_id, 120)
    finally:
        core.close()


def test_a_batch_of_several_merchants_items_is_one_transaction(
    core: PaymentCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # on PostgreSQL the unit takes those merchants' partitions together (transaction_for_many)
    made = [_payouts(core, 4) for _ in range(3)]
    runner = core.disburse.runner
    counted = Transactions(core, monkeypatch)
    due = runner.due(100)
    assert len({item.merchant for item in due}) == 3
    claimed = runner.claim_many(due)
    assert counted.count == 1 and len(claimed) == 12
    sent = [(one, outcome) for one in claimed if (outcome := runner.act(one)) is not None]
    assert runner.record_many(sent) == []
    assert counted.count == 2
    for merchant_id, references in made:
        assert {core.disburse.get(merchant_id, ref).status for ref in references} == {PayoutStatus.PAID}
        _check_money(core, merchant_id, 4)


class _Asked:
    """The sandbox, with each status check counted and, while ``down``, refused as unreachable."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.checks = 0
        self.down = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def payout_status(self, request: Any, now: int) -> Any:
        self.checks += 1
        if self.down:
            raise NetworkError("injected: the status check did not answer")
        return self.inner.payout_status(request, now)


class _FailsAtOnce:
    """The sandbox, whose status check right after a hand-over says the payout did not complete."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def payout_status(self, request: Any, now: int) -> PayoutResult:
        return PayoutResult(NetworkOutcome.FAILED, reason="injected: the wallet refused it")


@pytest.mark.parametrize(
    ("answer", "final", "event_type"),
    [
        ("paid", PayoutStatus.PAID, EventType.DISBURSE_SUCCEEDED),
        ("failed", PayoutStatus.FAILED, EventType.DISBURSE_FAILED),
    ],
)
def test_a_payout_completed_at_once_is_written_once_after_its_claim(
    core: PaymentCore,
    monkeypatch: pytest.MonkeyPatch,
    answer: str,
    final: PayoutStatus,
    event_type: EventType,
) -> None:
    """The network takes the payout and says at once that it is paid (or that it failed): the row is
    written once for both answers (SENT, then the outcome, only in memory between them), and nothing of
    the hand-over is lost: the record keeps when it was sent and the network's reference, the SENT event
    says SENT, the outcome's its status, and the money moved once (paid out, or still reserved until the
    failed payout is resolved)."""
    from paymentcore.adapters import memory, sql

    if answer == "failed":
        monkeypatch.setattr(core.deps, "network", _FailsAtOnce(core.deps.network))

    writes: list[PayoutStatus] = []
    for module in (memory, sql):
        update = module._Payouts.update

        def counted(self: Any, payout: Any, _update: Any = update) -> None:
            writes.append(payout.status)
            _update(self, payout)

        monkeypatch.setattr(module._Payouts, "update", counted)
    merchant_id, [reference] = _payouts(core, 1)
    runner = core.disburse.runner
    [one] = runner.claim_many(runner.due(10))
    outcome = runner.act(one)
    assert outcome is not None
    writes.clear()
    assert runner.record_many([(one, outcome)]) == []
    assert writes == [final]

    with core.store.read() as tx:
        stored = tx.payouts.get(reference)
        events = [event for event in tx.outbox.list(merchant_id) if event.data["reference"] == reference]
        balance = check_invariant(tx, merchant_id, "XAF")  # raises when the ledger disagrees
    assert stored is not None and stored.status is final
    assert stored.sent_at is not None and stored.provider_reference
    assert stored.next_check_at is None
    assert [(event.type, event.data["status"]) for event in events] == [
        (EventType.DISBURSE_SENT, "SENT"),
        (event_type, final.value),
    ]
    if final is PayoutStatus.PAID:
        assert balance.paid_out == AMOUNT and balance.reserved == 0
    else:
        assert stored.status_reason == "injected: the wallet refused it"
        assert balance.paid_out == 0 and balance.reserved == AMOUNT


def test_a_hand_over_is_written_with_the_status_asked_at_once_or_asked_again_at_the_next_poll(
    core: PaymentCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The network takes the payout: its status is asked at once and both answers are written in one
    transaction, SENT then PAID, each with its event. When that check fails, the hand-over is written
    alone (SENT, the network's reference kept) and the status is asked again at the next poll, not at
    once (a status endpoint that times out is not called twice in a row)."""
    asked = _Asked(core.deps.network)
    monkeypatch.setattr(core.deps, "network", asked)
    merchant_id, [first, second] = _payouts(core, 2)
    runner = core.disburse.runner
    counted = Transactions(core, monkeypatch)

    [one] = runner.claim_many([item for item in runner.due(10) if item.key == first])
    outcome = runner.act(one)
    assert outcome is not None and asked.checks == 1
    before = counted.count
    assert runner.record_many([(one, outcome)]) == []
    assert counted.since(before) == 1
    assert core.disburse.get(merchant_id, first).status is PayoutStatus.PAID
    with core.store.read() as tx:
        events = [event for event in tx.outbox.list(merchant_id) if event.data["reference"] == first]
    assert [event.type for event in events] == [EventType.DISBURSE_SENT, EventType.DISBURSE_SUCCEEDED]

    asked.down = True
    [two] = runner.claim_many([item for item in runner.due(10) if item.key == second])
    outcome = runner.act(two)
    assert outcome is not None and asked.checks == 2  # handed over, not answered
    assert runner.record_many([(two, outcome)]) == []  # written as handed over; nothing asked at once
    sent = core.disburse.get(merchant_id, second)
    assert sent.status is PayoutStatus.SENT and sent.provider_reference
    assert _in_flight(core) == 0 and runner.due(10) == []
    asked.down = False
    clock = core.clock
    assert isinstance(clock, FakeClock)
    clock.advance(core.config.poll_interval_seconds)  # the next poll
    [again] = runner.claim_many(runner.due(10))
    answer = runner.act(again)
    assert answer is not None and asked.checks == 3
    assert runner.record_many([(again, answer)]) == []
    assert core.disburse.get(merchant_id, second).status is PayoutStatus.PAID
    assert _in_flight(core) == 0
    _check_money(core, merchant_id, 2)


def test_a_hand_over_the_network_refuses_is_not_asked_about(
    core: PaymentCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _Asked(core.deps.network)
    monkeypatch.setattr(core.deps, "network", asked)
    monkeypatch.setattr(
        asked.inner,
        "send_payout",
        lambda request: PayoutResult(NetworkOutcome.FAILED, reason="injected: refused"),
    )
    merchant_id, [reference] = _payouts(core, 1)
    runner = core.disburse.runner
    [one] = runner.claim_many(runner.due(10))
    outcome = runner.act(one)
    assert outcome is not None and asked.checks == 0
    assert runner.record_many([(one, outcome)]) == []
    assert core.disburse.get(merchant_id, reference).status is PayoutStatus.FAILED


class _CountedStatus:
    """The sandbox, with its status checks (payouts' and collections') counted."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.payout_checks = 0
        self.collection_checks = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def payout_status(self, request: Any, now: int) -> Any:
        self.payout_checks += 1
        return self.inner.payout_status(request, now)

    def collection_status(self, request: Any, now: int) -> Any:
        self.collection_checks += 1
        return self.inner.collection_status(request, now)


def _step(runner: Any) -> int:
    """One round of the worker by hand: claim what is due, act, record, and so on with the items
    claimed for a next step at once (a collection's status, right after its prompt); how many items
    it took."""
    claimed = runner.claim_many(runner.due(10))
    taken = len(claimed)
    while claimed:
        done = [(claim, runner.act(claim)) for claim in claimed]
        claimed = runner.record_many([(claim, outcome) for claim, outcome in done if outcome is not None])
    return taken


@pytest.mark.parametrize("kind", STORE_KINDS)
@pytest.mark.parametrize("delay", [2.0, 0.5])
def test_a_pending_answer_is_asked_again_when_the_network_said_it_would_know(
    kind: str, delay: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sandbox answers after its delay and, while pending, says when. With a 2 s delay and the
    1 s poll a payout costs two status checks (one right after the hand-over, one at 2 s), not three,
    and its hand-over and first PENDING answer are one write; a wait shorter than the poll (0.5 s)
    changes nothing: the next check is at the poll. A collection likewise."""
    clock = FakeClock(1_767_225_600_000)
    core = make_core(kind, tmp_path, clock, sandbox_delay=delay)
    try:
        counted = _CountedStatus(core.deps.network)
        monkeypatch.setattr(core.deps, "network", counted)
        poll = core.config.poll_interval_seconds
        assert poll == 1.0
        merchant_id, [reference] = _payouts(core, 1)
        charge = core.collect.charge(
            merchant_id, amount=500, currency="XAF", country="CM", provider="mtn_cm", phone="670000001"
        )
        started = clock.now()
        runner, collecting = core.disburse.runner, core.collect.runner
        assert _step(runner) == 1 and counted.payout_checks == 1  # handed over, asked at once: pending
        sent = core.disburse.get(merchant_id, reference)
        assert sent.status is PayoutStatus.SENT and sent.provider_reference
        assert _step(collecting) == 1  # the prompt, then its status asked at once
        assert counted.collection_checks == 1
        wait_ms = max(int(delay * 1000), 1000)
        with core.store.read() as tx:
            stored_payout, stored_charge = tx.payouts.get(reference), tx.collections.get(charge.reference)
        assert stored_payout is not None and stored_payout.next_check_at == started + wait_ms
        assert stored_charge is not None and stored_charge.next_check_at == started + wait_ms
        clock.advance(poll)
        if delay > poll:  # nothing is asked at the poll: the answer is known to come later
            assert _step(runner) == 0 and _step(collecting) == 0
            clock.advance(delay - poll)
        assert _step(runner) == 1 and _step(collecting) == 1
        assert counted.payout_checks == 2 and counted.collection_checks == 2
        assert core.disburse.get(merchant_id, reference).status is PayoutStatus.PAID
        assert core.collect.get(merchant_id, charge.reference).status.value == "SUCCESS"
        with core.store.read() as tx:
            events = tx.outbox.list(merchant_id)
        told = [event.type for event in events if event.data.get("reference") == reference]
        assert told == [EventType.DISBURSE_SENT, EventType.DISBURSE_SUCCEEDED]
        _check_money(core, merchant_id, 1)
    finally:
        core.close()


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_a_wait_named_past_the_prompts_timeout_does_not_delay_the_timeout(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sandbox answers in 10 s, the payer's prompt times out after 3: the collection is asked
    again when its prompt times out, not when the network said it would know, and fails TIMEOUT."""
    clock = FakeClock(1_767_225_600_000)
    core = make_core(kind, tmp_path, clock, sandbox_delay=10, prompt_timeout_seconds=3)
    try:
        merchant = core.operator.create_merchant("Timeout", settlement_currency="XAF")
        charge = core.collect.charge(
            merchant.id, amount=500, currency="XAF", country="CM", provider="mtn_cm", phone="670000001"
        )
        started = clock.now()
        collecting = core.collect.runner
        assert _step(collecting) == 1  # the prompt, and its status asked at once: pending, "in 10 s"
        with core.store.read() as tx:
            stored = tx.collections.get(charge.reference)
        assert stored is not None and stored.next_check_at == started + 3_000
        clock.advance(3)
        assert _step(collecting) == 1
        failed = core.collect.get(merchant.id, charge.reference)
        assert failed.status.value == "FAILED" and failed.failure_category == "TIMEOUT"
    finally:
        core.close()
