"""The console's overview in a real browser: Debian's Chromium, headless, against a real ``paymentcore
serve --demo`` (the server and browser of ``test_console_browser.py``).

The operator signs in and lands on the overview, whose figures match what the test made through the
merchant API (payouts paid and failed today, one held for review) and a webhook endpoint that nobody
answers (failing); there is one SVG chart per kind, no script, and nothing the page's
Content-Security-Policy refused. In the dark colour scheme too. Screenshots for the docs with
``PAYMENTCORE_DOC_SCREENSHOTS=1`` (docs/images/console-overview*.png).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from test_console_browser import REVIEW_ABOVE, Operator, Server, browser, server  # noqa: F401

from paymentcore_server._console_html import CSP

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage

pytestmark = pytest.mark.slow


@pytest.fixture
def dark_operator(browser: Browser, server: Server) -> Iterator[tuple[Operator, list[str]]]:  # noqa: F811
    """A person at the console, in the light or dark scheme by turns, with the page's console errors
    (a style or anything else refused by the CSP is reported there)."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        person = Operator(page=page, server=server)
        problems: list[str] = []

        def on_console(message: ConsoleMessage) -> None:
            if message.type in ("error", "warning"):
                problems.append(message.text)

        page.on("console", on_console)
        page.on("pageerror", lambda error: problems.append(str(error)))
        page.on("request", lambda request: person.requests.append(request.url))
        yield person, problems
    finally:
        context.close()


def cell(operator: Operator, section: str, row: str, column: int) -> str:
    """The text of a cell of a row of one of the overview's tables."""
    table = operator.page.locator(f"section:has(h2:text-is('{section}')) table").first
    return table.get_by_role("row").filter(has_text=row).get_by_role("cell").nth(column).inner_text()


def test_signing_in_lands_on_an_overview_whose_figures_match_what_happened(
    server: Server,  # noqa: F811
    dark_operator: tuple[Operator, list[str]],
) -> None:
    operator, problems = dark_operator
    page = operator.page
    paid = server.payout(amount=2_500, phone="670000001")
    failed = server.payout(amount=3_000, phone="670000021")  # the sandbox refuses this number
    held = server.payout(amount=REVIEW_ABOVE + 5_000, phone="670000002")
    server.wait_for_status(paid, "PAID")
    server.wait_for_status(failed, "FAILED")
    assert server.payout_status(held) == "PENDING"

    operator.sign_in()
    assert page.url == server.base_url + "/console"
    assert page.get_by_role("heading", level=1).inner_text() == "Overview"
    nav = page.get_by_role("navigation").get_by_role("link", name="Overview", exact=True)
    assert nav.get_attribute("aria-current") == "page"

    def failing_shown() -> bool:
        listed = page.locator("section:has(h2:text-is('Webhook endpoints')) tbody tr")
        return listed.count() > 0 and cell(operator, "Webhook endpoints", "Demo Shop", 1) == "failing"

    deadline = time.monotonic() + 20  # the unanswered endpoint's events fail, one attempt each
    while not failing_shown():
        assert time.monotonic() < deadline, "the webhook endpoint never showed as failing"
        time.sleep(0.5)
        page.reload()

    today = [cell(operator, "Payouts", "Today", i) for i in range(7)]
    assert today[0] == "XAF" and today[2] == "3"  # created today: the three of this test
    assert (today[4], today[5], today[6]) == ("1", "1", "50.0 %")  # paid, failed, failed share
    assert today[3] == f"{2_500 + 3_000 + REVIEW_ABOVE + 5_000:,}"
    assert cell(operator, "Waiting for an operator", "XAF", 1) == "1"  # held for review
    assert cell(operator, "Waiting for an operator", "XAF", 3) == "1"  # failed, not yet resolved
    endpoints = page.locator("section:has(h2:text-is('Webhook endpoints')) p").first.inner_text()
    assert endpoints.startswith("1 failing")

    charts = page.locator("figure.chart")
    assert charts.count() == 2
    assert [charts.nth(i).get_attribute("data-chart") for i in range(2)] == [
        "chart-payouts",
        "chart-collections",
    ]
    assert page.locator("figure.chart svg[role=img]").count() == 2
    paid_bar = page.locator("figure[data-chart=chart-payouts] svg a rect.s-ok")
    assert paid_bar.count() == 1 and paid_bar.bounding_box() is not None
    assert page.locator("script").count() == 0
    response = page.goto(server.base_url + "/console")
    assert response is not None and response.headers["content-security-policy"] == CSP
    operator.shot("overview", doc=True)

    page.emulate_media(color_scheme="dark")
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(13, 17, 23)"  # the dark scheme's
    bar = page.evaluate(
        "getComputedStyle(document.querySelector('figure[data-chart=chart-payouts] rect.s-ok')).fill"
    )
    assert bar == "rgb(63, 185, 80)"  # the lighter green the dark scheme draws paid bars in
    operator.shot("overview-dark", doc=True)
    page.emulate_media(color_scheme="light")

    page.locator("section:has(h2:text-is('Payouts')) table").get_by_role("row").filter(
        has_text="Today"
    ).get_by_role("link").nth(3).click()  # the failed payouts of today
    page.wait_for_load_state()
    assert page.get_by_role("heading", level=1).inner_text() == "Payouts"
    listed = page.locator("tbody tr")
    assert listed.count() == 1 and failed in listed.inner_text()
    assert problems == []
    foreign = [url for url in operator.requests if not url.startswith(server.base_url + "/")]
    assert foreign == []
