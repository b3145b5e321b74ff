"""A pump hands a quick lane's items to one pool thread a turn at a time (acted on together where the
task can), a slow lane's one item a thread; items waiting for their turn keep their leases renewed."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from paymentcore._services.work import TURN_BUDGET, Claimed, Due, Pump, Runner

DEADLINE = 10.0
SLOW = 0.02  # an action of the slow lane: past TURN_BUDGET
assert SLOW > TURN_BUDGET


class TurnRecorder(Runner[str, str]):
    """Items on lanes, no store; the slow lane's actions take SLOW seconds, the others none. Records
    the lane and size of every turn the pump hands over."""

    task: Any = None  # no task of its own: a turn's items are acted on one after another, through act

    def __init__(self, items: dict[str, str], slow_lane: str) -> None:
        self.items = items
        self.slow_lane = slow_lane
        self.turns: list[tuple[str, int]] = []
        self.finished: set[str] = set()
        self.lock = threading.Lock()

    def due(self, limit: int) -> Sequence[Due]:
        with self.lock:
            done = set(self.finished)
        return [Due(key, lane) for key, lane in self.items.items() if key not in done][:limit]

    def claim_many(
        self, items: Sequence[Due], *, isolate: bool = True, skip_busy: bool = True
    ) -> list[Claimed[str]]:
        with self.lock:
            done = set(self.finished)
        return [Claimed(item, item.key, 0) for item in items if item.key not in done]

    @contextmanager
    def holding(self, items: Sequence[Claimed[str]]) -> Iterator[None]:
        yield  # no store: no lease to renew

    def act_many(self, claimed: Sequence[Claimed[str]]) -> list[str | None]:
        with self.lock:
            self.turns.append((claimed[0].item.lane, len(claimed)))
        return super().act_many(claimed)

    def act(self, claimed: Claimed[str]) -> str | None:
        if self.items[claimed.claim] == self.slow_lane:
            time.sleep(SLOW)
        with self.lock:
            self.finished.add(claimed.claim)
        return "done"

    def record_many(
        self, learnt: Sequence[tuple[Claimed[str], str]], *, max_steps: int = 3, isolate: bool = True
    ) -> list[Claimed[str]]:
        return []


def test_a_quick_lanes_items_go_a_turn_to_a_thread_and_a_slow_lanes_one_each() -> None:
    items = {f"q-{n}": "quick" for n in range(60)} | {f"s-{n}": "slow" for n in range(12)}
    runner = TurnRecorder(items, slow_lane="slow")
    pump = Pump(runner, name="test", concurrency=32, per_lane=8, interval=0.02)
    pump.start()
    try:
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            with runner.lock:
                if len(runner.finished) == len(items):
                    break
            time.sleep(0.01)
        with runner.lock:
            assert runner.finished == set(items)
            quick = [size for lane, size in runner.turns if lane == "quick"]
            slow = [size for lane, size in runner.turns if lane == "slow"]
        assert quick[0] == 1  # its pace unknown yet: one item a thread
        assert max(quick) > 1  # once known to be quick: several a turn
        assert sum(quick) == 60
        assert slow == [1] * 12  # each action past the budget: never waits behind another
    finally:
        pump.stop()


class Leases:
    def take_many(self, kind: str, items: Sequence[tuple[str, int]]) -> None:
        pass

    def drop_many(self, kind: str, keys: Sequence[str]) -> None:
        pass


class Unit:
    leases = Leases()


class NoStore:
    @contextmanager
    def transaction(self) -> Iterator[Unit]:
        yield Unit()


class SlowActions:
    """Each action takes ACT seconds; records when each began and every renewal asked of the store."""

    ACT = 0.25

    def __init__(self) -> None:
        self.began: dict[str, float] = {}
        self.renewed: dict[str, list[float]] = {}
        self.lock = threading.Lock()

    def act(self, claim: str, now: int) -> str:
        with self.lock:
            self.began[claim] = time.monotonic()
        time.sleep(self.ACT)
        return "done"

    def renew(self, tx: Any, key: str, held_until: int, until: int) -> bool:
        with self.lock:
            self.renewed.setdefault(key, []).append(time.monotonic())
        return True


class Clock:
    def now(self) -> int:
        return int(time.time() * 1000)


def test_items_waiting_for_their_turn_keep_their_leases_renewed() -> None:
    task = SlowActions()
    lease_ms = 300  # renewed every 0.1 s; the third item waits 0.5 s for its turn
    runner: Runner[str, str] = Runner(task, NoStore(), Clock(), kind="test", lease_ms=lease_ms)  # type: ignore[arg-type]
    now = Clock().now()
    claimed = [Claimed(Due(f"k{n}", "lane"), f"k{n}", now + lease_ms) for n in range(3)]
    started = time.monotonic()
    assert runner.act_many(claimed) == ["done"] * 3
    with task.lock:
        third_began = task.began["k2"]
        renewed_before = [at for at in task.renewed.get("k2", []) if at < third_began]
    assert third_began - started >= 2 * SlowActions.ACT
    # renewed while it waited, before its lease (taken at the start) could run out
    assert renewed_before and renewed_before[0] - started < lease_ms / 1000


class OnePoisoned(SlowActions):
    """Acts on several items together, which fails whenever the poisoned item is among them; each item
    alone succeeds except the poisoned one."""

    ACT = 0.0

    def act_many(self, claims: Sequence[str], now: int) -> list[str | None]:
        if "poison" in claims:
            raise ValueError("an event whose body cannot be written")
        return ["sent together"] * len(claims)

    def act(self, claim: str, now: int) -> str:
        if claim == "poison":
            raise ValueError("an event whose body cannot be written")
        return "sent alone"


def test_an_item_that_breaks_a_turn_fails_alone() -> None:
    task = OnePoisoned()
    runner: Runner[str, str] = Runner(task, NoStore(), Clock(), kind="test", lease_ms=300)  # type: ignore[arg-type]
    now = Clock().now()
    keys = ["poison", "a", "b"]
    claimed = [Claimed(Due(key, "lane"), key, now + 300) for key in keys]
    assert runner.act_many(claimed) == [None, "sent alone", "sent alone"]
    clean = [Claimed(Due(key, "lane"), key, now + 300) for key in ("c", "d")]
    assert runner.act_many(clean) == ["sent together"] * 2
