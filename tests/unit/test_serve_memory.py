"""``paymentcore serve`` and ``paymentcore worker`` settle their memory before they start working: what
start-up made (modules, the app, the core) is collected once and then frozen, out of the garbage
collector's sight, so that full collections under load walk only what requests make."""

from __future__ import annotations

import gc
import signal
from pathlib import Path
from typing import Any

import pytest

import paymentcore_server._serving as serving
from paymentcore import PaymentCore
from paymentcore_server.cli import main


def test_serve_freezes_what_start_up_made_before_it_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frozen_at_start: list[int] = []

    def run(app: Any, **kwargs: Any) -> None:
        frozen_at_start.append(gc.get_freeze_count())

    monkeypatch.setattr(serving, "run", run)
    gc.unfreeze()
    try:
        assert main(["--db", str(tmp_path / "pay.db"), "serve", "--port", "8765"]) == 0
    finally:
        gc.unfreeze()
    assert len(frozen_at_start) == 1 and frozen_at_start[0] > 0


def test_the_worker_freezes_what_start_up_made_before_it_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frozen_at_start: list[int] = []

    def start_worker(self: PaymentCore, *args: Any, **kwargs: Any) -> None:
        frozen_at_start.append(gc.get_freeze_count())
        raise KeyboardInterrupt  # stop the command here: the worker itself is not under test

    monkeypatch.setattr(PaymentCore, "start_worker", start_worker)
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # the test process keeps its own handlers
    gc.unfreeze()
    try:
        with pytest.raises(KeyboardInterrupt):
            main(["--db", str(tmp_path / "pay.db"), "worker"])
    finally:
        gc.unfreeze()
    assert len(frozen_at_start) == 1 and frozen_at_start[0] > 0
