"""The worker's pump: a deep backlog is listed once and worked through, not listed again per item.

Listing what is due reads (and decodes) up to ``scan`` rows; doing that for every item started made a
worker with thousands of payouts due pay out about fifty a second. These tests drive a real
:class:`paymentcore._work.Pump` over a runner whose work is instant and which counts its listings.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from paymentcore._work import Due, Pump, Runner

DEADLINE = 10.0


class CountingRunner(Runner[str, str]):
    """Work items ``item-0`` ... whose lanes are given; ``run_one`` finishes an item at once."""

    def __init__(self, lanes: Sequence[str], *, slow_lane: str | None = None) -> None:
        # no store and no task: the pump only lists (due) and works (run_one)
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

    def run_one(self, key: str, *, max_steps: int = 3) -> str | None:
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
