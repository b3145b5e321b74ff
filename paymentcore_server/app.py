"""The Starlette adapter: parse, call a service, render. ``create_app(core)`` builds it; nothing at import.

Every response carries ``X-Request-Id``; every error, framework errors included, has the spec's shape
with ``requestId`` equal to that header.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs
from starlette.applications import Starlette
from starlette.datastructures import QueryParams
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from paymentcore import (
    BatchRefusedError,
    CollectionStatus,
    EventDeliveryStatus,
    IdempotencyKeyRequiredError,
    IdempotencyKeyTooLongError,
    InvalidRequestError,
    PaymentCore,
    PaymentError,
    PayoutStatus,
    Principal,
    RateState,
    UnauthorizedError,
    wire,
)
from paymentcore import Scope as KeyScope
from paymentcore.adapters.memory import MemoryStore
from paymentcore.adapters.sqlite import SqliteStore
from paymentcore.limits import MAX_IDEMPOTENCY_KEY_LENGTH
from paymentcore.ports import StoreReadOnlyError
from paymentcore_server._edge import (
    HEADERS_TOO_LARGE,
    MAX_BODY,
    MAX_HEADERS,
    RequestIdMiddleware,
    error_reply,
    error_response,
    head_size,
    http_error_handler,
    json_response,
    read_body,
    request_id,
    send_json,
)
from paymentcore_server._headers import (
    IDEMPOTENCY_HEADER,
    RATE_LIMIT_LIMIT,
    RATE_LIMIT_REMAINING,
    RATE_LIMIT_RESET,
)
from paymentcore_server._threads import FairThreads
from paymentcore_server._wire import (
    Fields,
    Query,
    allowance_json,
    balance_json,
    batch_json,
    batch_refused,
    bulk_items,
    charge_json,
    collection_json,
    event_record_json,
    event_summary_json,
    ledger_item_json,
    page_json,
    payout_json,
    translate,
    webhook_registration_json,
    webhook_settings_json,
)
from paymentcore_server.observability import RequestObserverMiddleware, RequestSink, log_request

if TYPE_CHECKING:
    from paymentcore_server.metrics import Metrics

__all__ = [
    "CACHE_HOUR",
    "HEADERS_TOO_LARGE",
    "HEALTH_TIMEOUT",
    "MAX_BODY",
    "MAX_HEADERS",
    "MAX_IDEMPOTENCY_KEY",
    "UNAUTHORIZED_MESSAGE",
    "Api",
    "Call",
    "Reply",
    "RequestIdMiddleware",
    "Work",
    "check_idempotency_header",
    "create_app",
    "error_response",
    "head_size",
    "http_error_handler",
    "json_response",
    "read_body",
    "request_id",
]

MAX_IDEMPOTENCY_KEY = MAX_IDEMPOTENCY_KEY_LENGTH
UNAUTHORIZED_MESSAGE = "A valid API key is required: send Authorization: Bearer <API_KEY>."
CACHE_HOUR = "public, max-age=3600"
REQUEST_THREADS = 40  # requests served at once, as many as Starlette's default thread pool
#: on a database server, the threads one merchant's requests may hold whenever threads are free (the
#: rest wait their turn on the event loop): its payouts wait for its lock, and would otherwise hold
#: every thread and pooled connection
REQUEST_THREADS_PER_MERCHANT = 8
#: connections of the pool no merchant's requests take past its share: for the worker and the others
CONNECTIONS_KEPT = 4
_LANES_KNOWN = 4096  # API keys whose merchant the hand-out remembers (then it starts afresh)
HEALTH_TIMEOUT = 0.8  # seconds: /healthz answers 503 rather than wait longer for the database
log = logging.getLogger("paymentcore.server")


@attrs.frozen
class Reply:
    """What a handler answers: the HTTP status and the JSON body."""

    status: int
    body: Any


def _bearer(authorization: str) -> str:
    """The token of an ``Authorization: Bearer <token>`` header (UNAUTHORIZED for anything else)."""
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise UnauthorizedError(UNAUTHORIZED_MESSAGE)
    return token.strip()


def _seen(seen: dict[str, Any] | None, principal: Principal) -> None:
    if seen is not None:  # the request's scope state: the request log names the merchant
        seen["merchant_id"] = principal.merchant.id


def check_idempotency_header(key: str | None) -> str | None:
    if key is None:
        return None
    if len(key) > MAX_IDEMPOTENCY_KEY:
        raise IdempotencyKeyTooLongError(
            f"The {IDEMPOTENCY_HEADER} header must be at most {MAX_IDEMPOTENCY_KEY} characters.",
            param=IDEMPOTENCY_HEADER,
        )
    if not key.strip():
        raise InvalidRequestError(f"The {IDEMPOTENCY_HEADER} header is empty.", param=IDEMPOTENCY_HEADER)
    return key


@attrs.frozen
class Call:
    """One authenticated request, as the handlers see it (run in a worker thread)."""

    who: Principal
    raw: bytes
    idempotency_key: str | None
    params: Mapping[str, str]
    query: tuple[tuple[str, str], ...] = ()  # the query string's (name, value) pairs, repeats kept
    # the body's fields once read: an error the library raises is reported with their wire names
    _read: list[Fields | Query] = attrs.field(factory=list, init=False, repr=False)

    def body(self) -> Any:
        if not self.raw.strip():
            raise InvalidRequestError("The body must be a JSON object.")
        return wire.loads(self.raw)

    def fields(self, body: Any = None) -> Fields:
        """The body's fields (``body``: the body when the handler already parsed it)."""
        read = Fields(self.body() if body is None else body)
        self._read.append(read)
        return read

    def query_string(self, allowed: Sequence[str]) -> Query:
        """The query string's parameters (only ``allowed`` ones, each at most once)."""
        read = Query(self.query, allowed)
        self._read.append(read)
        return read

    def translate(self, error: PaymentError) -> PaymentError:
        """``error`` as the wire names it: ``param`` and message in the request's own field names."""
        if self._read:
            return self._read[-1].translate(error)
        if error.param == "idempotency_key":  # nothing read yet: only the header can be at fault
            return translate(error, {"idempotency_key": IDEMPOTENCY_HEADER})
        return error

    @property
    def merchant_id(self) -> str:
        return self.who.merchant.id


Work = Callable[[Call], Reply]


@attrs.frozen
class _Asked:
    """One request as the handlers need it: its parts, read on the event loop, and its route's rules
    (the service call, the scope its key needs, whether the merchant must be approved)."""

    authorization: str
    idempotency_header: str | None
    raw: bytes
    params: Mapping[str, str]
    query: tuple[tuple[str, str], ...]
    work: Work
    scope: KeyScope | None
    transact: bool


#: a request's caller and its rate count (or the error that refused the count: its request raises it
#: once the caller is known, so that the request log still names the merchant)
Admitted = tuple[Principal, RateState | BaseException]


class _LoopAdmissions:
    """The callers of the requests served on the event loop, authenticated and counted together once
    per turn of the loop.

    Each request queues its bearer token and waits; the first one of a turn schedules the work at the
    loop's next turn, which looks every queued token up in one glance (``Access.authenticate_many``)
    and counts every caller found in one write of the rate book (``Access.rate_many``: exact, in arrival
    order per key, as one request at a time would be), then answers each request with its caller and
    count, or with the error that refused its token (UNAUTHORIZED before anything is counted, as one at
    a time). A burst of GETs then costs one read and one transaction of the rate book, not one of each
    per request.
    """

    def __init__(self, core: PaymentCore) -> None:
        self._core = core
        self._waiting: dict[asyncio.AbstractEventLoop, list[tuple[str, asyncio.Future[Admitted]]]] = {}

    def admit(self, token: str) -> asyncio.Future[Admitted]:
        loop = asyncio.get_running_loop()
        admitted: asyncio.Future[Admitted] = loop.create_future()
        waiting = self._waiting.setdefault(loop, [])
        if not waiting:
            loop.call_soon(self._admit, loop)
        waiting.append((token, admitted))
        return admitted

    def _admit(self, loop: asyncio.AbstractEventLoop) -> None:
        batch = self._waiting.pop(loop, [])
        access = self._core.access
        results: list[Admitted | BaseException]
        try:
            callers = access.authenticate_many([token for token, _ in batch])
            counts = iter(access.rate_many([caller for caller in callers if isinstance(caller, Principal)]))
            results = [
                caller if isinstance(caller, PaymentError) else (caller, next(counts)) for caller in callers
            ]
        except BaseException as failure:  # the store or the rate book failed: every request with it
            results = [failure] * len(batch)
        for (_, admitted), result in zip(batch, results, strict=True):
            if admitted.done():  # its request went away meanwhile
                continue
            if isinstance(result, BaseException):
                admitted.set_exception(result)
            else:
                admitted.set_result(result)


def _query(query_string: bytes) -> tuple[tuple[str, str], ...]:
    """The query's pairs as Starlette parses them (none to parse, most of the time)."""
    return tuple(QueryParams(query_string).multi_items()) if query_string else ()


@attrs.frozen(eq=False)
class _Endpoint:
    """An API route's ASGI app: the service call and its rules, served by :meth:`Api.serve`. An app, not
    a ``request -> response`` function, so that no Request or Response object is made for a request."""

    api: Api
    work: Work
    scope: KeyScope | None
    transact: bool
    cache: bool

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.api.serve(self, scope, receive, send)


def _shares(core: PaymentCore) -> dict[str, int]:
    """The hand-out's share of a merchant and the threads kept free past it, for ``core``'s store.

    On a database server a merchant gets 8 threads whenever threads are free, and alone up to its
    pool's connections but :data:`CONNECTIONS_KEPT` (16 of the default 20): more threads than
    connections would only queue, first come first served, for the pool."""
    if isinstance(core.store, SqliteStore | MemoryStore):
        return {"per_lane": REQUEST_THREADS, "reserve": 0}
    pool = getattr(core.store, "pool_size", REQUEST_THREADS)
    alone = min(REQUEST_THREADS, max(REQUEST_THREADS_PER_MERCHANT, pool - CONNECTIONS_KEPT))
    return {"per_lane": REQUEST_THREADS_PER_MERCHANT, "reserve": REQUEST_THREADS - alone}


class Api:
    """The routes, bound to one core. Authentication, rate limiting, parsing and the service call run
    in that order. On a database server all of it runs on a worker thread (one hop). On a local store
    (SQLite or memory), where reads take tens of microseconds and never wait for a writer (WAL), the
    GETs of one turn of the event loop are authenticated and counted there together
    (:class:`_LoopAdmissions`) and answered on the loop. On SQLite, whose rate counts go to a file of
    their own, the POSTs of the turn are admitted with them and cross to a worker thread once, for
    their write; on the memory store, its own rate book, a POST runs on the thread whole."""

    def __init__(self, core: PaymentCore) -> None:
        self.core = core
        self._health_pool: ThreadPoolExecutor | None = None
        # the threads requests run on: a plain executor is a cheaper hop than anyio's thread pool
        self._requests = ThreadPoolExecutor(REQUEST_THREADS, thread_name_prefix="paymentcore-request")
        self._local_reads = isinstance(core.store, SqliteStore | MemoryStore)
        # handed out by merchant in turns; a merchant's share is capped where its requests can wait
        # for its lock while holding a thread and a connection (a database server), not where they
        # all wait for the one writer and its batch (SQLite, memory)
        self._threads = FairThreads(self._requests, REQUEST_THREADS, **_shares(core))
        self._lane_of: dict[int, str] = {}  # hash of an Authorization header -> its merchant
        # a POST is admitted on the loop only where its count cannot wait for a writer of the store
        # (the memory store is its own rate book, whose lock a bulk payout holds for a while)
        self._loop_posts = self._local_reads and core.access.counts_apart
        self._loop = _LoopAdmissions(core)

    def close(self) -> None:
        """Let go of the health check's threads (the app's lifespan calls it at shutdown)."""
        if self._health_pool is not None:
            self._health_pool.shutdown(wait=False, cancel_futures=True)
            self._health_pool = None
        self._requests.shutdown(wait=True)

    # --- plumbing --------------------------------------------------------------------------------

    def _serve(self, asked: _Asked, seen: dict[str, Any] | None = None) -> tuple[Reply, RateState]:
        """The request on a thread: its caller known and counted (``Access.admit``: UNAUTHORIZED in
        the API's own words; a refused count raised once the caller is known, for the request log),
        then the rest."""
        try:
            principal, counted = self.core.access.admit(_bearer(asked.authorization))
        except UnauthorizedError:
            raise UnauthorizedError(UNAUTHORIZED_MESSAGE) from None
        _seen(seen, principal)
        if isinstance(counted, BaseException):
            raise counted
        return self._answer(principal, counted, asked)

    async def _admitted_on_loop(
        self, authorization: str, seen: dict[str, Any] | None
    ) -> tuple[Principal, RateState]:
        """:meth:`_principal` and the rate count, on the event loop, batched per turn."""
        try:
            principal, counted = await self._loop.admit(_bearer(authorization))
        except UnauthorizedError:
            raise UnauthorizedError(UNAUTHORIZED_MESSAGE) from None
        _seen(seen, principal)
        if isinstance(counted, BaseException):
            raise counted
        return principal, counted

    def _answer(self, principal: Principal, state: RateState, asked: _Asked) -> tuple[Reply, RateState]:
        """The rest of a request once its caller is known and counted: scope, parsing, the call."""
        if asked.scope is not None:
            principal.require(asked.scope)
        if asked.transact:
            principal.require_approved()
        key = check_idempotency_header(asked.idempotency_header)
        call = Call(principal, asked.raw, key, asked.params, asked.query)
        try:
            return asked.work(call), state
        except PaymentError as error:
            raise call.translate(error) from None

    def _learn(self, token: int, seen: dict[str, Any]) -> None:
        """The merchant of the request's key, for the lane of its next requests (a scheduling hint,
        never an authorization: each request is authenticated afresh)."""
        merchant = seen.get("merchant_id")
        if merchant is not None and self._lane_of.get(token) != merchant:
            if len(self._lane_of) >= _LANES_KNOWN:
                self._lane_of.clear()
            self._lane_of[token] = merchant

    @staticmethod
    def _rate_headers(state: RateState) -> dict[str, str]:
        return {
            RATE_LIMIT_LIMIT: str(state.limit),
            RATE_LIMIT_REMAINING: str(state.remaining),
            RATE_LIMIT_RESET: str(state.reset_seconds),
        }

    def endpoint(
        self,
        work: Work,
        *,
        scope: KeyScope | None = None,
        transact: bool = False,
        cache: bool = False,
    ) -> _Endpoint:
        return _Endpoint(self, work, scope, transact, cache)

    async def serve(self, endpoint: _Endpoint, scope: Scope, receive: Receive, send: Send) -> None:
        """One request to ``endpoint``: its parts read from the ASGI scope, then admitted, answered, sent."""
        method = scope["method"]
        authorization: str | None = None
        idempotency_header: str | None = None
        for name, value in scope["headers"]:  # the first of each, as Starlette's Headers.get
            if name == b"authorization" and authorization is None:
                authorization = value.decode("latin-1")
            elif name == b"idempotency-key" and idempotency_header is None:
                idempotency_header = value.decode("latin-1")
        try:
            raw = await read_body(Request(scope, receive)) if method in ("POST", "PUT") else b""
            asked = _Asked(
                authorization=authorization or "",
                idempotency_header=idempotency_header,
                raw=raw,
                params=scope.get("path_params", {}),
                query=_query(scope["query_string"]),
                work=endpoint.work,
                scope=endpoint.scope,
                transact=endpoint.transact,
            )
            seen = scope.setdefault("state", {})
            reading = method in ("GET", "HEAD")
            if self._loop_posts or (self._local_reads and reading):
                principal, counted = await self._admitted_on_loop(asked.authorization, seen)
                if reading:
                    reply, state = self._answer(principal, counted, asked)
                else:  # the caller is known and counted: only the write crosses to a thread
                    answer = partial(self._answer, principal, counted, asked)
                    reply, state = await self._threads.run(principal.merchant.id, answer)
            else:
                token = hash(asked.authorization)
                try:
                    lane = self._lane_of.get(token) or f"key {token}"
                    reply, state = await self._threads.run(lane, partial(self._serve, asked, seen))
                finally:
                    self._learn(token, seen)
        except PaymentError as error:
            await send_json(send, *error_reply(scope, error))
            return
        headers = self._rate_headers(state)
        if endpoint.cache:
            headers["Cache-Control"] = CACHE_HOUR
        await send_json(send, reply.body, reply.status, headers)

    # --- collect ---------------------------------------------------------------------------------

    def charge(self, call: Call) -> Reply:
        f = call.fields()
        collection = self.core.collect.charge(
            call.merchant_id,
            currency=f.get("currency"),
            amount=f.get("amount"),
            country=f.get("country"),
            provider=f.get("provider"),
            phone=f.get("phone"),
            merchant_reference=f.merchant_reference(),
            description=f.get("description"),
            idempotency_key=call.idempotency_key,
        )
        return Reply(202, charge_json(collection))

    def checkout_handler(self, *, legacy: bool) -> Work:
        def checkout(call: Call) -> Reply:
            f = call.fields()
            if legacy:
                collection = self.core.collect.legacy_payment(
                    call.merchant_id,
                    currency=f.get("currency"),
                    amount=f.get("amount"),
                    description=f.get("description"),
                    reference=f.get("reference"),
                    expires_in_minutes=f.get("expires_in_minutes"),
                    idempotency_key=call.idempotency_key,
                )
            else:
                collection = self.core.collect.checkout(
                    call.merchant_id,
                    currency=f.get("currency"),
                    amount=f.get("amount"),
                    description=f.get("description"),
                    merchant_reference=f.merchant_reference(),
                    expires_in_minutes=f.get("expires_in_minutes"),
                    idempotency_key=call.idempotency_key,
                )
            return Reply(201, collection_json(collection))

        return checkout

    def get_collection(self, call: Call) -> Reply:
        return Reply(200, collection_json(self.core.collect.get(call.merchant_id, call.params["reference"])))

    def list_collections(self, call: Call) -> Reply:
        q = call.query_string(("limit", "startingAfter", "status", "merchantReference"))
        page = self.core.collect.list(
            call.merchant_id,
            limit=q.limit(),
            starting_after=q.get("starting_after"),
            status=q.member("status", CollectionStatus),
            merchant_reference=q.get("merchant_reference"),
        )
        return Reply(200, page_json(page, collection_json))

    # --- disburse --------------------------------------------------------------------------------

    def disburse(self, call: Call) -> Reply:
        body = call.body()
        if call.idempotency_key is None:
            raise IdempotencyKeyRequiredError(
                "Payouts need an Idempotency-Key header.", param="Idempotency-Key"
            )
        f = call.fields(body)
        payout = self.core.disburse.create(
            call.merchant_id,
            currency=f.get("currency"),
            amount=f.get("amount"),
            phone=f.get("phone"),
            recipient_name=f.get("recipient_name"),
            merchant_reference=f.merchant_reference(),
            country=f.get("country"),
            provider=f.get("provider"),
            idempotency_key=call.idempotency_key,
        )
        return Reply(201, payout_json(payout))

    def disburse_bulk(self, call: Call) -> Reply:
        """Extension: up to 1,000 payouts in one request (one Idempotency-Key, one rate-limit count)."""
        body = call.body()
        if call.idempotency_key is None:
            raise IdempotencyKeyRequiredError(
                "Payouts need an Idempotency-Key header.", param="Idempotency-Key"
            )
        f = call.fields(body)
        try:
            batch = self.core.disburse.create_bulk(
                call.merchant_id,
                items=bulk_items(f.get("items")),
                mode=f.get("mode"),
                idempotency_key=call.idempotency_key,
            )
        except BatchRefusedError as refused:
            raise batch_refused(refused) from None
        return Reply(201, batch_json(batch))

    def get_bulk(self, call: Call) -> Reply:
        q = call.query_string(("limit", "startingAfter"))
        after = q.get("starting_after")
        if after is not None and (not after.isascii() or not after.isdigit() or len(after) > 7):
            raise InvalidRequestError(
                "startingAfter must be the index of the last item of the previous page.",
                param="startingAfter",
            )
        batch = self.core.disburse.get_bulk(
            call.merchant_id,
            call.params["id"],
            limit=q.limit(),
            starting_after=None if after is None else int(after),
        )
        return Reply(200, batch_json(batch))

    def get_payout(self, call: Call) -> Reply:
        return Reply(200, payout_json(self.core.disburse.get(call.merchant_id, call.params["reference"])))

    def list_payouts(self, call: Call) -> Reply:
        q = call.query_string(("limit", "startingAfter", "status", "merchantReference", "batch"))
        page = self.core.disburse.list(
            call.merchant_id,
            limit=q.limit(),
            starting_after=q.get("starting_after"),
            status=q.member("status", PayoutStatus),
            merchant_reference=q.get("merchant_reference"),
            batch=q.get("batch"),
        )
        return Reply(200, page_json(page, payout_json))

    def disburse_limits(self, call: Call) -> Reply:
        allowance = self.core.disburse.limits(call.merchant_id, call.params["currency"])
        return Reply(200, allowance_json(allowance))

    def balances(self, call: Call) -> Reply:
        balances = self.core.operator.balances(call.merchant_id)
        return Reply(200, {"balances": [balance_json(balance) for balance in balances]})

    def ledger(self, call: Call) -> Reply:
        q = call.query_string(("currency", "limit", "startingAfter"))
        page = self.core.operator.ledger(
            call.merchant_id,
            q.get("currency"),  # type: ignore[arg-type]  # None is refused with param currency
            limit=q.limit(),
            starting_after=q.get("starting_after"),
        )
        return Reply(200, page_json(page, ledger_item_json))

    # --- events ----------------------------------------------------------------------------------

    def list_events(self, call: Call) -> Reply:
        q = call.query_string(("limit", "startingAfter", "type", "deliveryStatus"))
        page = self.core.webhooks.events(
            call.merchant_id,
            limit=q.limit(),
            starting_after=q.get("starting_after"),
            type=q.get("type"),
            delivery_status=q.member("delivery_status", EventDeliveryStatus),
        )
        return Reply(200, page_json(page, event_summary_json))

    def get_event(self, call: Call) -> Reply:
        return Reply(200, event_record_json(self.core.webhooks.event(call.merchant_id, call.params["id"])))

    def resend_event(self, call: Call) -> Reply:
        event = self.core.webhooks.resend(
            call.merchant_id, call.params["id"], idempotency_key=call.idempotency_key
        )
        return Reply(202, event_record_json(event))

    # --- discovery -------------------------------------------------------------------------------

    def countries(self, call: Call) -> Reply:
        cat = self.core.catalogue
        rows = []
        for country in cat.countries.values():
            if not cat.providers_in(country.code):
                continue
            row: dict[str, Any] = {
                "country": country.code,
                "name": country.name,
                "currency": country.currency,
                "dialCode": country.dial_code,
            }
            if country.phone_digits is not None:
                row["phoneDigits"] = country.phone_digits
            if country.phone_example is not None:
                row["phoneExample"] = country.phone_example
            rows.append(row)
        return Reply(200, rows)

    def providers(self, call: Call) -> Reply:
        rows = [
            {"provider": p.code, "name": p.name, "method": p.method, "country": p.country}
            for p in self.core.catalogue.providers.values()
        ]
        return Reply(200, rows)

    def limits(self, call: Call) -> Reply:
        rows = [
            {
                "currency": c.code,
                "min": c.render(c.min_minor),
                "max": c.render(c.max_minor),
                "decimals": c.decimals,
            }
            for c in self.core.catalogue.currencies.values()
        ]
        return Reply(200, rows)

    def account_providers(self, call: Call) -> Reply:
        rows = [
            {
                "provider": p.code,
                "name": p.name,
                "method": p.method,
                "country": p.country,
                "providerCode": p.code,
                "available": True,
                "reason": None,
            }
            for p in self.core.catalogue.providers.values()
        ]
        return Reply(200, rows)

    def channels(self, call: Call) -> Reply:
        blocked = call.who.merchant.blocked_providers
        rows = [
            {
                "providerCode": p.code,
                "method": p.channel_method,
                "country": p.country,
                "available": p.code not in blocked,
                "reason": "restricted" if p.code in blocked else None,
            }
            for p in self.core.catalogue.providers.values()
            if p.country is not None
        ]
        return Reply(200, rows)

    # --- webhooks --------------------------------------------------------------------------------

    def register_handler(self, *, legacy: bool) -> Work:
        def register(call: Call) -> Reply:
            f = call.fields()
            registration = self.core.webhooks.register(
                call.merchant_id,
                url=f.get("url"),
                events=f.get("events"),
                legacy=legacy,
                idempotency_key=call.idempotency_key,
            )
            return Reply(200, webhook_registration_json(registration))

        return register

    def get_webhook(self, call: Call) -> Reply:
        return Reply(200, webhook_settings_json(self.core.webhooks.get(call.merchant_id)))

    # --- table -----------------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        collect, disburse = KeyScope.COLLECT, KeyScope.DISBURSE
        e = self.endpoint
        checkout = self.checkout_handler(legacy=False)
        legacy_checkout = self.checkout_handler(legacy=True)
        register = self.register_handler(legacy=False)
        return [
            Route("/v1/collect/charge", e(self.charge, scope=collect, transact=True), methods=["POST"]),
            Route("/v1/collect/checkout", e(checkout, scope=collect, transact=True), methods=["POST"]),
            Route("/v1/payments", e(legacy_checkout, scope=collect, transact=True), methods=["POST"]),
            Route("/v1/collect/{reference}", e(self.get_collection, scope=collect), methods=["GET"]),
            Route("/v1/payments/{reference}", e(self.get_collection, scope=collect), methods=["GET"]),
            Route("/v1/collect", e(self.list_collections, scope=collect), methods=["GET"]),
            Route("/v1/disburse", e(self.disburse, scope=disburse, transact=True), methods=["POST"]),
            Route("/v1/disburse", e(self.list_payouts, scope=disburse), methods=["GET"]),
            Route(
                "/v1/disburse/bulk", e(self.disburse_bulk, scope=disburse, transact=True), methods=["POST"]
            ),
            Route("/v1/disburse/bulk/{id}", e(self.get_bulk, scope=disburse), methods=["GET"]),
            Route("/v1/payouts", e(self.disburse, scope=disburse, transact=True), methods=["POST"]),
            Route("/v1/disburse/{reference}", e(self.get_payout, scope=disburse), methods=["GET"]),
            Route("/v1/payouts/{reference}", e(self.get_payout, scope=disburse), methods=["GET"]),
            Route(
                "/v1/account/disburse-limits/{currency}",
                e(self.disburse_limits, scope=disburse),
                methods=["GET"],
            ),
            Route("/v1/payout-limits/{currency}", e(self.disburse_limits, scope=disburse), methods=["GET"]),
            Route("/v1/account/balances", e(self.balances), methods=["GET"]),
            Route("/v1/account/ledger", e(self.ledger), methods=["GET"]),
            Route("/v1/events", e(self.list_events), methods=["GET"]),
            Route("/v1/events/{id}", e(self.get_event), methods=["GET"]),
            Route("/v1/events/{id}/resend", e(self.resend_event), methods=["POST"]),
            Route("/v1/countries", e(self.countries, cache=True), methods=["GET"]),
            Route("/v1/providers", e(self.providers, cache=True), methods=["GET"]),
            Route("/v1/limits", e(self.limits, cache=True), methods=["GET"]),
            Route("/v1/account/providers", e(self.account_providers), methods=["GET"]),
            Route("/v1/channels", e(self.channels), methods=["GET"]),
            Route("/v1/webhook", e(register), methods=["PUT", "POST"]),
            Route("/v1/webhooks", e(self.register_handler(legacy=True)), methods=["POST"]),
            Route("/v1/webhook", e(self.get_webhook), methods=["GET"]),
            Route("/healthz", self.healthz, methods=["GET"]),
            Route("/openapi.json", self.openapi, methods=["GET"]),
        ]

    async def healthz(self, request: Request) -> Response:
        """200 when a query on the database answers, and it takes writes, within HEALTH_TIMEOUT; else
        503 SERVER_ERROR ("cannot be written" when it answers but is read-only: ``core.ping``).

        The ping runs on a small pool of its own (never the request threads, which may all be waiting
        for the database) and the answer never waits for it longer than HEALTH_TIMEOUT.
        """
        if self._health_pool is None:
            self._health_pool = ThreadPoolExecutor(2, thread_name_prefix="paymentcore-health")
        loop = asyncio.get_running_loop()
        ping = loop.run_in_executor(self._health_pool, self.core.ping, HEALTH_TIMEOUT * 0.6)
        try:
            await asyncio.wait_for(ping, HEALTH_TIMEOUT)
        except StoreReadOnlyError as exc:
            log.warning("health check failed: the database cannot be written (%s)", exc)
            return self._unhealthy(request, "The database cannot be written.")
        except Exception as exc:
            log.warning("health check failed: the database did not answer (%s)", exc or type(exc).__name__)
            return self._unhealthy(request, "The database is not reachable.")
        return json_response({"status": "ok"})

    @staticmethod
    def _unhealthy(request: Request, message: str) -> Response:
        body = {"code": "SERVER_ERROR", "message": message, "requestId": request_id(request)}
        return json_response(body, 503, {"Cache-Control": "no-store"})

    async def openapi(self, request: Request) -> Response:
        from paymentcore_server.openapi import openapi_document

        return json_response(openapi_document(self.core.config.public_url))


def _answers_itself(route: Route) -> bool:
    return isinstance(route.endpoint, _Endpoint)


async def _payment_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, PaymentError)
    return error_response(request, exc)


def create_app(
    core: PaymentCore,
    *,
    run_worker: bool = False,
    close_core: bool = False,
    metrics: Metrics | None = None,
    log_requests: bool = False,
    console: bool = True,
) -> Starlette:
    """The ASGI app for ``core``. With ``run_worker`` the background work runs in this process.

    With ``metrics`` (``paymentcore_server.metrics.Metrics``) every request is counted and timed by route
    template; with ``log_requests`` every request writes one line on the ``paymentcore.http`` logger
    (``paymentcore_server.observability``). Neither serves anything on the app's own port. With
    ``console`` (the default) the operator's console is served at ``/console``
    (``paymentcore_server.console``), beside the API's routes rather than among them.
    """
    from paymentcore_server._routing import DirectLane, install_routing
    from paymentcore_server.console import ConsoleDispatch, console_app, routes_with_console
    from paymentcore_server.page import page_routes

    api = Api(core)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if run_worker:
            core.start_worker()
        try:
            yield
        finally:
            if run_worker:
                core.stop_worker()
            api.close()
            if close_core:
                core.close()

    app = Starlette(
        routes=[*api.routes(), *page_routes(core)],
        exception_handlers={HTTPException: http_error_handler, PaymentError: _payment_error},
        lifespan=lifespan,
    )
    index = install_routing(app)
    # the API's routes answer their errors themselves: between the edge and them only the console's dispatch
    app.add_middleware(DirectLane, index=index, direct=_answers_itself)
    routes: Sequence[BaseRoute] = app.router.routes
    if console:  # inside RequestIdMiddleware: console answers carry X-Request-Id too
        pages = console_app(core)
        app.add_middleware(ConsoleDispatch, console=pages)
        routes = routes_with_console(app, pages)
    app.add_middleware(RequestIdMiddleware)
    sinks: list[RequestSink] = []
    if metrics is not None:
        sinks.append(metrics.record_request)
    if log_requests:
        sinks.append(log_request)
    if sinks:  # outside RequestIdMiddleware: it sees the id and the final status, a crash's 500 too
        app.add_middleware(RequestObserverMiddleware, routes=routes, sinks=sinks)
    return app
