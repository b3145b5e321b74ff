"""The console's overview over HTTP (Starlette's test client), on SQLite and PostgreSQL.

An operator lands on it after signing in; its figures are what the test made (payouts paid, failed
and held, collections, a failing webhook endpoint); every figure is a link, and following a link lists
exactly the records it counted; the two charts are SVG drawn on the server, with their figures as a
table for screen readers; the page runs no script under the console's policy; merchant text stays text.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import pytest
from test_console_http import Kit, kit_on, post_sign_in

from paymentcore import FakeClock, PayoutStatus
from paymentcore_server._console_html import CSP

from conftest import make_core  # type: ignore[import-not-found, unused-ignore]

HOSTILE = "<img src=x onerror=alert(1)>"


@pytest.fixture(params=["sqlite", "postgres"])
def kit(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Kit]:
    yield from kit_on(make_core(request.param, tmp_path, clock), clock)


def links(html: str) -> dict[str, str]:
    """aria-label (or the text) -> href of every link of the page's main part."""
    main = html.split("<main>", 1)[1]
    found = {}
    for href, label, shown in re.findall(r'<a href="([^"]+)"(?: aria-label="([^"]*)")?>([^<]*)</a>', main):
        found[unescape(label or shown)] = unescape(href)
    return found


def rows(html: str) -> list[str]:
    """The references listed by a list page."""
    return re.findall(r">((?:PO|REQ)-[0-9]+-[A-Z0-9]+)<", html)


def test_signing_in_lands_on_the_overview_and_its_figures_say_what_happened(kit: Kit) -> None:
    core = kit.core
    core.webhooks.register(kit.merchant_id, url="https://shop.example/hooks")  # its deliveries fail (sandbox)
    paid = kit.payout(amount=2500)
    refused = kit.payout(amount=3000, phone="670000021")  # the sandbox refuses this number
    held = kit.payout(amount=7000)  # above the review threshold of 5,000
    core.run_until_idle()
    kit.clock.advance(5)
    core.run_until_idle()
    assert [core.disburse.find(r).status for r in (paid, refused, held)] == [
        PayoutStatus.PAID,
        PayoutStatus.FAILED,
        PayoutStatus.PENDING,
    ]
    with core.store.transaction() as tx:  # as after its events failed every retry
        import attrs

        endpoint = tx.webhooks.get(kit.merchant_id)
        assert endpoint is not None
        tx.webhooks.put(attrs.evolve(endpoint, consecutive_failures=4))

    answer = post_sign_in(kit.http, kit.token)
    assert (answer.status_code, answer.headers["location"]) == (303, "/console")
    page = kit.http.get("/console")
    assert page.status_code == 200
    html = page.text
    assert "<h1>Overview</h1>" in html and "<a href='/console' aria-current=page>Overview</a>" in html
    found = links(html)
    assert found["3 payouts in XAF, today"].startswith("/console/payouts?currency=XAF&from=")
    assert "1 paid, payouts in XAF, today" in found and "1 failed, payouts in XAF, today" in found
    assert "1 payouts in XAF held for review" in found and "1 payouts in XAF failed and unresolved" in found
    assert found["1 endpoints failing"] == "/console/webhooks"
    assert "50.0 %" in html  # one failed of two answered
    assert "Test Shop" in html and ">4<" in html  # the failing endpoint, by its merchant's name

    listed = kit.http.get(found["3 payouts in XAF, today"])
    assert listed.status_code == 200 and set(rows(listed.text)) == {paid, refused, held}
    assert rows(kit.http.get(found["1 failed, payouts in XAF, today"]).text) == [refused]
    assert rows(kit.http.get(found["1 paid, payouts in XAF, last hour"]).text) == [paid]
    assert held in kit.http.get(found["1 payouts in XAF held for review"]).text
    assert refused in kit.http.get(found["1 payouts in XAF failed and unresolved"]).text
    assert kit.http.get("/console/review?currency=XOF").text.count(held) == 0


def test_the_charts_are_svg_with_links_and_their_figures_as_text(kit: Kit) -> None:
    kit.payout(amount=2500)
    kit.core.run_until_idle()
    kit.sign_in()
    html = kit.http.get("/console").text
    svgs = re.findall(r"<svg .*?</svg>", html, flags=re.S)
    assert len(svgs) == 2
    assert [m for m in re.findall(r"data-chart='([^']+)'", html)] == ["chart-payouts", "chart-collections"]
    for svg in svgs:
        tree = ET.fromstring(svg)  # well-formed
        assert tree.get("role") == "img" and "last 24 hours" in (tree.get("aria-label") or "")
    payouts = ET.fromstring(svgs[0])
    segments = payouts.findall(".//{http://www.w3.org/2000/svg}a")
    assert segments, "the payout's bar"
    href = segments[0].get("href") or ""
    assert href.startswith("/console/payouts?status=") and "&from=" in href
    assert len(rows(kit.http.get(href).text)) == 1
    tables = re.findall(r"<table class='sr-only'>.*?</table>", html, flags=re.S)
    assert len(tables) == 2 and tables[0].count("<tr>") == 25  # a header and 24 hours


def test_the_overview_runs_no_script_and_keeps_the_console_policy(kit: Kit) -> None:
    bad = kit.core.operator.create_merchant(HOSTILE)
    kit.core.webhooks.register(bad.id, url="https://shop.example/x")
    with kit.core.store.transaction() as tx:
        import attrs

        endpoint = tx.webhooks.get(bad.id)
        assert endpoint is not None
        tx.webhooks.put(attrs.evolve(endpoint, is_active=False, disabled_reason="<script>x</script>"))
    kit.sign_in()
    for path in ("/console", "/console/payouts", "/console/collections", "/console/work/payouts"):
        answer = kit.http.get(path)
        assert answer.status_code == 200, path
        assert answer.headers["content-security-policy"] == CSP
        assert "script-src" not in CSP and "default-src 'none'" in CSP
        assert "<script" not in answer.text and "<img" not in answer.text, path
        assert " style=" not in answer.text and " on" not in re.sub(r">[^<]*<", "><", answer.text)
    html = kit.http.get("/console").text
    assert "&lt;img src=x onerror=alert(1)&gt;" in html and "&lt;script&gt;x&lt;/script&gt;" in html


def test_the_lists_refuse_a_filter_they_cannot_read(kit: Kit) -> None:
    kit.sign_in()
    for path, said in (
        ("/console/payouts?from=yesterday", "From must be an ISO 8601 time"),
        ("/console/payouts?to=2026-03-10T09:00:00", "To must say its time zone"),
        ("/console/payouts?status=LOST", "Status must be one of PENDING"),
        ("/console/collections?status=PAID", "Status must be one of PENDING, PROCESSING"),
        ("/console/work/refunds", "kind must be one of collections, payouts, deliveries"),
        ("/console/payouts?after=PO-nope", "starting_after is not a payout reference"),
    ):
        answer = kit.http.get(path)
        assert answer.status_code == 400, path
        assert said in unescape(answer.text), path


def test_background_work_lists_what_is_due_oldest_first(kit: Kit) -> None:
    first = kit.payout(amount=1000)  # due for dispatch at once; no worker runs
    kit.clock.advance(90)
    second = kit.payout(amount=1200)
    kit.clock.advance(30)
    kit.sign_in()
    html = kit.http.get("/console").text
    found = links(html)
    assert found["2 payouts pending"] == "/console/work/payouts"
    assert "2 min 00 s" in html
    work = kit.http.get("/console/work/payouts").text
    assert work.index(first) < work.index(second)


def test_without_a_session_the_overview_and_its_lists_show_nothing(kit: Kit) -> None:
    kit.payout(amount=1000)
    for path in ("/console", "/console/payouts", "/console/collections", "/console/work/payouts"):
        answer = kit.http.get(path, follow_redirects=False)
        assert answer.status_code == 303 and answer.headers["location"].startswith("/console/sign-in"), path
        assert "XAF" not in answer.text


def test_a_time_filter_in_another_zone_is_shown_as_the_utc_moment_it_means(kit: Kit) -> None:
    kit.sign_in()
    answer = kit.http.get("/console/payouts", params={"from": "2026-03-10T10:00:00+01:00"})
    assert answer.status_code == 200
    assert "created from 2026-03-10 09:00:00 UTC" in answer.text
