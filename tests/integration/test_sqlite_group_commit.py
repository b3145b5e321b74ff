"""SQLite's group commit: the write transactions of a burst share one SQLite transaction and one COMMIT,
and each is still all or nothing on its own.

The batch's first unit runs without a savepoint (should it fail, the whole transaction, which holds
nothing else yet, is rolled back); every later unit runs inside its own savepoint, so a unit that fails
takes none of its neighbours' writes with it, and they commit.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from test_store_contract import merchant  # type: ignore[import-not-found, unused-ignore]

from paymentcore.adapters.sqlite import SqliteStore


class Refused(Exception):
    pass


def stored(store: SqliteStore) -> set[str]:
    with store.read() as tx:
        return {m.id for m in tx.merchants.list()}


def waiting(store: SqliteStore) -> int:
    group = store._group  # how many writers queue for the batch is what the test steers by
    assert group is not None
    return group._waiting


def test_a_unit_that_fails_in_a_batch_leaves_its_neighbours_to_commit(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "pc.db")
    outcomes: dict[str, str] = {}
    first_inside = threading.Event()

    def first() -> None:
        with store.transaction() as tx:
            tx.merchants.put(merchant("mer_first"))
            first_inside.set()
            deadline = time.monotonic() + 10
            while waiting(store) < 2 and time.monotonic() < deadline:  # both others queue behind it,
                time.sleep(0.001)  # so it leaves the batch open for them rather than committing alone
            outcomes["queued behind it"] = str(waiting(store))
        outcomes["first"] = "committed"

    def failing() -> None:
        try:
            with store.transaction() as tx:
                tx.merchants.put(merchant("mer_failing"))
                raise Refused("this unit only")
        except Refused:
            outcomes["failing"] = "refused"

    def other() -> None:
        with store.transaction() as tx:
            tx.merchants.put(merchant("mer_other"))
        outcomes["other"] = "committed"

    try:
        threads = [threading.Thread(target=first)]
        threads[0].start()
        assert first_inside.wait(10)
        threads += [threading.Thread(target=failing), threading.Thread(target=other)]
        for thread in threads[1:]:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert outcomes == {
            "queued behind it": "2",  # the three units shared one batch: the later two in savepoints
            "first": "committed",
            "failing": "refused",
            "other": "committed",
        }
        assert stored(store) == {"mer_first", "mer_other"}
    finally:
        store.close()


def test_a_first_unit_that_fails_leaves_nothing_and_the_next_batch_commits(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "pc.db")
    try:
        with pytest.raises(Refused), store.transaction() as tx:
            tx.merchants.put(merchant("mer_gone"))
            assert tx.merchants.get("mer_gone") is not None
            raise Refused("the batch's first unit")
        assert stored(store) == set()
        with store.transaction() as tx:
            tx.merchants.put(merchant("mer_kept"))
        assert stored(store) == {"mer_kept"}
    finally:
        store.close()


def test_a_statement_refused_by_the_database_fails_only_its_unit(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "pc.db")
    try:
        with store.transaction() as tx:
            tx.merchants.put(merchant("mer_1"))
        with pytest.raises(Exception, match=r"UNIQUE|constraint"), store.transaction() as tx:
            tx.merchants.put(merchant("mer_2"))
            tx.unit_rows.write(
                "INSERT INTO merchants (id, name) SELECT id, name FROM merchants WHERE id = ?", ("mer_1",)
            )
        assert stored(store) == {"mer_1"}
    finally:
        store.close()
