"""The worker's pump: a deep backlog is listed once and worked through, not listed again per item.

Listing what is due reads (and decodes) up to ``scan`` rows; doing that for every item started made a
worker with thousands of payouts due pay out about fifty a second. These tests drive a real
:class:`paymentcore._services.work.Pump` over a runner whose work is instant and which counts its listings.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from paymentcore._services.work import Claimed, Due, Pump, Runner

DEADLINE = 10.0


class InstantBatches(Runner[str, str]):
    """No store: every item listed is claimed, and recording an outcome has no next step."""

    def claim_many(
        self, items: Sequence[Due], *, isolate: bool = True, skip_busy: bool = True
    ) -> list[Claimed[str]]:
        return [Claimed(item, item.key, 0) for item in items]

    def record_many(
        self, learnt: Sequence[tuple[Claimed[str], str]], *, max_steps: int = 3, isolate: bool = True
    ) -> list[Claimed[str]]:
        return []

    task: Any = None  # no task: act_many acts on a turn's items one after another, through act

    @contextmanager
    def holding(self, items: Sequence[Claimed[str]]) -> Iterator[None]:
        yield  # no store: no lease to renew while an item waits for its turn


class CountingRunner(InstantBatches):
    """Work items ``item-0`` ... whose lanes are given; an item's action finishes it at once."""

    def __init__(self, lanes: Sequence[str], *, slow_lane: str | None = None) -> None:
        # no store and no task: the pump only lists (due), claims, acts and records
        self.items = {f"item-{n}": lane for n, lane in enumerate(lanes)}
        self.done: list[str] = []
        self.listings = 0
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.slow_lane = slow_lane

    def due(self, limit: int) -> Sequence[Due]:
        with self.lock:
            self.listings += 1
            finished = set(self.done)
        pending = [Due(key, lane) for key, lane in self.items.items() if key not in finished]
        return pending[:limit]

    def claim_many(
        self, items: Sequence[Due], *, isolate: bool = True, skip_busy: bool = True
    ) -> list[Claimed[str]]:
        # as a store's claim does: an item done meanwhile (listed before it was) is not taken again
        with self.lock:
            finished = set(self.done)
        return [Claimed(item, item.key, 0) for item in items if item.key not in finished]

    def act(self, claimed: Claimed[str]) -> str | None:
        key = claimed.claim
        if self.items[key] == self.slow_lane:
            self.release.wait(DEADLINE)
        with self.lock:
            self.done.append(key)
        return "done"

    def wait_done(self, keys: set[str]) -> None:
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            with self.lock:
                if keys <= set(self.done):
                    return
            time.sleep(0.01)
        raise AssertionError(f"not done: {sorted(keys - set(self.done))[:5]}")


def test_a_deep_backlog_is_listed_a_few_times_not_once_per_item() -> None:
    runner = CountingRunner([f"lane-{n}" for n in range(2000)])
    pump = Pump(runner, name="test", concurrency=8, per_lane=1, interval=0.2, scan=1000)
    pump.start()
    try:
        runner.wait_done(set(runner.items))
    finally:
        pump.stop()
    assert len(runner.done) == 2000
    assert runner.listings < 50, runner.listings  # one listing per started item would be about 250+


def test_a_held_up_lane_keeps_its_place_while_the_other_lanes_go_on() -> None:
    lanes = ["stuck"] * 10 + [f"lane-{n}" for n in range(100)]
    runner = CountingRunner(lanes, slow_lane="stuck")
    pump = Pump(runner, name="test", concurrency=8, per_lane=2, interval=0.05, scan=1000)
    pump.start()
    try:
        others = {key for key, lane in runner.items.items() if lane != "stuck"}
        runner.wait_done(others)  # two of the eight slots stay held by the stuck lane
        with runner.lock:
            assert not any(runner.items[key] == "stuck" for key in runner.done)
        runner.release.set()
        runner.wait_done(set(runner.items))
    finally:
        runner.release.set()
        pump.stop()


class HangingLanes(InstantBatches):
    """Items on lanes; every item of a lane named ``hang-*`` blocks until released. Records when each
    item started and the most items in flight at once."""

    def __init__(self, items: dict[str, str]) -> None:
        self.items = items
        self.started: dict[str, float] = {}
        self.finished: set[str] = set()
        self.running = 0
        self.most_running = 0
        self.lock = threading.Lock()
        self.release = threading.Event()

    def due(self, limit: int) -> Sequence[Due]:
        with self.lock:
            done = set(self.finished)
        return [Due(key, lane) for key, lane in self.items.items() if key not in done][:limit]

    def act(self, claimed: Claimed[str]) -> str | None:
        key = claimed.claim
        with self.lock:
            self.started.setdefault(key, time.monotonic())
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            if self.items[key].startswith("hang-"):
                self.release.wait(DEADLINE)
                return None
            with self.lock:
                self.finished.add(key)
            return "done"
        finally:
            with self.lock:
                self.running -= 1


def test_a_lane_with_thousands_due_gets_no_more_turns_than_a_lane_with_one() -> None:
    items = {f"big-{n}": "big" for n in range(3000)}
    items["small-0"] = "small"  # listed last, after every item of the big lane
    runner = HangingLanes(items)
    pump = Pump(runner, name="test", concurrency=4, per_lane=4, interval=0.05, scan=5000)
    pump.start()
    try:
        deadline = time.monotonic() + DEADLINE
        while "small-0" not in runner.started and time.monotonic() < deadline:
            time.sleep(0.005)
        with runner.lock:
            before = sum(1 for key, at in runner.started.items() if at < runner.started["small-0"])
        assert before <= 4, before  # the small lane's only item went in the first round of turns
    finally:
        pump.stop()


def test_more_hanging_lanes_than_fresh_slots_leave_a_healthy_lane_a_free_slot() -> None:
    # 40 lanes hang at once, five times the fresh pool: each is told apart after 0.3 s and parked in
    # the slow pool, one item a lane, so the fresh pool frees up for a lane that answers
    items = {f"h{n}-{k}": f"hang-{n}" for n in range(40) for k in range(3)}
    runner = HangingLanes(items)
    pump = Pump(
        runner,
        name="test",
        concurrency=8,
        per_lane=4,
        first_per_lane=1,
        slow_concurrency=48,
        slow_per_lane=1,
        slow_after=0.3,
        interval=0.02,
    )
    pump.start()
    try:
        time.sleep(1.0)  # the hanging lanes have filled every slot they can take
        runner.items["healthy-0"] = "healthy"
        added = time.monotonic()
        deadline = added + DEADLINE
        while "healthy-0" not in runner.finished and time.monotonic() < deadline:
            time.sleep(0.005)
        waited = runner.started["healthy-0"] - added
        assert waited < 1.0, waited  # the hanging lanes are parked by now: never a hang's length
        assert runner.most_running <= 8 + 48, runner.most_running  # the pools bound the threads
        fresh, slow = pump.pools()
        assert slow <= 48 and fresh <= 8
        assert len(pump.suspect_lanes()) == 40  # every hanging lane was told apart
        with runner.lock:  # a suspect lane holds one item at a time, however many it has due
            assert runner.running == 40, runner.running
    finally:
        runner.release.set()
        pump.stop()


class BatchCounting(Runner[str, str]):
    """Counts the items of every claim and every record call; actions wait for a release."""

    def __init__(self, count: int) -> None:
        self.items = {f"item-{n}": f"lane-{n % 4}" for n in range(count)}
        self.claims: list[int] = []
        self.records: list[int] = []
        self.recorded: set[str] = set()
        self.lock = threading.Lock()
        self.release = threading.Event()

    def due(self, limit: int) -> Sequence[Due]:
        with self.lock:
            done = set(self.recorded)
        return [Due(key, lane) for key, lane in self.items.items() if key not in done][:limit]

    def claim_many(
        self, items: Sequence[Due], *, isolate: bool = True, skip_busy: bool = True
    ) -> list[Claimed[str]]:
        with self.lock:
            self.claims.append(len(items))
        return [Claimed(item, item.key, 0) for item in items]

    def act(self, claimed: Claimed[str]) -> str | None:
        self.release.wait(DEADLINE)
        return "sent"

    task: Any = None  # no task: act_many acts on a turn's items one after another, through act

    @contextmanager
    def holding(self, items: Sequence[Claimed[str]]) -> Iterator[None]:
        yield  # no store: no lease to renew while an item waits for its turn

    def record_many(
        self, learnt: Sequence[tuple[Claimed[str], str]], *, max_steps: int = 3, isolate: bool = True
    ) -> list[Claimed[str]]:
        time.sleep(0.05)  # a write transaction: the outcomes finished meanwhile wait for the next one
        with self.lock:
            self.records.append(len(learnt))
            self.recorded.update(one.item.key for one, _ in learnt)
        return []


def test_a_round_claims_its_items_together_and_outcomes_are_recorded_many_at_a_time() -> None:
    runner = BatchCounting(12)
    pump = Pump(runner, name="test", concurrency=12, per_lane=3, interval=0.05)
    pump.start()
    try:
        deadline = time.monotonic() + DEADLINE
        while pump.in_flight < 12 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert runner.claims == [12]  # one round started all twelve: one claim of twelve
        runner.release.set()  # every action ends at once
        while len(runner.recorded) < 12 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sum(runner.records) == 12
        assert len(runner.records) <= 3, runner.records  # the first alone, then the rest together
    finally:
        runner.release.set()
        pump.stop()


class RefusedClaims(HangingLanes):
    """As HangingLanes, but the claims of the items in ``refused`` miss (another worker took them, or
    their merchant was busy), as a store's claim may."""

    def __init__(self, items: dict[str, str], refused: set[str]) -> None:
        super().__init__(items)
        self.refused = refused
        self.misses = 0

    def claim_many(
        self, items: Sequence[Due], *, isolate: bool = True, skip_busy: bool = True
    ) -> list[Claimed[str]]:
        with self.lock:
            self.misses += sum(1 for item in items if item.key in self.refused)
        return [Claimed(item, item.key, 0) for item in items if item.key not in self.refused]


def test_a_claim_that_misses_does_not_clear_a_hanging_lanes_verdict() -> None:
    # the lane hangs: its first item is told apart and the lane turns suspect (slow pool, two items at
    # most); the claims of its second item then keep missing. A miss ran nothing: it proves nothing
    # about the lane, which must stay suspect (not win back fresh slots at every miss)
    runner = RefusedClaims({"h-0": "hang-x", "h-1": "hang-x"}, refused={"h-1"})
    pump = Pump(
        runner,
        name="test",
        concurrency=4,
        per_lane=4,
        first_per_lane=1,
        slow_concurrency=4,
        slow_per_lane=2,
        slow_after=0.2,
        interval=0.02,
    )
    pump.start()
    try:
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            with runner.lock:
                if runner.misses >= 5:
                    break
            time.sleep(0.01)
        assert runner.misses >= 5
        assert pump.suspect_lanes() == ["hang-x"]
        assert pump.pools()[0] == 0  # no fresh slot: h-0 and h-1's tries are in the slow pool only
    finally:
        runner.release.set()
        pump.stop()
