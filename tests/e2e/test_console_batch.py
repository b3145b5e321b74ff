"""The console's page of a bulk payout request (issue 28), on SQLite and PostgreSQL.

Reached from each of its payouts' pages: the batch, a progress bar per payout status (a ``<progress>``
element: no script, no inline style, as the console's policy wants), its items in request order with
their payouts or errors, a page at a time, and merchant text kept as text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_console_http import (  # type: ignore[import-not-found, unused-ignore]
    FORGED_NAME,
    HOSTILE_NAME,
    SCREEN_CLEARING,
    Kit,
    csrf_of,
    kit_on,
)

from paymentcore import FakeClock, wire

from conftest import make_core  # type: ignore[import-not-found, unused-ignore]


@pytest.fixture(params=["sqlite", "postgres"])
def kit(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Kit]:
    yield from kit_on(make_core(request.param, tmp_path, clock), clock)


def bulk(kit: Kit, items: list[dict[str, Any]], idem: str) -> dict[str, Any]:
    answer = kit.http.post(
        "/v1/disburse/bulk",
        content=wire.dumps({"mode": "each", "items": items}),
        headers={
            "Authorization": f"Bearer {kit.disburse_key}",
            "Idempotency-Key": idem,
            "Content-Type": "application/json",
        },
    )
    assert answer.status_code == 201, answer.text
    batch: dict[str, Any] = answer.json()
    return batch


def bars(html: str) -> dict[str, tuple[int, int]]:
    """The progress bars of a batch page: status -> (value, max)."""
    found = re.findall(r"<progress value='(\d+)' max='(\d+)' aria-label=\"(\w+): ", html)
    return {status: (int(value), int(top)) for value, top, status in found}


def test_a_batch_page_shows_progress_and_items_and_is_linked_from_its_payouts(kit: Kit) -> None:
    items = [
        {"amount": 6000, "currency": "XAF", "phone": "670000000", "merchantReference": "held"},  # review
        {
            "amount": 1000,
            "currency": "XAF",
            "phone": "670000000",
            "merchantReference": SCREEN_CLEARING,
            "recipientName": HOSTILE_NAME,
        },
        {"amount": 1, "currency": "XAF", "phone": "670000000", "merchantReference": FORGED_NAME},
    ]
    batch = bulk(kit, items, "console")
    held, paid, refused = batch["items"]
    kit.sign_in()
    payout_page = kit.http.get(f"/console/payouts/{paid['payout']['reference']}").text
    assert f'href="/console/batches/{batch["id"]}"' in payout_page
    single = kit.payout(amount=1000)  # a payout of no batch says so
    assert "/console/batches/" not in kit.http.get(f"/console/payouts/{single}").text

    answer = kit.http.get(f"/console/batches/{batch['id']}")
    assert answer.status_code == 200
    html = answer.text
    assert "data-status='PROCESSING'" in html and "3: 2 accepted, 1 refused" in html
    assert bars(html) == {
        "PENDING": (2, 2),
        "SENT": (0, 2),
        "PAID": (0, 2),
        "FAILED": (0, 2),
        "REJECTED": (0, 2),
    }
    assert f'href="/console/payouts/{held["payout"]["reference"]}"' in html and "held for review" in html
    assert "AMOUNT_TOO_SMALL" in html and "REFUSED" in html
    # merchant text stays text: escaped, control characters shown, nothing run
    assert "<img" not in html and "<script" not in html and "style=" not in html
    assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u202e]", html)
    assert "<bdi>\\x1b[2J\\x1b[31mFAKE: approved\\x07</bdi>" in html
    assert "<bdi>Bob\\r\\nstatus: PAID</bdi>" in html
    assert "default-src 'none'" in answer.headers["content-security-policy"]

    kit.core.run_until_idle()  # the small one is paid; the held one waits for review
    assert bars(kit.http.get(f"/console/batches/{batch['id']}").text)["PAID"] == (1, 2)
    csrf = csrf_of(kit.http.get("/console/review").text)
    kit.act(f"/console/payouts/{held['payout']['reference']}/reject", csrf)
    done = kit.http.get(f"/console/batches/{batch['id']}").text
    assert "data-status='COMPLETED'" in done
    assert bars(done) == {
        "PENDING": (0, 2),
        "SENT": (0, 2),
        "PAID": (1, 2),
        "FAILED": (0, 2),
        "REJECTED": (1, 2),
    }
    assert refused["payout"] is None


def test_a_batch_page_pages_its_items_and_refuses_what_it_does_not_know(kit: Kit) -> None:
    items = [
        {"amount": 100, "currency": "XAF", "phone": "670000000", "merchantReference": f"r{n:03}"}
        for n in range(105)
    ]
    batch = bulk(kit, items, "pages")
    kit.sign_in()
    first = kit.http.get(f"/console/batches/{batch['id']}").text
    assert "r099" in first and "r100" not in first
    found = re.search(r"<a href=\"([^\"]+)\">Next page</a>", first)
    assert found is not None and found.group(1).endswith("?after=99")
    rest = kit.http.get(found.group(1).replace("&amp;", "&")).text
    assert "r100" in rest and "r104" in rest and "r099" not in rest and "Next page" not in rest
    assert kit.http.get("/console/batches/bat_nope").status_code == 404
    assert kit.http.get(f"/console/batches/{batch['id']}?after=x").status_code == 400
    assert kit.http.get(f"/console/batches/{batch['id']}?after=105").status_code == 400
    kit.http.cookies.clear()
    away = kit.http.get(f"/console/batches/{batch['id']}", follow_redirects=False)
    assert away.status_code == 303 and away.headers["location"].startswith("/console/sign-in")
    assert batch["id"] not in away.text
