"""``paymentcore serve`` and ``paymentcore worker`` settle their memory before they start working: what
start-up made (modules, the app, the core) is collected once and then frozen, out of the garbage
collector's sight, so that full collections under load walk only what requests make."""

from __future__ import annotations

import gc
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import paymentcore_server._serving as serving
import paymentcore_server.cli as cli
from paymentcore import PaymentCore
from paymentcore_server.cli import main


class _Stop(Exception):
    """Ends the command under test where the test has seen what it needs."""


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[PaymentCore]]:
    """The cores the command opens (closed at the end whatever the command did); the collector's
    pass left out (other tests' leftovers are not this test's business) and the freeze undone."""
    cores: list[PaymentCore] = []
    open_core = cli.open_core

    def opening(*args: Any, **kwargs: Any) -> PaymentCore:
        core = open_core(*args, **kwargs)
        cores.append(core)
        return core

    monkeypatch.setattr(cli, "open_core", opening)
    monkeypatch.setattr(gc, "collect", lambda *args: 0)
    gc.unfreeze()
    try:
        yield cores
    finally:
        gc.unfreeze()
        for core in cores:
            core.close()


def test_serve_freezes_what_start_up_made_before_it_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opened: list[PaymentCore]
) -> None:
    frozen_at_start: list[int] = []

    def run(app: Any, **kwargs: Any) -> None:
        frozen_at_start.append(gc.get_freeze_count())

    monkeypatch.setattr(serving, "run", run)
    assert main(["--db", str(tmp_path / "pay.db"), "serve", "--port", "8765"]) == 0
    assert len(opened) == 1 and len(frozen_at_start) == 1 and frozen_at_start[0] > 0


def test_the_worker_freezes_what_start_up_made_before_it_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opened: list[PaymentCore]
) -> None:
    frozen_at_start: list[int] = []

    def start_worker(self: PaymentCore, *args: Any, **kwargs: Any) -> None:
        frozen_at_start.append(gc.get_freeze_count())
        raise _Stop  # the worker itself is not under test

    monkeypatch.setattr(PaymentCore, "start_worker", start_worker)
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # the test process keeps its own handlers
    with pytest.raises(_Stop):
        main(["--db", str(tmp_path / "pay.db"), "worker"])
    assert len(opened) == 1 and len(frozen_at_start) == 1 and frozen_at_start[0] > 0
