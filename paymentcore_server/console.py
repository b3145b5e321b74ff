"""The operator's console at ``/console``: the spec's "dashboard", as server-rendered pages.

An operator (``paymentcore operator create NAME``) signs in with the token shown at creation; the
session lives in the database (``core.operator.sign_in``), so every server process on it shares it, and
its secret is an HttpOnly, SameSite=Strict cookie scoped to ``/console`` (Secure when the public URL is
https) that ends after 30 minutes unused, 12 hours after sign-in, or at "Sign out". Without a session
every page and action answers with a redirect to the sign-in page. The cookie never opens the merchant
API (which reads only ``Authorization: Bearer``), and an API key does not sign in here.

Pages, reached from the navigation: Overview (where an operator lands, ``_console_overview``), Review
queue, Failed payouts, Merchants (and each merchant's page and keys), Keys, Webhooks, Platform, Audit
log. Every state-changing request is a POST carrying the
session's CSRF token (an HMAC of the session secret); one without it, with another session's, or from
another origin answers 403 and changes nothing. An action asks for one confirmation ("Confirm"), runs
as the signed-in operator (the audit trail records the operator's id) and then shows the record's new
state. Pages run no script and load nothing from another origin (``_console_html.CSP``); every value
that came from a merchant is escaped and shown with its control characters made visible.

``console_app(core)`` is the console alone; ``create_app`` serves it beside the API through
:class:`ConsoleDispatch`, so the API's own route table (and its OpenAPI document) is unchanged.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from functools import partial
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

import attrs
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from paymentcore import (
    AuditEntry,
    BatchItem,
    ConsoleSession,
    Merchant,
    MerchantStatus,
    NotFoundError,
    OperatorBatch,
    OperatorPayout,
    Page,
    PaymentCore,
    PaymentError,
    PayoutStatus,
    RateLimitedError,
    UnauthorizedError,
    from_ms,
)
from paymentcore.references import PAYOUT_REFERENCE_PREFIX
from paymentcore_server import _console_overview as overview
from paymentcore_server._console_html import (
    HEADERS,
    ICON,
    amount,
    attr,
    button_form,
    definition_list,
    hidden_fields,
    json_block,
    moment,
    page,
    table,
    text,
    yes_no,
)

__all__ = [
    "COOKIE",
    "MAX_FORM",
    "PREFIX",
    "SIGN_IN_COOKIE",
    "Console",
    "ConsoleDispatch",
    "console_app",
    "csrf_token",
    "routes_with_console",
]

PREFIX = "/console"
COOKIE = "paymentcore_console"
#: the sign-in form's own CSRF token (double-submitted: a cookie and a field), before any session
SIGN_IN_COOKIE = "paymentcore_console_sign_in"
_SIGN_IN_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")
MAX_FORM = 64 * 1024
QUEUE_PAGE = 100
RECENT_EVENTS = 5
_CSRF_CONTEXT = b"paymentcore console: csrf"
# where a sign-in may send the operator back to: a console path, nothing else
_NEXT = re.compile(r"/console(/[A-Za-z0-9_./-]*)?(\?[A-Za-z0-9_.~=&%+-]*)?")

Form = list[tuple[str, str]]

DONE = {
    "released": "Payout released: it was handed to the network.",
    "rejected": "Payout rejected: its money is back in the merchant's available balance.",
    "resolved": "Payout resolved with the network.",
    "created": "Merchant created.",
    "approved": "Merchant approved.",
    "suspended": "Merchant suspended.",
    "payouts-on": "Payouts turned on for this merchant.",
    "payouts-off": "Payouts turned off for this merchant.",
    "fee": "Collect fee set.",
    "limits": "Payout limits set.",
    "revoked": "Key revoked: it answers 401 from its next request.",
    "rate-limit": "Rate limits set.",
    "reactivated": "Webhook endpoint reactivated.",
    "platform": "Platform switches changed.",
}


#: the form field a refused value came from, as its label shows it (a library error's ``param``)
LABELS = {
    "per-transaction": "Per payout",
    "per-day": "Per day",
    "per-week": "Per week",
    "review-threshold": "Review above",
    "collect-percent": "Collect fee",
    "per-minute": "Per minute",
    "per-hour": "Per hour",
    "currency": "Currency",
    "name": "Name",
    "scope": "Scopes",
}


def _message(error: PaymentError) -> str:
    """A refusal as the console shows it: the field at fault first, by its label."""
    label = LABELS.get(error.param or "")
    return f"{label}: {error.message}" if label is not None else error.message


def csrf_token(secret: str) -> str:
    """The CSRF token of the session whose secret this is (nothing to store: it is derived)."""
    return hmac.new(secret.encode(), _CSRF_CONTEXT, hashlib.sha256).hexdigest()


@attrs.frozen
class Signed:
    """The signed-in operator of a request."""

    session: ConsoleSession
    secret: str

    @property
    def csrf(self) -> str:
        return csrf_token(self.secret)

    @property
    def actor(self) -> str:
        return self.session.operator.id


@attrs.frozen
class Done:
    """What an action led to: a redirect to the record's page, or (a new key) a page shown once."""

    location: str | None = None
    title: str = ""
    content: str = ""


@attrs.frozen
class Plan:
    """An action, ready to be confirmed: what it does (already-rendered HTML) and how to do it."""

    title: str
    summary: str
    back: str
    perform: Callable[[str], Done]  # called with the actor
    danger: bool = False


class PageError(Exception):
    """A page or action cannot be shown (a refused form, an unknown record): shown with ``status``."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class FieldError(PageError):
    """A value typed in a form is refused: the form is shown again, with what was typed, and why."""


#: what shows a form again after a refused value: (title, content, navigation entry), as a page's
Again = Callable[["Signed", Request, "Form"], tuple[str, str, str | None]]


def _field(form: Form, name: str) -> str:
    return next((value for key, value in form if key == name), "")


def _values(form: Form, name: str) -> list[str]:
    return [value for key, value in form if key == name]


def _optional_int(form: Form, name: str, label: str) -> int | None:
    """A whole number from 1 to 1000000, or None for an empty field."""
    raw = _field(form, name).strip()
    if not raw:
        return None
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw[:9]) <= 1_000_000 or len(raw) > 7:
        raise FieldError(f"{label} must be a whole number from 1 to 1000000.")
    return int(raw)


def _safe_next(value: str | None) -> str:
    if value and _NEXT.fullmatch(value) and "//" not in value and ".." not in value:
        return value
    return PREFIX  # the overview


class Console:
    """The console's routes, bound to one core."""

    def __init__(self, core: PaymentCore) -> None:
        self.core = core
        self.secure = core.config.public_url.lower().startswith("https://")
        public = urlsplit(core.config.public_url)
        self._public_origin = f"{public.scheme}://{public.netloc}".lower() if public.netloc else None

    # --- plumbing --------------------------------------------------------------------------------

    def _html(self, body: str, status: int = 200, headers: Mapping[str, str] | None = None) -> HTMLResponse:
        return HTMLResponse(body, status, headers={**HEADERS, **(headers or {})})

    def _signed(self, request: Request) -> Signed | None:
        """The request's live session (run in a worker thread: it reads, and may write, the store)."""
        secret = request.cookies.get(COOKIE)
        if not secret:
            return None
        try:
            return Signed(self.core.operator.session(secret), secret)
        except UnauthorizedError:
            return None

    def _to_sign_in(self, request: Request, *, keep_place: bool) -> Response:
        target = f"{PREFIX}/sign-in"
        if keep_place:
            place = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            if place != PREFIX and _NEXT.fullmatch(place):
                target += "?" + urlencode({"next": place})
        response = RedirectResponse(target, status_code=303, headers=HEADERS)
        if COOKIE in request.cookies:  # an ended session: forget it
            self._forget(response)
        return response

    def _remember(self, response: Response, secret: str) -> None:
        response.set_cookie(COOKIE, secret, path=PREFIX, httponly=True, samesite="strict", secure=self.secure)

    def _forget(self, response: Response) -> None:
        response.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict", secure=self.secure)

    def _same_origin(self, request: Request) -> bool:
        """A form POST from a browser says where it came from: it must be this console's origin."""
        origin = request.headers.get("origin")
        if origin is None:  # not a browser form (curl, a test client): the CSRF token decides
            return True
        own = f"{request.url.scheme}://{request.headers.get('host', '')}".lower()
        return origin.lower() in {own, self._public_origin}

    async def _form(self, request: Request) -> Form:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > MAX_FORM:
            raise PageError("The form is too large.", 413)
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_FORM:
                raise PageError("The form is too large.", 413)
            chunks.append(chunk)
        try:
            return parse_qsl(
                b"".join(chunks).decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=64
            )
        except ValueError:
            raise PageError("The form has too many fields.") from None

    def _frame(
        self,
        who: Signed,
        title: str,
        content: str,
        *,
        current: str | None = None,
        notice: str | None = None,
        error: str | None = None,
        status: int = 200,
    ) -> HTMLResponse:
        body = page(
            title,
            content,
            operator=who.session.operator.name,
            csrf=who.csrf,
            current=current,
            notice=notice,
            error=error,
        )
        return self._html(body, status)

    def view(
        self, build: Callable[[Signed, Request], tuple[str, str, str | None]]
    ) -> Callable[[Request], Any]:
        """A GET page: signed in, or redirected to the sign-in page. ``build`` runs in a worker thread
        and answers (title, content, the navigation entry it belongs to)."""

        async def handle(request: Request) -> Response:
            def run() -> Response:
                who = self._signed(request)
                if who is None:
                    return self._to_sign_in(request, keep_place=True)
                notice = DONE.get(request.query_params.get("done", ""))
                try:
                    title, content, current = build(who, request)
                except PageError as error:
                    return self._frame(who, "Not shown", "", error=error.message, status=error.status)
                except PaymentError as error:
                    return self._frame(who, "Not shown", "", error=_message(error), status=error.http_status)
                return self._frame(who, title, content, current=current, notice=notice)

            return await run_in_threadpool(run)

        return handle

    def action(
        self, plan: Callable[[Signed, Request, Form], Plan], again: Again | None = None
    ) -> Callable[[Request], Any]:
        """A state-changing POST: signed in, same origin, the session's CSRF token; then a confirmation
        page, and on "Confirm" the action itself, as the signed-in operator.

        A value typed in the form that is refused (a :class:`FieldError`, or a library error naming a
        field of ``LABELS``), before or on "Confirm", shows the form again through ``again`` (the
        page holding it, with the values as typed) and the reason; nothing changes."""

        async def handle(request: Request) -> Response:
            try:
                form = await self._form(request)
            except PageError as error:
                return self._html(page("Refused", "", error=error.message), error.status)

            def run() -> Response:
                who = self._signed(request)
                if who is None:
                    return self._to_sign_in(request, keep_place=False)
                token = _field(form, "csrf")
                if (
                    not self._same_origin(request)
                    or not token
                    or not hmac.compare_digest(token.encode(), who.csrf.encode())
                ):
                    message = (
                        "This form did not come from your console session (its security token is missing"
                        " or wrong, or it was sent from another site). Nothing was changed."
                    )
                    return self._frame(who, "Refused", "", error=message, status=403)
                back = f"{PREFIX}/review"
                try:
                    planned = plan(who, request, form)
                    back = planned.back
                    if _field(form, "confirm") != "yes":
                        return self._frame(
                            who, planned.title, self._confirmation(who, request, form, planned)
                        )
                    done = planned.perform(who.actor)
                except PageError as error:
                    if again is not None and isinstance(error, FieldError):
                        return self._again(who, request, form, again, error.message, error.status)
                    return self._frame(who, "Not done", _back(back), error=error.message, status=error.status)
                except PaymentError as error:
                    if again is not None and error.param in LABELS:
                        return self._again(who, request, form, again, _message(error), error.http_status)
                    return self._frame(
                        who, "Not done", _back(back), error=_message(error), status=error.http_status
                    )
                if done.location is not None:
                    return RedirectResponse(done.location, status_code=303, headers=HEADERS)
                return self._frame(who, done.title, done.content)

            return await run_in_threadpool(run)

        return handle

    def _again(
        self, who: Signed, request: Request, form: Form, again: Again, message: str, status: int
    ) -> Response:
        """The form a refused value came from, shown again with the values as typed and the reason."""
        try:
            title, content, current = again(who, request, form)
        except (PageError, PaymentError):  # the record itself is gone: say only why
            return self._frame(who, "Not done", "", error=message, status=status)
        return self._frame(who, title, content, current=current, error=message, status=status)

    @staticmethod
    def _confirmation(who: Signed, request: Request, form: Form, planned: Plan) -> str:
        kept = [(name, value) for name, value in form if name not in ("csrf", "confirm")]
        css = "danger" if planned.danger else ""
        klass = f" class='{css}'" if css else ""
        return (
            f"<div class='card'>{planned.summary}</div>"
            f"<form method='post' action=\"{attr(request.url.path)}\" class='inline'>"
            f"{hidden_fields([('csrf', who.csrf), *kept, ('confirm', 'yes')])}"
            f"<button type='submit'{klass}>Confirm</button></form>"
            f' <a href="{attr(planned.back)}">Cancel</a>'
        )

    # --- names, amounts ----------------------------------------------------------------------------

    def _names(self) -> dict[str, str]:
        return {merchant.id: merchant.name for merchant in self.core.operator.list_merchants()}

    def _amount(self, value: Decimal, currency: str) -> str:
        known = self.core.catalogue.currencies.get(currency)
        return amount(value, known.decimals if known is not None else 0)

    def _merchant_cell(self, merchant_id: str, names: Mapping[str, str]) -> str:
        return (
            f'<a href="{attr(PREFIX + "/merchants/" + quote(merchant_id))}">'
            f"{text(names.get(merchant_id))}</a>"
            f"<br><span class='muted mono'>{text(merchant_id)}</span>"
        )

    def _payout_link(self, reference: str) -> str:
        return (
            f"<a class='mono' href=\"{attr(PREFIX + '/payouts/' + quote(reference))}\">{text(reference)}</a>"
        )

    @staticmethod
    def _status(status: PayoutStatus) -> str:
        css = {
            PayoutStatus.PAID: "good",
            PayoutStatus.FAILED: "bad",
            PayoutStatus.REJECTED: "bad",
            PayoutStatus.PENDING: "wait",
            PayoutStatus.SENT: "wait",
        }[status]
        return f"<span class='status {css}' data-status='{status.value}'>{status.value}</span>"

    # --- sign-in and sign-out ----------------------------------------------------------------------

    def _sign_in_page(
        self,
        request: Request,
        next_: str,
        error: str | None = None,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """The sign-in form, with its own CSRF token: a random value both in a hidden field and in a
        short-lived cookie (``SIGN_IN_COOKIE``), which the POST must carry alike (there is no session
        yet to derive a token from)."""
        token = request.cookies.get(SIGN_IN_COOKIE) or ""
        if not _SIGN_IN_TOKEN.fullmatch(token):
            token = secrets.token_urlsafe(32)
        content = (
            "<div class='card signin'>"
            f"<form method='post' action='{PREFIX}/sign-in'>"
            f"{hidden_fields([('csrf', token), ('next', _safe_next(next_))])}"
            "<label for='token'>Token</label>"
            "<input id='token' name='token' type='password' autocomplete='off' required autofocus>"
            "<p class='muted'>The sign-in token printed by <code>paymentcore operator create</code>.</p>"
            "<button type='submit'>Sign in</button></form></div>"
        )
        response = self._html(page("Sign in", content, error=error), status, headers)
        response.set_cookie(
            SIGN_IN_COOKIE,
            token,
            max_age=3600,
            path=f"{PREFIX}/sign-in",
            httponly=True,
            samesite="strict",
            secure=self.secure,
        )
        return response

    async def sign_in_form(self, request: Request) -> Response:
        who = await run_in_threadpool(self._signed, request)
        if who is not None:
            return RedirectResponse(_safe_next(request.query_params.get("next")), 303, headers=HEADERS)
        return self._sign_in_page(request, request.query_params.get("next") or "")

    async def sign_in(self, request: Request) -> Response:
        try:
            form = await self._form(request)
        except PageError as error:
            return self._html(page("Refused", "", error=error.message), error.status)
        next_ = _safe_next(_field(form, "next"))
        expected = request.cookies.get(SIGN_IN_COOKIE) or ""
        sent = _field(form, "csrf")
        if (
            not self._same_origin(request)
            or not _SIGN_IN_TOKEN.fullmatch(expected)
            or not hmac.compare_digest(sent.encode(), expected.encode())
        ):
            refused = "Sign in from the console's own sign-in page (this form has expired). Try again."
            return self._sign_in_page(request, next_, refused, 403)
        client = request.client.host if request.client is not None else None
        try:
            signed = await run_in_threadpool(
                partial(self.core.operator.sign_in, _field(form, "token").strip(), client=client)
            )
        except UnauthorizedError as error:
            return self._sign_in_page(request, next_, error.message, 401)
        except RateLimitedError as error:  # too many failed sign-ins: the token was not looked at
            return self._sign_in_page(
                request, next_, error.message, 429, headers={"Retry-After": str(error.retry_after)}
            )
        response = RedirectResponse(next_, status_code=303, headers=HEADERS)
        self._remember(response, signed.secret)
        response.delete_cookie(
            SIGN_IN_COOKIE, path=f"{PREFIX}/sign-in", httponly=True, samesite="strict", secure=self.secure
        )
        return response

    async def sign_out(self, request: Request) -> Response:
        try:
            form = await self._form(request)
        except PageError as error:
            return self._html(page("Refused", "", error=error.message), error.status)

        def run() -> Response:
            who = self._signed(request)
            if who is None:
                return self._to_sign_in(request, keep_place=False)
            token = _field(form, "csrf")
            if not self._same_origin(request) or not hmac.compare_digest(token.encode(), who.csrf.encode()):
                message = "This form did not come from your console session. You are still signed in."
                return self._frame(who, "Refused", "", error=message, status=403)
            self.core.operator.sign_out(who.secret)
            response = self._html(
                page(
                    "Signed out", f"<p>You are signed out. <a href='{PREFIX}/sign-in'>Sign in again</a>.</p>"
                )
            )
            self._forget(response)
            return response

        return await run_in_threadpool(run)

    # --- the overview and the lists behind its figures (paymentcore_server._console_overview) -------

    def overview(self, who: Signed, request: Request) -> tuple[str, str, str | None]:
        return overview.overview_page(self, who, request)

    def payouts_list(self, who: Signed, request: Request) -> tuple[str, str, str | None]:
        try:
            return overview.payouts_list(self, who, request)
        except overview.FilterError as error:
            raise PageError(str(error)) from None

    def collections_list(self, who: Signed, request: Request) -> tuple[str, str, str | None]:
        try:
            return overview.collections_list(self, who, request)
        except overview.FilterError as error:
            raise PageError(str(error)) from None

    def work_list(self, who: Signed, request: Request) -> tuple[str, str, str | None]:
        return overview.work_list(self, who, request)

    async def icon(self, request: Request) -> Response:
        return Response(ICON, media_type="image/svg+xml", headers={"Cache-Control": "public, max-age=86400"})

    # --- the work queues ---------------------------------------------------------------------------

    @staticmethod
    def _payout_actions(item: OperatorPayout, who: Signed) -> list[str]:
        """The buttons of the actions the payout's guards allow now (the service refuses the others)."""
        base = f"{PREFIX}/payouts/{quote(item.payout.reference)}"
        actions = []
        if item.can_release:
            actions.append(button_form(f"{base}/release", "Release", who.csrf))
        if item.can_reject:
            actions.append(button_form(f"{base}/reject", "Reject", who.csrf, css="danger"))
        if item.can_resolve:
            actions.append(button_form(f"{base}/resolve", "Resolve", who.csrf))
        return actions

    def _queue_rows(
        self, items: Sequence[OperatorPayout], names: Mapping[str, str], who: Signed, *, failed: bool
    ) -> Iterator[list[str]]:
        for item in items:
            p = item.payout
            actions = "".join(self._payout_actions(item, who))
            if failed:
                tail = [text(p.status_reason), moment(item.updated_at)]
            else:
                tail = [text(p.merchant_reference), moment(p.created_at)]
            yield [
                self._payout_link(p.reference),
                self._merchant_cell(item.merchant_id, names),
                self._amount(p.amount, p.currency),
                text(p.currency),
                text(p.recipient_name),
                f"<span class='mono nowrap'>{text(p.phone)}</span>",
                *tail,
                f"<span class='actions'>{actions}</span>",
            ]

    def _more(self, request: Request, has_more: bool, last: str | None, **keep: str) -> str:
        if not has_more or last is None:
            return ""
        query = urlencode({**{k: v for k, v in keep.items() if v}, "after": last})
        return f"<p class='more'><a href=\"{attr(request.url.path + '?' + query)}\">Next page</a></p>"

    def _queue_page(
        self,
        who: Signed,
        request: Request,
        queue: Page[OperatorPayout],
        *,
        intro: str,
        last_columns: tuple[str, str],
        failed: bool,
        empty: str,
    ) -> str:
        """A work queue: what it is, its table (the last two columns differ) and the next page's link."""
        columns = ["Reference", "Merchant", "Amount", "Currency", "Recipient name", "Phone", *last_columns]
        last = queue.data[-1].payout.reference if queue.data else None
        return (
            f"<p class='muted'>{intro}</p>"
            + table(
                [*columns, "Actions"],
                self._queue_rows(queue.data, self._names(), who, failed=failed),
                empty=empty,
                numeric=(2,),
            )
            + self._more(request, queue.has_more, last, currency=request.query_params.get("currency") or "")
        )

    def review(self, who: Signed, request: Request) -> tuple[str, str, str | None]:
        queue = self.core.operator.payouts(
            awaiting_review=True,
            currency=request.query_params.get("currency") or None,
            limit=QUEUE_PAGE,
            starting_after=request.query_params.get("after"),
        )
        content = self._queue_page(
            who,
            request,
            queue,
            intro="Payouts above their merchant's review threshold, oldest first. Release sends one to the"
            " network; Reject returns its money to the merchant's balance.",
            last_columns=("Merchant reference", "Created"),
            failed=False,
            empty="No payout is waiting for review.",
        )
        return "Review queue", content, f"{PREFIX}/review"

    def failed(self, who: Signed, request: Request) -> tuple[str, str, str | None]:
        queue = self.core.operator.payouts(
            status=PayoutStatus.FAILED,
            unresolved=True,
            currency=request.query_params.get("currency") or None,
            limit=QUEUE_PAGE,
            starting_after=request.query_params.get("after"),
        )
        content = self._queue_page(
            who,
            request,
            queue,
            intro="Payouts the network did not complete, whose money is still reserved, oldest first."
            " Resolve asks the network whether the money moved: the payout becomes PAID if it did,"
            " otherwise its money returns to the merchant's balance.",
            last_columns=("Status reason", "Failed"),
            failed=True,
            empty="No failed payout is waiting for resolution.",
        )
        return "Failed payouts", content, f"{PREFIX}/failed"

    def payout_page(self, who: Signed, request: Request) -> tuple[str, str, str | None]:
        item = self.core.operator.payout(request.path_params["reference"])
        p = item.payout
        names = self._names()
        actions = self._payout_actions(item, who)
        details = definition_list(
            {
                "Reference": f"<span class='mono' id='reference'>{text(p.reference)}</span>",
                "Status": f"<span id='status'>{self._status(p.status)}</span>",
                "Merchant": self._merchant_cell(item.merchant_id, names),
                "Amount": f"{self._amount(p.amount, p.currency)} {text(p.currency)}",
                "Recipient name": text(p.recipient_name),
                "Phone": f"<span class='mono nowrap'>{text(p.phone)}</span>",
                "Merchant reference": text(p.merchant_reference),
                "Provider reference": text(p.provider_reference),
                "Awaiting review": "yes" if p.awaiting_review else "no",
                "Status reason": f"<span id='status-reason'>{text(p.status_reason)}</span>",
                "Resolution": text(item.resolution),
                "Created": moment(p.created_at),
                "Updated": moment(item.updated_at),
                "Batch": text(None) if item.batch_id is None else self._batch_link(item.batch_id),
            }
        )
        content = f"<div class='card'>{details}</div>"
        if actions:
            content += f"<p class='actions'>{''.join(actions)}</p>"
        content += "<h2>Audit log of this payout</h2>" + self._audit_table(
            self.core.operator.audit_log(record=p.reference, limit=50).data, who
        )
        current = f"{PREFIX}/review" if p.awaiting_review else None
        return f"Payout {p.reference}", content, current

    # --- bulk payout requests ------------------------------------------------------------------------

    def _batch_link(self, batch_id: str) -> str:
        return (
            f"<a class='mono' id='batch' href=\"{attr(PREFIX + '/batches/' + quote(batch_id))}\">"
            f"{text(batch_id)}</a>"
        )

    def _batch_item_row(self, item: BatchItem) -> list[str]:
        if item.payout is not None:
            outcome = self._status(item.payout.status) + (
                " <span class='muted'>held for review</span>" if item.payout.awaiting_review else ""
            )
            return [
                str(item.index),
                text(item.merchant_reference),
                self._payout_link(item.payout.reference),
                outcome,
            ]
        error = item.error
        refused = "<span class='status bad'>REFUSED</span>"
        if error is not None:
            refused += f" <span class='mono'>{text(error.code)}</span> {text(error.message)}"
        return [str(item.index), text(item.merchant_reference), text(None), refused]

    def _progress(self, seen: OperatorBatch) -> str:
        """Per currency, a bar per payout status: how many of the accepted items are in it now."""
        b = seen.batch
        parts = []
        for total in b.totals:
            rows = []
            for row in b.progress:
                if row.currency != total.currency:
                    continue
                label = f"{row.status.value}: {row.count} of {total.count}"
                bar = (
                    f"<progress value='{row.count}' max='{max(total.count, 1)}'"
                    f' aria-label="{attr(label)}">{row.count} of {total.count}</progress>'
                )
                rows.append(
                    [
                        self._status(row.status),
                        bar,
                        f"{row.count} of {total.count}",
                        f"{self._amount(row.amount, row.currency)} {text(row.currency)}",
                    ]
                )
            parts.append(
                f"<h3>{text(total.currency)}: {total.count} payouts,"
                f" {self._amount(total.amount, total.currency)} {text(total.currency)}</h3>"
                + table(["Status", "Progress", "Payouts", "Amount"], rows, empty="No payout.", numeric=(3,))
            )
        return "".join(parts) or "<p class='muted'>No item was accepted: the batch created no payout.</p>"

    def batch_page(self, who: Signed, request: Request) -> tuple[str, str, str | None]:
        after = request.query_params.get("after")
        if after is not None and (not after.isascii() or not after.isdigit() or len(after) > 7):
            raise PageError("The page asked for is not a place in this batch.")
        seen = self.core.disburse.inspect_bulk(
            request.path_params["batch"],
            limit=QUEUE_PAGE,
            starting_after=None if after is None else int(after),
        )
        b = seen.batch
        details = definition_list(
            {
                "Batch": f"<span class='mono' id='batch'>{text(b.id)}</span>",
                "Status": f"<span class='status {'good' if b.completed_at else 'wait'}' id='batch-status'"
                f" data-status='{b.status.value}'>{b.status.value}</span>",
                "Merchant": self._merchant_cell(seen.merchant_id, self._names()),
                "Mode": "all or none" if b.mode.value == "all" else "each item on its own",
                "Items": f"{b.item_count}: {b.accepted} accepted, {b.refused} refused",
                "Created": moment(b.created_at),
                "Completed": text(None) if b.completed_at is None else moment(b.completed_at),
            }
        )
        last = str(b.items[-1].index) if b.items else None
        content = (
            f"<div class='card'>{details}</div><h2>Progress</h2>{self._progress(seen)}"
            "<h2>Items</h2><p class='muted'>In the order of the request.</p>"
            + table(
                ["#", "Merchant reference", "Payout", "Outcome"],
                (self._batch_item_row(item) for item in b.items),
                empty="No item on this page.",
                numeric=(0,),
            )
            + self._more(request, b.has_more, last)
        )
        return f"Batch {b.id}", content, None

    def plan_payout(self, who: Signed, request: Request, form: Form) -> Plan:
        reference = request.path_params["reference"]
        verb = request.path_params["verb"]
        item = self.core.operator.payout(reference)
        p = item.payout
        names = self._names()
        summary = definition_list(
            {
                "Payout": f"<span class='mono'>{text(p.reference)}</span>",
                "Status": self._status(p.status),
                "Merchant": text(names.get(item.merchant_id)),
                "Amount": f"{self._amount(p.amount, p.currency)} {text(p.currency)}",
                "Recipient name": text(p.recipient_name),
                "Phone": text(p.phone),
                "Merchant reference": text(p.merchant_reference),
            }
        )
        page_url = f"{PREFIX}/payouts/{quote(reference)}"
        disburse = self.core.disburse
        if verb == "release":
            return Plan(
                title=f"Release payout {reference}?",
                summary=summary
                + "<p>Released, it goes to the network at once and cannot be called back.</p>",
                back=f"{PREFIX}/review",
                perform=lambda actor: _then(
                    disburse.release(reference, actor=actor), f"{page_url}?done=released"
                ),
            )
        if verb == "reject":
            return Plan(
                title=f"Reject payout {reference}?",
                summary=summary + "<p>Rejected, it becomes REJECTED and its money returns to the merchant's"
                " available balance.</p>",
                back=f"{PREFIX}/review",
                perform=lambda actor: _then(
                    disburse.reject(reference, actor=actor), f"{page_url}?done=rejected"
                ),
                danger=True,
            )
        if verb == "resolve":
            return Plan(
                title=f"Resolve payout {reference}?",
                summary=summary + "<p>The network is asked whether this payout's money moved: if it did the"
                " payout becomes PAID, if not its money returns to the merchant's balance. Once only.</p>",
                back=f"{PREFIX}/failed",
                perform=lambda actor: _then(
                    disburse.resolve(reference, actor=actor), f"{page_url}?done=resolved"
                ),
            )
        raise PageError("No such action.", 404)

    # --- merchants ---------------------------------------------------------------------------------

    def _balances_text(self, merchant_id: str) -> str:
        balances = self.core.operator.balances(merchant_id)
        if not balances:
            return "<span class='muted'>none yet</span>"
        return "<br>".join(
            f"{text(b.currency)} {self._amount(b.available, b.currency)}"
            f" <span class='muted'>({self._amount(b.reserved, b.currency)} reserved)</span>"
            for b in balances
        )

    def merchants(self, who: Signed, request: Request) -> tuple[str, str, str | None]:
        rows = []
        for m in self.core.operator.list_merchants():
            base = f"{PREFIX}/merchants/{quote(m.id)}"
            rows.append(
                [
                    f'<a href="{attr(base)}">{text(m.name)}</a>'
                    f"<br><span class='muted mono'>{text(m.id)}</span>",
                    self._merchant_status(m),
                    yes_no(m.payouts_enabled),
                    f"{Decimal(m.collect_fee_ppm) / Decimal(10_000)} %",
                    self._balances_text(m.id),
                    f'<a href="{attr(base + "/keys")}">API keys</a>',
                ]
            )
        currencies = "".join(
            f'<option value="{attr(c.code)}"{" selected" if c.code == "XAF" else ""}>{text(c.code)}</option>'
            for c in self.core.catalogue.currencies.values()
            if not c.checkout_only
        )
        create = (
            "<h2>New merchant</h2><div class='card'>"
            f"<form method='post' action='{PREFIX}/merchants'>{hidden_fields([('csrf', who.csrf)])}"
            "<div class='fields'><div><label for='new-name'>Name</label>"
            "<input id='new-name' name='name' type='text' maxlength='120' required></div>"
            "<div><label for='new-currency'>Settlement currency</label>"
            f"<select id='new-currency' name='settlement_currency'>{currencies}</select></div>"
            "<div><label class='check'><input type='checkbox' name='approved' value='yes' checked>"
            " Approved</label></div>"
            "<div><button type='submit'>Create merchant</button></div></div></form></div>"
        )
        content = (
            table(
                ["Merchant", "Status", "Payouts", "Collect fee", "Balances (available)", ""],
                rows,
                empty="No merchant yet.",
            )
            + create
        )
        return "Merchants", content, f"{PREFIX}/merchants"

    @staticmethod
    def _merchant_status(m: Merchant) -> str:
        css = "good" if m.status is MerchantStatus.APPROVED else "bad"
        return f"<span class='status {css}'>{m.status.value}</span>"

    def merchant_page(
        self, who: Signed, request: Request, typed: Form | None = None
    ) -> tuple[str, str, str | None]:
        """A merchant's page; ``typed``: a refused fee or limits form, shown again as typed."""
        op = self.core.operator
        m = op.get_merchant(request.path_params["merchant"])
        base = f"{PREFIX}/merchants/{quote(m.id)}"
        verb = request.path_params.get("verb") if typed is not None else None
        switches = []
        if m.status is MerchantStatus.APPROVED:
            switches.append(button_form(f"{base}/suspend", "Suspend", who.csrf, css="danger"))
        else:
            switches.append(button_form(f"{base}/approve", "Approve", who.csrf))
        if m.payouts_enabled:
            switches.append(button_form(f"{base}/payouts-off", "Turn payouts off", who.csrf, css="danger"))
        else:
            switches.append(button_form(f"{base}/payouts-on", "Turn payouts on", who.csrf))
        fee = Decimal(m.collect_fee_ppm) / Decimal(10_000)
        account = definition_list(
            {
                "Name": text(m.name),
                "Merchant id": f"<span class='mono'>{text(m.id)}</span>",
                "Status": self._merchant_status(m),
                "Payouts": yes_no(m.payouts_enabled),
                "Settlement currency": text(m.settlement_currency),
                "Collect fee": f"{fee} %",
                "Blocked providers": text(", ".join(sorted(m.blocked_providers)), empty="none"),
                "Created": moment(from_ms(m.created_at)),
            }
        )
        fee_value = _field(typed, "percent") if typed is not None and verb == "fee" else fee
        fee_form = (
            f"<form method='post' action=\"{attr(base + '/fee')}\">{hidden_fields([('csrf', who.csrf)])}"
            "<div class='fields'><div><label for='fee'>Collect fee (percent)</label>"
            f"<input id='fee' name='percent' type='text' inputmode='decimal' value=\"{attr(fee_value)}\">"
            "</div><div><button type='submit'>Set fee</button></div></div></form>"
        )
        balances = table(
            ["Currency", "Available", "Reserved"],
            (
                [
                    text(b.currency),
                    self._amount(b.available, b.currency),
                    self._amount(b.reserved, b.currency),
                ]
                for b in op.balances(m.id)
            ),
            empty="No balance yet.",
            numeric=(1, 2),
        )
        if typed is not None and verb == "limits":
            limits = self._limits(m, who, _field(typed, "currency"), typed)
        else:
            limits = self._limits(m, who, request.query_params.get("limits"))
        content = (
            f"<div class='card'>{account}<p class='actions'>{''.join(switches)}</p>{fee_form}</div>"
            f'<p><a href="{attr(base + "/keys")}">Keys of this merchant</a> · '
            f'<a href="{attr(PREFIX + "/webhooks#m-" + m.id)}">Webhook</a> · '
            f'<a href="{attr(PREFIX + "/audit?" + urlencode({"record": m.id}))}">Audit log</a></p>'
            f"<h2>Balances</h2>{balances}"
            f"<h2>Payout limits</h2>{limits}"
        )
        return m.name, content, f"{PREFIX}/merchants"

    def _limits(self, m: Merchant, who: Signed, editing: str | None, typed: Form | None = None) -> str:
        """The limits of each currency, and the form for one (``typed``: as typed, refused)."""
        rows = []
        settleable = [c for c in self.core.catalogue.currencies.values() if not c.checkout_only]
        chosen = next((c for c in settleable if c.code == editing), None) or next(
            (c for c in settleable if c.code == m.settlement_currency), settleable[0]
        )
        shown: dict[str, Any] = {}
        base = f"{PREFIX}/merchants/{quote(m.id)}"

        def show(value: Decimal | None, code: str) -> str:
            return "<span class='muted'>none</span>" if value is None else self._amount(value, code)

        for c in settleable:
            allowance = self.core.disburse.limits(m.id, c.code)
            if c.code == chosen.code:
                shown = {
                    "per_transaction": allowance.per_transaction,
                    "per_day": allowance.per_day,
                    "per_week": allowance.per_week,
                    "review_threshold": allowance.review_threshold,
                }
            state = (
                yes_no(True, yes="enabled")
                if allowance.enabled
                else f"<span class='status bad'>{text(allowance.blocked_by)}</span>"
            )
            rows.append(
                [
                    text(c.code),
                    state,
                    show(allowance.per_transaction, c.code),
                    show(allowance.per_day, c.code),
                    show(allowance.per_week, c.code),
                    show(allowance.review_threshold, c.code),
                    show(allowance.spent_today, c.code),
                    f'<a href="{attr(base + "?" + urlencode({"limits": c.code}) + "#limits")}">Edit</a>',
                ]
            )
        grid = table(
            ["Currency", "Payouts", "Per payout", "Per day", "Per week", "Review above", "Spent today", ""],
            rows,
            empty="No currency.",
            numeric=(2, 3, 4, 5, 6),
        )
        if typed is not None:
            shown = {name: _field(typed, name) for name in shown}
        inputs = "".join(
            f"<div><label for='lim-{name}'>{label}</label><input id='lim-{name}' name='{name}' type='text'"
            f" inputmode='decimal' value=\"{attr('' if shown.get(name) is None else shown[name])}\"></div>"
            for name, label in (
                ("per_transaction", "Per payout"),
                ("per_day", "Per day"),
                ("per_week", "Per week"),
                ("review_threshold", "Review above"),
            )
        )
        form = (
            f"<div class='card' id='limits'><form method='post' action=\"{attr(base + '/limits')}\">"
            f"{hidden_fields([('csrf', who.csrf), ('currency', chosen.code)])}"
            f"<p>Limits in <strong>{text(chosen.code)}</strong>; an empty field means none (a payout's"
            " ceiling then returns to the currency's maximum).</p>"
            f"<div class='fields'>{inputs}<div><button type='submit'>Set limits</button></div></div>"
            "</form></div>"
        )
        return grid + form

    def plan_merchant(self, who: Signed, request: Request, form: Form) -> Plan:
        op = self.core.operator
        m = op.get_merchant(request.path_params["merchant"])
        verb = request.path_params["verb"]
        if verb == "keys":
            return self._plan_new_key(m, form)
        page_url = f"{PREFIX}/merchants/{quote(m.id)}"
        head = definition_list(
            {
                "Merchant": f"{text(m.name)} <span class='muted mono'>{text(m.id)}</span>",
                "Status": self._merchant_status(m),
                "Payouts": yes_no(m.payouts_enabled),
            }
        )
        mid = m.id
        if verb == "approve":
            return Plan(
                f"Approve {m.name}?",
                head + "<p>Approved, the merchant may collect and pay out.</p>",
                page_url,
                lambda actor: _then(op.approve_merchant(mid, actor=actor), f"{page_url}?done=approved"),
            )
        if verb == "suspend":
            return Plan(
                f"Suspend {m.name}?",
                head + "<p>Suspended, the merchant's charges, checkouts and payouts are refused"
                " (MERCHANT_NOT_APPROVED); reads keep working.</p>",
                page_url,
                lambda actor: _then(op.suspend_merchant(mid, actor=actor), f"{page_url}?done=suspended"),
                danger=True,
            )
        if verb in ("payouts-on", "payouts-off"):
            on = verb == "payouts-on"
            return Plan(
                f"Turn payouts {'on' if on else 'off'} for {m.name}?",
                head
                + (
                    "<p>The merchant may pay out again.</p>"
                    if on
                    else "<p>The merchant's payouts are refused (PAYOUTS_NOT_CONFIGURED, blockedBy"
                    " ACCOUNT_DISABLED) until turned on again.</p>"
                ),
                page_url,
                lambda actor: _then(op.set_merchant_payouts(mid, on, actor=actor), f"{page_url}?done={verb}"),
                danger=not on,
            )
        if verb == "fee":
            percent = _field(form, "percent").strip()
            shown = op.check_collect_fee(percent)  # a refused value: the form again, before Confirm
            return Plan(
                f"Set the collect fee of {m.name}?",
                head + f"<p>New platform fee on each collection: <strong>{text(shown)} %</strong>.</p>",
                page_url,
                lambda actor: _then(op.set_collect_fee(mid, percent, actor=actor), f"{page_url}?done=fee"),
            )
        if verb == "limits":
            currency = _field(form, "currency")
            values = {
                name: (_field(form, name).strip() or None)
                for name in ("per_transaction", "per_day", "per_week", "review_threshold")
            }
            checked = op.check_limits(currency, **values)  # a refused value: the form again
            listed = definition_list(
                {
                    label: text(checked[name], empty="none")
                    for name, label in (
                        ("per_transaction", "Per payout"),
                        ("per_day", "Per day"),
                        ("per_week", "Per week"),
                        ("review_threshold", "Review above"),
                    )
                }
            )
            return Plan(
                f"Set the {currency} payout limits of {m.name}?",
                head + f"<h2>New limits in {text(currency)}</h2>{listed}",
                page_url,
                lambda actor: _then(
                    op.set_limits(mid, currency, actor=actor, **values),
                    f"{page_url}?{urlencode({'done': 'limits', 'limits': currency})}",
                ),
            )
        raise PageError("No such action.", 404)

    def plan_new_merchant(self, who: Signed, request: Request, form: Form) -> Plan:
        op = self.core.operator
        name = _field(form, "name").strip()
        currency = _field(form, "settlement_currency") or "XAF"
        approved = _field(form, "approved") == "yes"
        summary = definition_list(
            {
                "Name": text(name),
                "Settlement currency": text(currency),
                "Approved": "yes" if approved else "no",
            }
        )

        def perform(actor: str) -> Done:
            created = op.create_merchant(name, settlement_currency=currency, approved=approved, actor=actor)
            return Done(location=f"{PREFIX}/merchants/{quote(created.id)}?done=created")

        return Plan(f"Create the merchant {name}?", summary, f"{PREFIX}/merchants", perform)

    # --- keys --------------------------------------------------------------------------------------

    def keys_index(self, who: Signed, request: Request) -> tuple[str, str, str | None]:
        rows = []
        for m in self.core.operator.list_merchants():
            keys = self.core.operator.keys(m.id)
            active = sum(1 for k in keys if not k.revoked)
            rows.append(
                [
                    f'<a href="{attr(PREFIX + "/merchants/" + quote(m.id) + "/keys")}">{text(m.name)}</a>',
                    f"<span class='mono'>{text(m.id)}</span>",
                    str(active),
                    str(len(keys) - active),
                ]
            )
        content = "<p class='muted'>Choose a merchant to create, revoke or limit its API keys.</p>" + table(
            ["Merchant", "Merchant id", "Active keys", "Revoked keys"],
            rows,
            empty="No merchant yet.",
            numeric=(2, 3),
        )
        return "Keys", content, f"{PREFIX}/keys"

    def merchant_keys(self, who: Signed, request: Request) -> tuple[str, str, str | None]:
        return self._keys_page(who, request.path_params["merchant"])

    def _keys_page(
        self, who: Signed, merchant_id: str, typed: Form | None = None, typed_key: str | None = None
    ) -> tuple[str, str, str | None]:
        """A merchant's keys; ``typed``: a refused form shown again as typed, the rate limits of the key
        ``typed_key``, or (without it) the new key's."""
        op = self.core.operator
        m = op.get_merchant(merchant_id)
        rows = []
        for k in op.keys(m.id):
            base = f"{PREFIX}/keys/{quote(k.id)}"
            minute, hour = str(k.per_minute), str(k.per_hour)
            if typed is not None and k.id == typed_key:
                minute, hour = _field(typed, "per_minute"), _field(typed, "per_hour")
            if k.revoked:
                actions = "<span class='muted'>revoked</span>"
            else:
                actions = (
                    f"<form method='post' action=\"{attr(base + '/rate-limit')}\" class='inline'>"
                    f"{hidden_fields([('csrf', who.csrf)])}"
                    "<label class='check'>Per minute <input class='small' type='number' min='1'"
                    " max='1000000' name='per_minute'"
                    f" value=\"{attr(minute)}\" aria-label='Per minute for {attr(k.id)}'></label>"
                    "<label class='check'>Per hour <input class='small' type='number' min='1'"
                    " max='1000000' name='per_hour'"
                    f" value=\"{attr(hour)}\" aria-label='Per hour for {attr(k.id)}'></label>"
                    "<button type='submit' class='plain'>Set rate limits</button></form>"
                    + button_form(f"{base}/revoke", "Revoke", who.csrf, css="danger")
                )
            rows.append(
                [
                    f"<span class='mono nowrap'>{text(k.id)}</span>",
                    text(", ".join(sorted(s.value for s in k.scopes))),
                    str(k.per_minute),
                    str(k.per_hour),
                    yes_no(not k.revoked, yes="active", no="revoked"),
                    f"<span class='actions'>{actions}</span>",
                ]
            )
        config = self.core.config
        new = typed if typed is not None and typed_key is None else []
        scopes = _values(new, "scope")

        def check(scope: str) -> str:
            return " checked" if scope in scopes else ""

        create = (
            "<h2>New key</h2><div class='card'>"
            f"<form method='post' action=\"{attr(PREFIX + '/merchants/' + quote(m.id) + '/keys')}\">"
            f"{hidden_fields([('csrf', who.csrf)])}"
            "<p>Scopes cannot be changed later. The key is shown once, right after it is created.</p>"
            f"<label class='check'><input type='checkbox' name='scope' value='collect'{check('collect')}>"
            " Collect</label>"
            f"<label class='check'><input type='checkbox' name='scope' value='disburse'{check('disburse')}>"
            " Disburse</label>"
            "<div class='fields'><div><label for='key-minute'>Per minute</label>"
            f"<input id='key-minute' name='per_minute' type='number' min='1' max='1000000'"
            f" placeholder='{config.default_per_minute}' value=\"{attr(_field(new, 'per_minute'))}\"></div>"
            "<div><label for='key-hour'>Per hour</label>"
            f"<input id='key-hour' name='per_hour' type='number' min='1' max='1000000'"
            f" placeholder='{config.default_per_hour}' value=\"{attr(_field(new, 'per_hour'))}\"></div>"
            "<div><button type='submit'>Create key</button></div></div></form></div>"
        )
        content = (
            f'<p><a href="{attr(PREFIX + "/merchants/" + quote(m.id))}">{text(m.name)}</a>'
            f" <span class='muted mono'>{text(m.id)}</span></p>"
            + table(
                ["Key id", "Scopes", "Per minute", "Per hour", "Status", "Actions"],
                rows,
                empty="This merchant has no key yet.",
                numeric=(2, 3),
            )
            + create
        )
        return f"Keys of {m.name}", content, f"{PREFIX}/keys"

    def _plan_new_key(self, m: Merchant, form: Form) -> Plan:
        op = self.core.operator
        scopes = _values(form, "scope")
        per_minute = _optional_int(form, "per_minute", "Per minute")
        per_hour = _optional_int(form, "per_hour", "Per hour")
        if not scopes:
            raise FieldError("Choose at least one scope: Collect, Disburse or both.")
        keys_url = f"{PREFIX}/merchants/{quote(m.id)}/keys"
        config = self.core.config
        summary = definition_list(
            {
                "Merchant": f"{text(m.name)} <span class='muted mono'>{text(m.id)}</span>",
                "Scopes": text(", ".join(sorted(set(scopes)))),
                "Per minute": str(per_minute if per_minute is not None else config.default_per_minute),
                "Per hour": str(per_hour if per_hour is not None else config.default_per_hour),
            }
        )
        mid = m.id

        def perform(actor: str) -> Done:
            created = op.create_key(mid, scopes, per_minute=per_minute, per_hour=per_hour, actor=actor)
            content = (
                "<div class='card'><p><strong>Copy this key now: it is shown only this once.</strong></p>"
                f"<p class='secret' id='api-key'>{text(created.api_key)}</p>"
                + definition_list(
                    {
                        "Key id": f"<span class='mono'>{text(created.key.id)}</span>",
                        "Scopes": text(", ".join(sorted(s.value for s in created.key.scopes))),
                        "Per minute": str(created.key.per_minute),
                        "Per hour": str(created.key.per_hour),
                    }
                )
                + f'</div><p><a href="{attr(keys_url)}">Back to the keys of {text(m.name)}</a></p>'
            )
            return Done(title="Key created", content=content)

        return Plan(f"Create a key for {m.name}?", summary, keys_url, perform)

    def plan_key(self, who: Signed, request: Request, form: Form) -> Plan:
        op = self.core.operator
        key = op.get_key(request.path_params["key"])
        verb = request.path_params["verb"]
        keys_url = f"{PREFIX}/merchants/{quote(key.merchant_id)}/keys"
        summary = definition_list(
            {
                "Key id": f"<span class='mono'>{text(key.id)}</span>",
                "Merchant": text(self._names().get(key.merchant_id)),
                "Scopes": text(", ".join(sorted(s.value for s in key.scopes))),
                "Per minute": str(key.per_minute),
                "Per hour": str(key.per_hour),
            }
        )
        kid = key.id
        if verb == "revoke":
            return Plan(
                f"Revoke the key {key.id}?",
                summary + "<p>Revoked, the key answers 401 from its next request. This cannot be undone.</p>",
                keys_url,
                lambda actor: _then(op.revoke_key(kid, actor=actor), f"{keys_url}?done=revoked"),
                danger=True,
            )
        if verb == "rate-limit":
            per_minute = _optional_int(form, "per_minute", "Per minute")
            per_hour = _optional_int(form, "per_hour", "Per hour")
            return Plan(
                f"Set the rate limits of {key.id}?",
                summary
                + definition_list(
                    {
                        "New per minute": str(per_minute) if per_minute is not None else "unchanged",
                        "New per hour": str(per_hour) if per_hour is not None else "unchanged",
                    }
                ),
                keys_url,
                lambda actor: _then(
                    op.set_rate_limit(kid, per_minute=per_minute, per_hour=per_hour, actor=actor),
                    f"{keys_url}?done=rate-limit",
                ),
            )
        raise PageError("No such action.", 404)

    # --- webhooks ----------------------------------------------------------------------------------

    def webhooks(self, who: Signed, request: Request) -> tuple[str, str, str | None]:
        sections = []
        for m in self.core.operator.list_merchants():
            anchor = f"m-{m.id}"
            head = (
                f"<h2 id=\"{attr(anchor)}\">{text(m.name)} <span class='muted mono'>{text(m.id)}</span></h2>"
            )
            try:
                endpoint = self.core.webhooks.get(m.id)
            except NotFoundError:
                sections.append(head + "<p class='muted'>No endpoint registered.</p>")
                continue
            details = definition_list(
                {
                    "URL": f"<span class='mono'>{text(endpoint.url)}</span>",
                    "Active": yes_no(endpoint.is_active, yes="active", no="disabled"),
                    "Disabled reason": text(endpoint.disabled_reason),
                    "Event names": text(endpoint.events),
                    "Registered": moment(endpoint.updated_at),
                }
            )
            action = (
                ""
                if endpoint.is_active
                else "<p>"
                + button_form(f"{PREFIX}/webhooks/{quote(m.id)}/reactivate", "Reactivate", who.csrf)
                + "</p>"
            )
            rows = []
            for summary in self.core.webhooks.events(m.id, limit=RECENT_EVENTS).data:
                record = self.core.webhooks.event(m.id, summary.id)
                last = record.deliveries[-1] if record.deliveries else None
                outcome = (
                    "<span class='muted'>not yet</span>"
                    if last is None
                    else f"{moment(last.at)}<br>"
                    + (f"HTTP {last.response_status}" if last.response_status is not None else "no answer")
                    + (f" · {text(last.error)}" if last.error else "")
                )
                rows.append(
                    [
                        text(summary.name),
                        f"<span class='mono'>{text(summary.reference)}</span>",
                        text(summary.delivery_status.value),
                        str(summary.attempts),
                        outcome,
                    ]
                )
            recent = table(
                ["Event", "Reference", "Delivery", "Attempts", "Last attempt"],
                rows,
                empty="No event yet.",
                numeric=(3,),
            )
            sections.append(
                f"<section aria-labelledby=\"{attr(anchor)}\">{head}<div class='card'>{details}{action}</div>"
                f"<h3>Recent deliveries</h3>{recent}</section>"
            )
        content = "".join(sections) or "<p class='muted'>No merchant yet.</p>"
        return "Webhooks", content, f"{PREFIX}/webhooks"

    def plan_webhook(self, who: Signed, request: Request, form: Form) -> Plan:
        merchant_id = request.path_params["merchant"]
        m = self.core.operator.get_merchant(merchant_id)
        endpoint = self.core.webhooks.get(m.id)
        summary = definition_list(
            {
                "Merchant": text(m.name),
                "URL": f"<span class='mono'>{text(endpoint.url)}</span>",
                "Active": yes_no(endpoint.is_active, yes="active", no="disabled"),
                "Disabled reason": text(endpoint.disabled_reason),
            }
        )
        back = f"{PREFIX}/webhooks#m-{m.id}"
        webhooks = self.core.webhooks
        mid = m.id
        return Plan(
            f"Reactivate the webhook endpoint of {m.name}?",
            summary + "<p>Deliveries resume; the URL and signing secret stay as they are.</p>",
            back,
            lambda actor: _then(
                webhooks.reactivate(mid, actor=actor), f"{PREFIX}/webhooks?done=reactivated#m-{mid}"
            ),
        )

    # --- platform ----------------------------------------------------------------------------------

    def platform(self, who: Signed, request: Request) -> tuple[str, str, str | None]:
        settings = self.core.operator.settings()
        base = f"{PREFIX}/platform"
        api = button_form(
            f"{base}/api-{'off' if settings.api_enabled else 'on'}",
            "Turn the merchant API off" if settings.api_enabled else "Turn the merchant API on",
            who.csrf,
            css="danger" if settings.api_enabled else "",
        )
        payouts = button_form(
            f"{base}/payouts-{'off' if settings.payouts_enabled else 'on'}",
            "Turn payouts off" if settings.payouts_enabled else "Turn payouts on",
            who.csrf,
            css="danger" if settings.payouts_enabled else "",
        )
        switches = table(
            ["Switch", "State", "Change"],
            [
                ["Merchant API (every /v1 request)", yes_no(settings.api_enabled), api],
                ["Payouts, for every merchant", yes_no(settings.payouts_enabled), payouts],
            ],
            empty="",
        )
        rows = []
        for c in self.core.catalogue.currencies.values():
            if c.checkout_only:
                continue
            closed = c.code in settings.closed_currencies
            rows.append(
                [
                    text(c.code),
                    text(c.name),
                    yes_no(not closed, yes="open", no="closed"),
                    button_form(
                        f"{PREFIX}/currencies/{quote(c.code)}/{'open' if closed else 'close'}",
                        f"Open {c.code}" if closed else f"Close {c.code}",
                        who.csrf,
                        css="" if closed else "danger",
                    ),
                ]
            )
        currencies = table(["Currency", "Name", "Payouts", "Change"], rows, empty="No currency.")
        content = f"<h2>Switches</h2>{switches}<h2>Payouts per currency</h2>{currencies}"
        return "Platform", content, f"{PREFIX}/platform"

    def plan_platform(self, who: Signed, request: Request, form: Form) -> Plan:
        op = self.core.operator
        verb = request.path_params["verb"]
        back = f"{PREFIX}/platform"
        after = f"{back}?done=platform"
        if verb in ("api-on", "api-off"):
            on = verb == "api-on"
            return Plan(
                f"Turn the merchant API {'on' if on else 'off'}?",
                "<p>The merchant API answers again.</p>"
                if on
                else "<p>Every /v1 request of every merchant answers 403 CAPABILITY_DISABLED until it is"
                " turned on again.</p>",
                back,
                lambda actor: _then(op.set_platform_api(on, actor=actor), after),
                danger=not on,
            )
        if verb in ("payouts-on", "payouts-off"):
            on = verb == "payouts-on"
            return Plan(
                f"Turn payouts {'on' if on else 'off'} for every merchant?",
                "<p>Payouts are accepted again.</p>"
                if on
                else "<p>Every payout is refused (CAPABILITY_DISABLED, blockedBy PLATFORM) until turned on"
                " again.</p>",
                back,
                lambda actor: _then(op.set_platform_payouts(on, actor=actor), after),
                danger=not on,
            )
        raise PageError("No such action.", 404)

    def plan_currency(self, who: Signed, request: Request, form: Form) -> Plan:
        op = self.core.operator
        code = request.path_params["currency"]
        verb = request.path_params["verb"]
        currency = self.core.catalogue.currency(code, settleable=True)
        back = f"{PREFIX}/platform"
        if verb not in ("open", "close"):
            raise PageError("No such action.", 404)
        open_ = verb == "open"
        return Plan(
            f"{'Open' if open_ else 'Close'} payouts in {currency.code}?",
            f"<p>Payouts in {text(currency.name)} are accepted again.</p>"
            if open_
            else f"<p>Every payout in {text(currency.name)} is refused (PAYOUTS_NOT_CONFIGURED, blockedBy"
            " CURRENCY_CLOSED) until opened again.</p>",
            back,
            lambda actor: _then(
                op.set_currency_payouts(currency.code, open_, actor=actor), f"{back}?done=platform"
            ),
            danger=not open_,
        )

    # --- the audit log -----------------------------------------------------------------------------

    def _record_link(self, entry: AuditEntry) -> str:
        record = entry.record
        link: str | None = None
        if record.startswith(PAYOUT_REFERENCE_PREFIX):
            link = f"{PREFIX}/payouts/{quote(record)}"
        elif record.startswith("mer_"):
            link = f"{PREFIX}/merchants/{quote(record)}"
        elif record == "platform":
            link = f"{PREFIX}/platform"
        elif record.startswith("key_"):
            state = entry.after or entry.before or {}
            merchant = state.get("merchantId")
            if isinstance(merchant, str):
                link = f"{PREFIX}/merchants/{quote(merchant)}/keys"
        shown = (
            f"<a class='mono nowrap' href=\"{attr(link)}\">{text(record)}</a>"
            if link
            else f"<span class='mono nowrap'>{text(record)}</span>"
        )
        only = f"{PREFIX}/audit?{urlencode({'record': record})}"
        return f"{shown}<br><a class='muted' href=\"{attr(only)}\">only this record</a>"

    @staticmethod
    def _change(entry: AuditEntry) -> str:
        before, after = entry.before, entry.after
        if entry.action == "operator.sign_in":
            return "signed in"
        if entry.action == "operator.sign_out":
            return "signed out"
        if entry.action == "operator.sign_in_failed" and after is not None:
            throttled = "; further attempts refused for a while" if after.get("throttled") else ""
            return (
                f"sign-in refused: {text(_shown(after.get('failuresInWindow')))} from"
                f" {text(_shown(after.get('client')))} in {text(_shown(after.get('windowSeconds')))} s"
                f"{throttled}"
            )
        if before is None:
            return "created"
        if after is None:
            return "ended"
        assert before is not None
        changed = [
            f"{text(key)}: {text(_shown(before.get(key)))} → {text(_shown(after.get(key)))}"
            for key in after
            if before.get(key) != after.get(key)
        ]
        return "<br>".join(changed) or "<span class='muted'>no change</span>"

    def _audit_table(self, entries: Sequence[AuditEntry], who: Signed) -> str:
        names = {operator.id: operator.name for operator in self.core.operator.operators()}
        rows = []
        for entry in entries:
            actor = text(entry.actor)
            if entry.actor in names:
                actor = f"{text(names[entry.actor])}<br><span class='muted mono nowrap'>{actor}</span>"
            rows.append(
                [
                    f"<span class='nowrap'>{moment(entry.at)}</span>",
                    actor,
                    f"<span class='mono nowrap'>{text(entry.action)}</span>",
                    self._record_link(entry),
                    self._change(entry),
                    "<details><summary>Before and after</summary>"
                    f"{json_block(entry.before)}{json_block(entry.after)}</details>",
                ]
            )
        return table(["When", "Who", "Action", "Record", "Change", ""], rows, empty="No entry.")

    def audit(self, who: Signed, request: Request) -> tuple[str, str, str | None]:
        record = (request.query_params.get("record") or "").strip() or None
        entries = self.core.operator.audit_log(
            record=record, limit=QUEUE_PAGE, starting_after=request.query_params.get("after")
        )
        search = (
            f"<form method='get' action='{PREFIX}/audit' class='card'><div class='fields'>"
            "<div><label for='record'>Record</label>"
            f"<input id='record' class='wide' name='record' type='text' value=\"{attr(record or '')}\""
            " placeholder='PO-..., mer_..., key_..., op_..., platform'></div>"
            "<div><button type='submit' class='plain'>Filter</button></div>"
            + (f"<div><a href='{PREFIX}/audit'>All records</a></div>" if record else "")
            + "</div></form>"
        )
        content = (
            search
            + self._audit_table(entries.data, who)
            + self._more(
                request, entries.has_more, entries.data[-1].id if entries.data else None, record=record or ""
            )
        )
        return "Audit log", content, f"{PREFIX}/audit"

    # --- forms shown again after a refused value ---------------------------------------------------

    def merchant_form_again(self, who: Signed, request: Request, form: Form) -> tuple[str, str, str | None]:
        """A merchant's fee, limits or new-key form, as typed."""
        if request.path_params["verb"] == "keys":
            return self._keys_page(who, request.path_params["merchant"], form)
        return self.merchant_page(who, request, form)

    def key_form_again(self, who: Signed, request: Request, form: Form) -> tuple[str, str, str | None]:
        """A key's rate-limit form, as typed, on its merchant's keys page."""
        key = self.core.operator.get_key(request.path_params["key"])
        return self._keys_page(who, key.merchant_id, form, key.id)

    # --- the route table ---------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        v, a = self.view, self.action
        return [
            Route(PREFIX, v(self.overview), methods=["GET"]),
            Route(f"{PREFIX}/sign-in", self.sign_in_form, methods=["GET"]),
            Route(f"{PREFIX}/sign-in", self.sign_in, methods=["POST"]),
            Route(f"{PREFIX}/sign-out", self.sign_out, methods=["POST"]),
            Route(f"{PREFIX}/assets/icon.svg", self.icon, methods=["GET"]),
            Route(f"{PREFIX}/review", v(self.review), methods=["GET"]),
            Route(f"{PREFIX}/failed", v(self.failed), methods=["GET"]),
            Route(f"{PREFIX}/payouts", v(self.payouts_list), methods=["GET"]),
            Route(f"{PREFIX}/collections", v(self.collections_list), methods=["GET"]),
            Route(f"{PREFIX}/work/{{kind}}", v(self.work_list), methods=["GET"]),
            Route(f"{PREFIX}/payouts/{{reference}}", v(self.payout_page), methods=["GET"]),
            Route(f"{PREFIX}/payouts/{{reference}}/{{verb}}", a(self.plan_payout), methods=["POST"]),
            Route(f"{PREFIX}/batches/{{batch}}", v(self.batch_page), methods=["GET"]),
            Route(f"{PREFIX}/merchants", v(self.merchants), methods=["GET"]),
            Route(f"{PREFIX}/merchants", a(self.plan_new_merchant), methods=["POST"]),
            Route(f"{PREFIX}/merchants/{{merchant}}", v(self.merchant_page), methods=["GET"]),
            Route(f"{PREFIX}/merchants/{{merchant}}/keys", v(self.merchant_keys), methods=["GET"]),
            Route(
                f"{PREFIX}/merchants/{{merchant}}/{{verb}}",
                a(self.plan_merchant, self.merchant_form_again),
                methods=["POST"],
            ),
            Route(f"{PREFIX}/keys", v(self.keys_index), methods=["GET"]),
            Route(f"{PREFIX}/keys/{{key}}/{{verb}}", a(self.plan_key, self.key_form_again), methods=["POST"]),
            Route(f"{PREFIX}/webhooks", v(self.webhooks), methods=["GET"]),
            Route(f"{PREFIX}/webhooks/{{merchant}}/reactivate", a(self.plan_webhook), methods=["POST"]),
            Route(f"{PREFIX}/platform", v(self.platform), methods=["GET"]),
            Route(f"{PREFIX}/platform/{{verb}}", a(self.plan_platform), methods=["POST"]),
            Route(f"{PREFIX}/currencies/{{currency}}/{{verb}}", a(self.plan_currency), methods=["POST"]),
            Route(f"{PREFIX}/audit", v(self.audit), methods=["GET"]),
        ]


def _then(_: object, location: str) -> Done:
    """After an action whose result the record's page shows: go there."""
    return Done(location=location)


def _shown(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(str(item) for item in value) or "none"
    return str(value)


def _back(location: str) -> str:
    return f'<p>Nothing was changed. <a href="{attr(location)}">Back</a></p>'


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        title, message = "Not allowed", "This page does not take that method."
    else:
        title, message = "Not found", "No such page in the console."
    return HTMLResponse(
        page(title, f"<p>{message} <a href='{PREFIX}/review'>Go to the review queue</a>.</p>"),
        exc.status_code,
        headers={**HEADERS, **(exc.headers or {})},
    )


def console_app(core: PaymentCore) -> Starlette:
    """The console alone, as an ASGI app serving ``/console`` and below (``create_app`` mounts it)."""
    from paymentcore_server._routing import install_routing

    app = Starlette(routes=Console(core).routes(), exception_handlers={HTTPException: _http_error})
    install_routing(app)
    return app


class ConsoleDispatch:
    """Sends ``/console`` and everything below it to the console app, every other request on."""

    def __init__(self, app: ASGIApp, *, console: ASGIApp) -> None:
        self.app = app
        self.console = console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] == "http" and (path == PREFIX or path.startswith(PREFIX + "/")):
            await self.console(scope, receive, send)
        else:
            await self.app(scope, receive, send)


class _Chained(Sequence[BaseRoute]):
    """Two live route lists read as one (the request log and metrics name console routes too)."""

    def __init__(self, first: list[BaseRoute], second: list[BaseRoute]) -> None:
        self._first = first
        self._second = second

    def __len__(self) -> int:
        return len(self._first) + len(self._second)

    def __getitem__(self, index: Any) -> Any:
        return [*self._first, *self._second][index]

    def __iter__(self) -> Iterator[BaseRoute]:
        yield from self._first
        yield from self._second


def routes_with_console(api: Starlette, console: Starlette) -> Sequence[BaseRoute]:
    """The API's routes, then the console's: what the request observer names routes from."""
    return _Chained(api.router.routes, console.router.routes)
