"""Failed console sign-ins are throttled and recorded (issue 24, point 4), on a real ``paymentcore serve``.

The red team sent 5,342 wrong tokens in 8 s: every one answered 401, none 429, and none was recorded.
Now: at 10 failures from one address within 10 minutes that address gets 429 with ``Retry-After``
(its token not even looked at, the right one included), at 100 from every address together every
address does, each failure is in the audit trail (``operator.sign_in_failed``, never the token), and
the counts live in the database, so two servers on it share them. The client address is what uvicorn
reports: ``X-Forwarded-For`` when the request comes from a trusted proxy (loopback by default), which
is how these tests speak for several addresses.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from test_postgres_server import Serve  # type: ignore[import-not-found, unused-ignore]

from paymentcore import PaymentCore

from conftest import HTTP_ENGINES, postgres_url  # type: ignore[import-not-found, unused-ignore]

pytestmark = pytest.mark.slow

SIGN_IN_CSRF = re.compile(r'name="csrf" value="([A-Za-z0-9_-]{43})"')
WRONG = "pco_" + "x" * 43


def open_core(db: str) -> PaymentCore:
    if db.startswith("postgresql://"):
        return PaymentCore.postgresql(db, sender=None)
    return PaymentCore.sqlite(db, sender=None)


@pytest.fixture(params=HTTP_ENGINES)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """A database with one operator: (the database, the operator's token)."""
    db = postgres_url(tmp_path) if request.param == "postgres" else str(tmp_path / "console.db")
    core = open_core(db)
    try:
        return db, core.operator.create_operator("Ada").token
    finally:
        core.close()


@pytest.fixture
def server(database: tuple[str, str], tmp_path: Path) -> Iterator[Serve]:
    served = Serve(database[0], tmp_path, "server")
    try:
        yield served.wait_ready()
    finally:
        served.stop()


def sign_in(base: str, token: str, address: str | None = None) -> httpx.Response:
    """A browser's sign-in from ``address`` (as a proxy on loopback reports it): the form, then its POST."""
    headers = {"X-Forwarded-For": address} if address else {}
    with httpx.Client(base_url=base, headers=headers, timeout=10) as browser:
        form = browser.get("/console/sign-in")
        found = SIGN_IN_CSRF.search(form.text)
        assert found, form.text
        return browser.post("/console/sign-in", data={"token": token, "csrf": found.group(1)})


def failed_entries(db: str) -> list[tuple[str, dict[str, object]]]:
    core = open_core(db)
    try:
        entries = core.operator.audit_log(record="console", limit=100).data
        return [(e.actor, dict(e.after or {})) for e in entries if e.action == "operator.sign_in_failed"]
    finally:
        core.close()


def test_wrong_tokens_from_one_address_get_429_after_ten_and_are_recorded(
    server: Serve, database: tuple[str, str]
) -> None:
    db, token = database
    answers = [sign_in(server.base, WRONG).status_code for _ in range(10)]
    assert answers == [401] * 10
    for attempt in (WRONG, token):  # the right token too: it is not looked at
        refused = sign_in(server.base, attempt)
        assert refused.status_code == 429, refused.text
        assert 0 < int(refused.headers["retry-after"]) <= 600
        assert refused.headers["content-type"].startswith("text/html")
        assert "Too many failed sign-ins from this address" in refused.text
        assert "paymentcore_console=" not in refused.headers.get("set-cookie", "")
    # another address is not held back
    assert sign_in(server.base, WRONG, "198.51.100.2").status_code == 401
    assert sign_in(server.base, token, "198.51.100.2").status_code == 303

    recorded = failed_entries(db)
    assert [actor for actor, _ in recorded] == ["client:198.51.100.2"] + ["client:127.0.0.1"] * 10
    assert recorded[1][1]["throttled"] is True and recorded[1][1]["failuresInWindow"] == 10
    assert all(WRONG not in str(after) for _, after in recorded)
    assert "Traceback" not in server.output()


def test_wrong_tokens_from_every_address_together_get_429_after_a_hundred(
    server: Serve, database: tuple[str, str]
) -> None:
    db, token = database
    for n in range(100):
        assert sign_in(server.base, WRONG, f"10.1.0.{n + 1}").status_code == 401
    refused = sign_in(server.base, token, "192.0.2.50")  # a fresh address, the right token
    assert refused.status_code == 429 and "Retry-After" in refused.headers
    assert "Too many failed sign-ins:" in refused.text
    assert len(failed_entries(db)) == 100


def test_two_servers_on_one_database_share_the_count(
    server: Serve, database: tuple[str, str], tmp_path: Path
) -> None:
    db, token = database
    other = Serve(db, tmp_path, "other")
    try:
        other.wait_ready()
        for base in (server.base, other.base):
            for _ in range(5):
                assert sign_in(base, WRONG).status_code == 401
        for base in (server.base, other.base):
            assert sign_in(base, token).status_code == 429
    finally:
        other.stop()
