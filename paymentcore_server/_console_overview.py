"""The console's overview (``/console``, where an operator lands) and the lists behind its figures.

The overview answers "is money moving?" from :meth:`paymentcore.PaymentCore.operator`'s ``overview()``:
payouts and collections per currency in the last hour and today (how many, their amount, how many
succeeded and failed, the failed share), what waits for an operator (held for review, failed and
unresolved), the background queues (pending, in flight, how long the oldest has waited), the webhook
endpoints failing or disabled, and two charts of the last 24 hours by hour. Every figure is a link to
the list of the records behind it:

- ``/console/payouts`` and ``/console/collections``: every merchant's records, oldest first, filtered by
  ``currency``, ``status`` and creation time (``from``, inclusive, and ``to``, exclusive: ISO 8601 UTC
  times such as ``2026-03-10T09:00:00.000Z``);
- ``/console/review`` and ``/console/failed`` (the work queues) with ``currency``;
- ``/console/work/{kind}``: the due items of one kind of background work, in the order a worker takes
  them;
- ``/console/webhooks``: each merchant's endpoint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Protocol
from urllib.parse import quote, urlencode

from starlette.requests import Request

from paymentcore import Activity, CollectionStatus, HourCounts, PaymentCore, PayoutStatus, QueueTotal
from paymentcore_server._charts import Series, hourly_chart
from paymentcore_server._console_html import attr, moment, table, text


class ConsoleView(Protocol):
    """What the pages use of ``paymentcore_server.console.Console``, which calls them: a structural type,
    so that this module does not import the console back."""

    @property
    def core(self) -> PaymentCore: ...
    def _names(self) -> dict[str, str]: ...
    def _amount(self, value: Decimal, currency: str) -> str: ...
    def _merchant_cell(self, merchant_id: str, names: Mapping[str, str]) -> str: ...
    def _payout_link(self, reference: str) -> str: ...
    def _status(self, status: PayoutStatus, /) -> str: ...
    def _more(self, request: Request, has_more: bool, last: str | None, **keep: str) -> str: ...


class SignedIn(Protocol):
    """The signed-in operator of a request (``paymentcore_server.console.Signed``)."""

    @property
    def actor(self) -> str: ...

__all__ = [
    "WORK_LABELS",
    "collections_list",
    "iso",
    "overview_page",
    "parse_moment",
    "payouts_list",
    "work_list",
]

PREFIX = "/console"
WORK_LABELS = {
    "collections": "Collections (prompts, status checks, expiry)",
    "payouts": "Payouts (hand-over, status checks)",
    "deliveries": "Webhook deliveries",
}
PAYOUT_SERIES = (
    Series(("PAID",), "Paid", "s-ok"),
    Series(("FAILED",), "Failed", "s-bad"),
    Series(("REJECTED",), "Rejected", "s-rej"),
    Series(("SENT",), "Sent", "s-sent"),
    Series(("PENDING",), "Pending", "s-wait"),
)
COLLECTION_SERIES = (
    Series(("SUCCESS",), "Succeeded", "s-ok"),
    Series(("FAILED",), "Failed", "s-bad"),
    Series(("PROCESSING",), "Processing", "s-sent"),
    Series(("PENDING",), "Pending", "s-wait"),
)


class FilterError(Exception):
    """A list's filter cannot be read (shown with 400)."""


def iso(value: datetime) -> str:
    """A UTC time as the lists' filters take it: ``2026-03-10T09:00:00.000Z``."""
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def parse_moment(raw: str | None, label: str) -> datetime | None:
    """An ISO 8601 time with its zone (``Z`` or ``+01:00``), or None for an empty value."""
    if not raw:
        return None
    try:
        value = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise FilterError(f"{label} must be an ISO 8601 time such as 2026-03-10T09:00:00Z.") from None
    if value.tzinfo is None:
        raise FilterError(f"{label} must say its time zone (a Z for UTC).")
    return value


def _link(path: str, **query: str | None) -> str:
    kept = {name: value for name, value in query.items() if value}
    return path + ("?" + urlencode(kept) if kept else "")


def _a(href: str, shown: str, label: str = "") -> str:
    described = f' aria-label="{attr(label)}"' if label else ""
    return f'<a href="{attr(href)}"{described}>{shown}</a>'


def _share(activity: Activity) -> str:
    share = activity.failed_share
    return "—" if share is None else f"{share * 100:.1f} %"


def _wait(seconds: float) -> str:
    if seconds <= 0:
        return "—"
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def _activity_table(
    console: ConsoleView, o_windows: Sequence[tuple[str, datetime, datetime, Sequence[Activity]]], kind: str
) -> str:
    """One row per currency and window: created, amount, succeeded, failed, failed share; each figure a
    link to the list of the records behind it."""
    noun, ok_status, ok_label = (
        ("payouts", "PAID", "Paid") if kind == "payouts" else ("collections", "SUCCESS", "Succeeded")
    )
    path = f"{PREFIX}/{noun}"
    currencies = sorted({a.currency for _, _, _, activities in o_windows for a in activities})
    rows = []
    for currency in currencies:
        for window, start, end, activities in o_windows:
            found = next((a for a in activities if a.currency == currency), None)
            if found is None:
                found = Activity(currency, 0, Decimal(0), 0, 0)
            span = {"currency": currency, "from": iso(start), "to": iso(end)}
            every = _link(path, **span)
            succeeded = _link(path, **span, status=ok_status)
            failed = _link(path, **span, status="FAILED")
            what = f"{noun} in {currency}, {window.lower()}"
            rows.append(
                [
                    text(currency),
                    window,
                    _a(every, str(found.count), f"{found.count} {what}"),
                    _a(every, console._amount(found.amount, currency), f"amount of the {what}"),
                    _a(succeeded, str(found.succeeded), f"{found.succeeded} {ok_label.lower()}, {what}"),
                    _a(failed, str(found.failed), f"{found.failed} failed, {what}"),
                    _share(found),
                ]
            )
    return table(
        ["Currency", "Window", "Created", "Amount", ok_label, "Failed", "Failed share"],
        rows,
        empty=f"No {noun[:-1]} today.",
        numeric=(2, 3, 4, 5, 6),
    )


def _waiting_table(console: ConsoleView, held: Sequence[QueueTotal], failed: Sequence[QueueTotal]) -> str:
    currencies = sorted({t.currency for t in (*held, *failed)})
    rows = []
    for currency in currencies:
        cells = [text(currency)]
        for totals, path, what in (
            (held, "review", "held for review"),
            (failed, "failed", "failed and unresolved"),
        ):
            found = next((t for t in totals if t.currency == currency), QueueTotal(currency, 0, Decimal(0)))
            href = _link(f"{PREFIX}/{path}", currency=currency)
            cells.append(_a(href, str(found.count), f"{found.count} payouts in {currency} {what}"))
            cells.append(console._amount(found.amount, currency))
        rows.append(cells)
    return table(
        ["Currency", "Held for review", "Amount held", "Failed, unresolved", "Amount reserved"],
        rows,
        empty="No payout is waiting for an operator.",
        numeric=(1, 2, 3, 4),
    )


def overview_page(console: ConsoleView, who: SignedIn, request: Request) -> tuple[str, str, str | None]:
    o = console.core.operator.overview()
    windows = [("Last hour", o.last_hour), ("Today", o.today)]
    payouts = [(name, w.start, w.end, w.payouts) for name, w in windows]
    collections = [(name, w.start, w.end, w.collections) for name, w in windows]

    def payout_link(hour: HourCounts, series: Series) -> str:
        end = hour.start + timedelta(hours=1)
        return attr(
            _link(f"{PREFIX}/payouts", status=series.statuses[0], **{"from": iso(hour.start), "to": iso(end)})
        )

    def collection_link(hour: HourCounts, series: Series) -> str:
        end = hour.start + timedelta(hours=1)
        return attr(
            _link(
                f"{PREFIX}/collections",
                status=series.statuses[0],
                **{"from": iso(hour.start), "to": iso(end)},
            )
        )

    charts = hourly_chart(
        "Payouts, last 24 hours",
        o.payout_hours,
        PAYOUT_SERIES,
        chart_id="chart-payouts",
        noun="payouts",
        link=payout_link,
    ) + hourly_chart(
        "Collections, last 24 hours",
        o.collection_hours,
        COLLECTION_SERIES,
        chart_id="chart-collections",
        noun="collections",
        link=collection_link,
    )
    work_rows = []
    for w in o.work:
        href = f"{PREFIX}/work/{w.kind}"
        label = WORK_LABELS.get(w.kind, w.kind)
        work_rows.append(
            [
                _a(href, label),
                _a(href, str(w.pending), f"{w.pending} {w.kind} pending"),
                _a(href, str(w.in_flight), f"{w.in_flight} {w.kind} in flight"),
                _wait(w.oldest_pending_seconds),
            ]
        )
    work = table(["Kind", "Pending", "In flight", "Oldest waiting"], work_rows, empty="", numeric=(1, 2, 3))
    hooks = f"{PREFIX}/webhooks"
    counts = (
        f"<p>{_a(hooks, str(o.endpoints_failing), f'{o.endpoints_failing} endpoints failing')} failing"
        f" · {_a(hooks, str(o.endpoints_disabled), f'{o.endpoints_disabled} endpoints disabled')} disabled"
        "</p>"
    )
    worst = table(
        ["Merchant", "State", "Failed events in a row", "Reason"],
        (
            [
                _a(f"{hooks}#m-{quote(e.merchant_id)}", text(e.merchant_name)),
                "<span class='status bad'>disabled</span>"
                if not e.active
                else "<span class='status wait'>failing</span>",
                str(e.consecutive_failures),
                text(e.disabled_reason),
            ]
            for e in o.troubled_endpoints
        ),
        empty="Every webhook endpoint is delivering.",
        numeric=(2,),
    )
    content = (
        f"<p class='muted'>As of {moment(o.at)}. The last hour is the 60 minutes up to now, today the UTC"
        " day so far; a record counts in the window it was created in, with its status now. The failed"
        " share is failed / (failed + succeeded): of the records the network has answered.</p>"
        f"<section aria-labelledby='h-payouts'><h2 id='h-payouts'>Payouts</h2>"
        f"{_activity_table(console, payouts, 'payouts')}</section>"
        f"<section aria-labelledby='h-collections'><h2 id='h-collections'>Collections</h2>"
        f"{_activity_table(console, collections, 'collections')}</section>"
        f"<section aria-labelledby='h-charts'><h2 id='h-charts'>Last 24 hours, by hour (UTC)</h2>"
        f"<div class='charts'>{charts}</div></section>"
        f"<section aria-labelledby='h-waiting'><h2 id='h-waiting'>Waiting for an operator</h2>"
        f"{_waiting_table(console, o.held_for_review, o.failed_unresolved)}</section>"
        f"<section aria-labelledby='h-work'><h2 id='h-work'>Background work</h2>{work}</section>"
        f"<section aria-labelledby='h-webhooks'><h2 id='h-webhooks'>Webhook endpoints</h2>{counts}{worst}"
        "</section>"
    )
    return "Overview", content, PREFIX


def _filters(request: Request, statuses: Sequence[str]) -> dict[str, str]:
    """The list's filters as given (``currency``, ``status``, ``from``, ``to``), checked."""
    query = request.query_params
    kept = {name: (query.get(name) or "").strip() for name in ("currency", "status", "from", "to")}
    if kept["status"] and kept["status"] not in statuses:
        raise FilterError(f"Status must be one of {', '.join(statuses)}.")
    if len(kept["currency"]) > 16:
        raise FilterError("Currency must be a currency code such as XAF.")
    return {name: value for name, value in kept.items() if value}


def _described(noun: str, filters: Mapping[str, str], path: str) -> str:
    said = []
    if "status" in filters:
        said.append(f"in status <strong>{text(filters['status'])}</strong>")
    if "currency" in filters:
        said.append(f"in <strong>{text(filters['currency'])}</strong>")
    start = parse_moment(filters.get("from"), "From")
    end = parse_moment(filters.get("to"), "To")
    if start is not None:
        said.append(f"created from {moment(start)}")
    if end is not None:
        said.append(f"created before {moment(end)}")
    every = f" <a href='{path}'>Every {noun}</a>" if said else ""
    which = (" " + ", ".join(said)) if said else ""
    return f"<p class='muted'>Every merchant's {noun}{which}, oldest first.{every}</p>"


def payouts_list(console: ConsoleView, who: SignedIn, request: Request) -> tuple[str, str, str | None]:
    filters = _filters(request, [s.value for s in PayoutStatus])
    page_ = console.core.operator.payouts(
        status=filters.get("status"),
        currency=filters.get("currency"),
        created_from=parse_moment(filters.get("from"), "From"),
        created_before=parse_moment(filters.get("to"), "To"),
        limit=100,
        starting_after=request.query_params.get("after"),
    )
    names = console._names()
    rows = [
        [
            console._payout_link(item.payout.reference),
            console._merchant_cell(item.merchant_id, names),
            console._amount(item.payout.amount, item.payout.currency),
            text(item.payout.currency),
            console._status(item.payout.status),
            text(item.payout.recipient_name),
            moment(item.payout.created_at),
        ]
        for item in page_.data
    ]
    last = page_.data[-1].payout.reference if page_.data else None
    content = (
        _described("payouts", filters, f"{PREFIX}/payouts")
        + table(
            ["Reference", "Merchant", "Amount", "Currency", "Status", "Recipient name", "Created"],
            rows,
            empty="No payout.",
            numeric=(2,),
        )
        + console._more(request, page_.has_more, last, **filters)
    )
    return "Payouts", content, None


def collections_list(console: ConsoleView, who: SignedIn, request: Request) -> tuple[str, str, str | None]:
    filters = _filters(request, [s.value for s in CollectionStatus])
    page_ = console.core.operator.collections(
        status=filters.get("status"),
        currency=filters.get("currency"),
        created_from=parse_moment(filters.get("from"), "From"),
        created_before=parse_moment(filters.get("to"), "To"),
        limit=100,
        starting_after=request.query_params.get("after"),
    )
    names = console._names()
    rows = []
    for item in page_.data:
        c = item.collection
        css = {"SUCCESS": "good", "FAILED": "bad"}.get(c.status.value, "wait")
        rows.append(
            [
                f"<span class='mono'>{text(c.reference)}</span>",
                console._merchant_cell(item.merchant_id, names),
                console._amount(c.requested_amount, c.requested_currency),
                text(c.requested_currency),
                f"<span class='status {css}' data-status='{c.status.value}'>{c.status.value}</span>",
                text(c.kind.value),
                text(c.failure_category),
                moment(c.created_at),
            ]
        )
    last = page_.data[-1].collection.reference if page_.data else None
    content = (
        _described("collections", filters, f"{PREFIX}/collections")
        + table(
            ["Reference", "Merchant", "Requested", "Currency", "Status", "Kind", "Failure", "Created"],
            rows,
            empty="No collection.",
            numeric=(2,),
        )
        + console._more(request, page_.has_more, last, **filters)
    )
    return "Collections", content, None


def work_list(console: ConsoleView, who: SignedIn, request: Request) -> tuple[str, str, str | None]:
    kind = request.path_params["kind"]
    items = console.core.operator.due_work(kind, limit=100)
    names = console._names()
    rows = []
    for item in items:
        if kind == "payouts":
            shown = console._payout_link(item.key)
        elif kind == "deliveries":
            hook = f"{PREFIX}/webhooks#m-{quote(item.merchant_id)}"
            shown = f"<span class='mono'>{text(item.key)}</span><br>{_a(hook, 'endpoint')}"
        else:
            shown = f"<span class='mono'>{text(item.key)}</span>"
        rows.append(
            [
                shown,
                console._merchant_cell(item.merchant_id, names),
                text(item.state),
                moment(item.due_since),
                "—" if item.attempts is None else str(item.attempts),
            ]
        )
    label = WORK_LABELS.get(kind, kind)
    content = (
        f"<p class='muted'>{text(label)}: the items due and waiting for a worker (at most 100), in the order"
        " a worker takes them. An item a worker holds is not listed.</p>"
        + table(["Item", "Merchant", "State", "Due since", "Attempts"], rows, empty="Nothing is waiting.")
    )
    return f"Background work: {kind}", content, None
