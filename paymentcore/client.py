"""A typed Python client for a paymentcore server: the library's records and errors, over HTTP.

::

    from decimal import Decimal
    from paymentcore.client import Client

    with Client("https://pay.example.com", "pck_...") as pay:
        payout = pay.disburse.create(amount=Decimal("2500"), currency="XAF", phone="690000002")
        for item in pay.disburse.list(status=PayoutStatus.PAID):  # pages on by itself
            ...

:class:`Client` (blocking) and :class:`AsyncClient` (``await``) are built from the server's base URL
and one API key; a merchant with a Collect key and a Disburse key makes one client per key. Their
services are shaped like the embedded core's (``core.collect``, ``core.disburse``, ...) without the
merchant id, which the key names: ``collect.charge / checkout / get / list``, ``disburse.create /
create_bulk / get_bulk / get / list / limits``, ``account.balances / ledger``, ``webhooks.register /
get``, ``events.list / get / resend``. They return the library's frozen records (``Decimal`` amounts
read from the JSON without a float, aware UTC datetimes, enums) and raise the library's exceptions
(``except InsufficientBalanceError``), which also carry the answer's ``request_id`` and ``http_status``.

Every create call (a charge, a checkout, a payout, a bulk request, a webhook registration, an event
resend) sends an ``Idempotency-Key``: the one given, or one generated for the call. A connection error,
a timeout, or an answer of 429 or 500/502/503/504 is retried with the same key (the server answers what
it did the first time: no second payout, no second prompt), up to ``max_retries`` times with
exponential backoff and jitter, waiting at least what ``Retry-After`` asks. A list answers one
:class:`ListPage` (a ``paymentcore.Page``); iterating it goes on through the following pages.

Importing this module loads httpx; ``import paymentcore`` does not import it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from decimal import Decimal
from types import TracebackType
from typing import Any, Final, TypeVar

import attrs
import httpx

from paymentcore import _remote as remote
from paymentcore._domain.models import BatchMode, CollectionKind, CollectionStatus, PayoutStatus
from paymentcore._domain.records import (
    Collection,
    EventDeliveryStatus,
    EventRecord,
    EventSummary,
    LedgerItem,
    MerchantBalance,
    Page,
    Payout,
    PayoutAllowance,
    PayoutBatch,
    PayoutItem,
    WebhookRegistration,
    WebhookSettings,
)
from paymentcore._remote import (
    IDEMPOTENCY_HEADER,
    RETRY_STATUSES,
    ApiConnectionError,
    Call,
    ListCall,
    Request,
    RetryPolicy,
    UnexpectedResponseError,
    error_from,
    read_json,
    retry_after_seconds,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "Account",
    "ApiConnectionError",
    "AsyncAccount",
    "AsyncClient",
    "AsyncCollect",
    "AsyncDisburse",
    "AsyncEvents",
    "AsyncListPage",
    "AsyncWebhooks",
    "Client",
    "Collect",
    "Disburse",
    "Events",
    "ListPage",
    "RetryPolicy",
    "UnexpectedResponseError",
    "Webhooks",
]

DEFAULT_TIMEOUT: Final = 30.0
"""Seconds to wait for the server (to connect, and then for each read or write) before a try fails."""

DEFAULT_LIMIT: Final = remote.DEFAULT_LIMIT
USER_AGENT: Final = "paymentcore-python-client"

T = TypeVar("T")

# errors after which nothing came back: the request may or may not have reached the server
_NO_ANSWER = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


# --- pages -------------------------------------------------------------------------------------------


@attrs.frozen
class ListPage(Page[T]):
    """One page of a list, as :class:`paymentcore.Page` (``data``, ``has_more``), fetched over HTTP.

    Iterating it yields this page's items and then those of every following page, fetched as they
    are reached (with the same filters and page size); :meth:`next_page` fetches one page.
    """

    _fetch: Callable[[str], ListPage[T]] = attrs.field(eq=False, repr=False, alias="fetch")
    _cursor: Callable[[T], str] = attrs.field(eq=False, repr=False, alias="cursor")

    def next_page(self) -> ListPage[T] | None:
        """The page after this one, or None when this is the last."""
        if not self.has_more or not self.data:
            return None
        return self._fetch(self._cursor(self.data[-1]))

    def __iter__(self) -> Iterator[T]:
        page: ListPage[T] | None = self
        while page is not None:
            yield from page.data
            page = page.next_page()


@attrs.frozen
class AsyncListPage(Page[T]):
    """:class:`ListPage` for the :class:`AsyncClient`: ``async for`` pages on, ``await
    page.next_page()`` fetches one page."""

    _fetch: Callable[[str], Awaitable[AsyncListPage[T]]] = attrs.field(eq=False, repr=False, alias="fetch")
    _cursor: Callable[[T], str] = attrs.field(eq=False, repr=False, alias="cursor")

    async def next_page(self) -> AsyncListPage[T] | None:
        """The page after this one, or None when this is the last."""
        if not self.has_more or not self.data:
            return None
        return await self._fetch(self._cursor(self.data[-1]))

    async def __aiter__(self) -> AsyncIterator[T]:
        page: AsyncListPage[T] | None = self
        while page is not None:
            for item in page.data:
                yield item
            page = await page.next_page()


# --- what both clients share ------------------------------------------------------------------------


def _policy(max_retries: int, backoff: float, max_backoff: float, max_retry_after: float) -> RetryPolicy:
    return RetryPolicy(
        max_retries=max_retries, backoff=backoff, max_backoff=max_backoff, max_retry_after=max_retry_after
    )


def _headers(api_key: str) -> dict[str, str]:
    if not isinstance(api_key, str) or not api_key.strip():
        raise ValueError("api_key must be the API key, a non-empty string")
    return {
        "Authorization": f"Bearer {api_key.strip()}",
        "Accept": "application/json",
        "User-Agent": USER_AGENT,
    }


def _base(base_url: str) -> str:
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError("base_url must be the server's http:// or https:// address")
    return base_url.rstrip("/")


def _request_headers(request: Request) -> dict[str, str]:
    headers: dict[str, str] = {}
    if request.body is not None:
        headers["Content-Type"] = "application/json"
    if request.idempotency_key is not None:
        headers[IDEMPOTENCY_HEADER] = request.idempotency_key
    return headers


def _answer(response: httpx.Response) -> Any:
    """The JSON of a success, or the error of a failure (raised)."""
    request_id = response.headers.get("x-request-id")
    if response.is_success:
        return read_json(response.content, status=response.status_code, request_id=request_id)
    raise error_from(response.status_code, response.headers, response.content)


def _retry_wait(policy: RetryPolicy, attempt: int, response: httpx.Response) -> float | None:
    if response.status_code not in RETRY_STATUSES:
        return None
    return policy.wait(attempt, retry_after_seconds(response.headers.get("retry-after")))


def _no_answer(exc: Exception, request: Request, tries: int) -> ApiConnectionError:
    error = ApiConnectionError(
        f"No answer from the server to {request.method} {request.path} after {tries} "
        f"tr{'y' if tries == 1 else 'ies'}: {type(exc).__name__}: {exc}"
    )
    error.http_status = 0  # no answer, so no status
    return error


def _read(call: Call[T], data: Any, response_id: str | None) -> T:
    try:
        return call.read(data)
    except UnexpectedResponseError as error:
        error.request_id = response_id
        raise


# --- the blocking client ----------------------------------------------------------------------------


class Client:
    """A blocking client for one API key of a paymentcore server.

    ``timeout`` is in seconds (or an ``httpx.Timeout``); ``max_retries``, ``backoff``, ``max_backoff``
    and ``max_retry_after`` are the :class:`RetryPolicy`. ``transport`` replaces httpx's network
    transport (``paymentcore.testing`` passes one that calls an app in the same process). Close it
    with :meth:`close`, or use it as a context manager.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        max_retries: int = 2,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        max_retry_after: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.retry_policy = _policy(max_retries, backoff, max_backoff, max_retry_after)
        self._http = httpx.Client(
            base_url=_base(base_url), headers=_headers(api_key), timeout=timeout, transport=transport
        )
        self._sleep: Callable[[float], None] = time.sleep
        self.collect = Collect(self)
        self.disburse = Disburse(self)
        self.account = Account(self)
        self.webhooks = Webhooks(self)
        self.events = Events(self)

    def __repr__(self) -> str:
        return f"Client({str(self._http.base_url)!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def _send(self, request: Request) -> tuple[Any, str | None]:
        content = request.content()
        headers = _request_headers(request)
        attempt = 0
        while True:
            try:
                response = self._http.request(
                    request.method, request.path, params=request.query, content=content, headers=headers
                )
            except _NO_ANSWER as exc:
                wait = self.retry_policy.wait(attempt, None)
                if wait is None:
                    raise _no_answer(exc, request, attempt + 1) from exc
            else:
                wait = _retry_wait(self.retry_policy, attempt, response)
                if wait is None:
                    return _answer(response), response.headers.get("x-request-id")
            self._sleep(wait)
            attempt += 1

    def _call(self, call: Call[T]) -> T:
        data, request_id = self._send(call.request)
        return _read(call, data, request_id)

    def _list(self, call: ListCall[T]) -> ListPage[T]:
        def fetch(starting_after: str | None) -> ListPage[T]:
            data, request_id = self._send(call.request(starting_after))
            items, more = _read(Call(call.request(starting_after), call.page), data, request_id)
            return ListPage(data=items, has_more=more, fetch=fetch, cursor=call.cursor)

        return fetch(call.starting_after)


class Collect:
    """Money in: direct charges and hosted checkouts (a key with the Collect scope)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def charge(
        self,
        *,
        amount: Decimal | int,
        currency: str,
        country: str,
        provider: str,
        phone: str,
        merchant_reference: str | None = None,
        description: str | None = None,
        idempotency_key: str | None = None,
    ) -> Collection:
        """Push a payment prompt to ``phone`` on ``provider``; the collection, PENDING until it clears.

        Two requests: the charge, then the collection it made (the charge's answer is shorter than the
        record). Pass your own ``idempotency_key`` (an order id) to make calling again after an error
        safe; the generated one makes only this call's own retries safe.
        """
        reference = self._client._call(
            remote.charge(
                amount=amount,
                currency=currency,
                country=country,
                provider=provider,
                phone=phone,
                merchant_reference=merchant_reference,
                description=description,
                idempotency_key=idempotency_key,
            )
        )
        return self._client._call(remote.collection_get(reference, kind=CollectionKind.CHARGE))

    def checkout(
        self,
        *,
        amount: Decimal | int,
        currency: str,
        description: str | None = None,
        merchant_reference: str | None = None,
        expires_in_minutes: int | None = None,
        idempotency_key: str | None = None,
    ) -> Collection:
        """A hosted checkout: the collection and its ``checkout_url``, payable for ``expires_in_minutes``."""
        return self._client._call(
            remote.checkout(
                amount=amount,
                currency=currency,
                description=description,
                merchant_reference=merchant_reference,
                expires_in_minutes=expires_in_minutes,
                idempotency_key=idempotency_key,
            )
        )

    def get(self, reference: str) -> Collection:
        """The collection ``reference``; NotFoundError also for another merchant's."""
        return self._client._call(remote.collection_get(reference))

    def list(
        self,
        *,
        limit: int = DEFAULT_LIMIT,
        starting_after: str | None = None,
        status: CollectionStatus | None = None,
        merchant_reference: str | None = None,
    ) -> ListPage[Collection]:
        """The collections, newest first, ``limit`` (1 to 100) a page; iterate to page on."""
        return self._client._list(
            remote.collections(
                limit=limit,
                starting_after=starting_after,
                status=status,
                merchant_reference=merchant_reference,
            )
        )


class Disburse:
    """Money out: payouts from the balance (a key with the Disburse scope)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def create(
        self,
        *,
        amount: Decimal | int,
        currency: str,
        phone: str,
        idempotency_key: str | None = None,
        recipient_name: str | None = None,
        provider: str | None = None,
        country: str | None = None,
        merchant_reference: str | None = None,
    ) -> Payout:
        """Pay ``amount`` out of the balance to ``phone``; the payout, PENDING.

        Give the ``idempotency_key`` you keep with the payout you mean to make (your own reference) so
        that calling again after an error answers the same payout; without one, the call's own retries
        are safe but a second call makes a second payout.
        """
        return self._client._call(
            remote.payout_create(
                amount=amount,
                currency=currency,
                phone=phone,
                idempotency_key=idempotency_key,
                recipient_name=recipient_name,
                provider=provider,
                country=country,
                merchant_reference=merchant_reference,
            )
        )

    def create_bulk(
        self,
        *,
        items: Sequence[PayoutItem],
        mode: BatchMode | str,
        idempotency_key: str | None = None,
    ) -> PayoutBatch:
        """Up to 1,000 payouts in one request (``POST /v1/disburse/bulk``); the batch, every item's
        outcome in request order (its payout, or its ``error``).

        ``mode`` ``each`` accepts or refuses each item on its own; ``all`` raises
        :class:`~paymentcore.BatchRefusedError` (its ``.items`` the refused ones) when one item is
        refused, and nothing is created. The key covers the whole request: give one you keep (a
        settlement run's id) so that calling again after an error answers the same batch.
        """
        return self._client._call(remote.bulk_create(items=items, mode=mode, idempotency_key=idempotency_key))

    def get_bulk(
        self, batch_id: str, *, limit: int = DEFAULT_LIMIT, starting_after: int | None = None
    ) -> PayoutBatch:
        """The batch as it is now: its progress and one page of its items (``limit``, 1 to 100, after
        the item whose ``index`` is ``starting_after``; ``has_more``). NotFoundError also for another
        merchant's batch."""
        return self._client._call(remote.bulk_get(batch_id, limit=limit, starting_after=starting_after))

    def get(self, reference: str) -> Payout:
        """The payout ``reference``; NotFoundError also for another merchant's."""
        return self._client._call(remote.payout_get(reference))

    def list(
        self,
        *,
        limit: int = DEFAULT_LIMIT,
        starting_after: str | None = None,
        status: PayoutStatus | None = None,
        merchant_reference: str | None = None,
    ) -> ListPage[Payout]:
        """The payouts, newest first, ``limit`` (1 to 100) a page; iterate to page on."""
        return self._client._list(
            remote.payouts(
                limit=limit,
                starting_after=starting_after,
                status=status,
                merchant_reference=merchant_reference,
            )
        )

    def limits(self, currency: str) -> PayoutAllowance:
        """What may be paid out in ``currency`` now: the switches, the ceilings, the spend."""
        return self._client._call(remote.payout_limits(currency))


class Account:
    """The merchant's money: balances and their history (any key of the merchant)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def balances(self) -> list[MerchantBalance]:
        """Available and reserved money per currency."""
        return self._client._call(remote.balances_get())

    def ledger(
        self, currency: str, *, limit: int = DEFAULT_LIMIT, starting_after: str | None = None
    ) -> ListPage[LedgerItem]:
        """The history of the balance in ``currency``, newest first; iterate to page on."""
        return self._client._list(remote.ledger(currency, limit=limit, starting_after=starting_after))


class Webhooks:
    """The merchant's webhook endpoint (any key of the merchant). Verify deliveries with
    :func:`paymentcore.construct_event`."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def register(
        self, *, url: str, events: str | None = None, idempotency_key: str | None = None
    ) -> WebhookRegistration:
        """Register (or replace) the endpoint; the answer's ``signing_secret`` is shown this once."""
        return self._client._call(
            remote.webhook_register(url=url, events=events, idempotency_key=idempotency_key)
        )

    def get(self) -> WebhookSettings:
        """The endpoint (never its secret); NotFoundError when none is registered."""
        return self._client._call(remote.webhook_get())


class Events:
    """The webhook events written for the merchant, and their deliveries (any key of the merchant)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def list(
        self,
        *,
        limit: int = DEFAULT_LIMIT,
        starting_after: str | None = None,
        type: str | None = None,
        delivery_status: EventDeliveryStatus | None = None,
    ) -> ListPage[EventSummary]:
        """The events, newest first, ``limit`` a page; ``type`` by its current or legacy name."""
        return self._client._list(
            remote.events(
                limit=limit, starting_after=starting_after, type=type, delivery_status=delivery_status
            )
        )

    def get(self, event_id: str) -> EventRecord:
        """The event with its body and every delivery attempt."""
        return self._client._call(remote.event_get(event_id))

    def resend(self, event_id: str, *, idempotency_key: str | None = None) -> EventRecord:
        """Queue one more delivery of the event (the server's worker sends it); the event."""
        return self._client._call(remote.event_resend(event_id, idempotency_key=idempotency_key))


# --- the async client -------------------------------------------------------------------------------


class AsyncClient:
    """:class:`Client` for asyncio: the same services, each method a coroutine. Close it with
    ``await client.aclose()``, or use ``async with``."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        max_retries: int = 2,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        max_retry_after: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.retry_policy = _policy(max_retries, backoff, max_backoff, max_retry_after)
        self._http = httpx.AsyncClient(
            base_url=_base(base_url), headers=_headers(api_key), timeout=timeout, transport=transport
        )
        self._sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        self.collect = AsyncCollect(self)
        self.disburse = AsyncDisburse(self)
        self.account = AsyncAccount(self)
        self.webhooks = AsyncWebhooks(self)
        self.events = AsyncEvents(self)

    def __repr__(self) -> str:
        return f"AsyncClient({str(self._http.base_url)!r})"

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _send(self, request: Request) -> tuple[Any, str | None]:
        content = request.content()
        headers = _request_headers(request)
        attempt = 0
        while True:
            try:
                response = await self._http.request(
                    request.method, request.path, params=request.query, content=content, headers=headers
                )
            except _NO_ANSWER as exc:
                wait = self.retry_policy.wait(attempt, None)
                if wait is None:
                    raise _no_answer(exc, request, attempt + 1) from exc
            else:
                wait = _retry_wait(self.retry_policy, attempt, response)
                if wait is None:
                    return _answer(response), response.headers.get("x-request-id")
            await self._sleep(wait)
            attempt += 1

    async def _call(self, call: Call[T]) -> T:
        data, request_id = await self._send(call.request)
        return _read(call, data, request_id)

    async def _list(self, call: ListCall[T]) -> AsyncListPage[T]:
        async def fetch(starting_after: str | None) -> AsyncListPage[T]:
            data, request_id = await self._send(call.request(starting_after))
            items, more = _read(Call(call.request(starting_after), call.page), data, request_id)
            return AsyncListPage(data=items, has_more=more, fetch=fetch, cursor=call.cursor)

        return await fetch(call.starting_after)


class AsyncCollect:
    """:class:`Collect` for the :class:`AsyncClient`."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def charge(
        self,
        *,
        amount: Decimal | int,
        currency: str,
        country: str,
        provider: str,
        phone: str,
        merchant_reference: str | None = None,
        description: str | None = None,
        idempotency_key: str | None = None,
    ) -> Collection:
        """:meth:`Collect.charge`."""
        reference = await self._client._call(
            remote.charge(
                amount=amount,
                currency=currency,
                country=country,
                provider=provider,
                phone=phone,
                merchant_reference=merchant_reference,
                description=description,
                idempotency_key=idempotency_key,
            )
        )
        return await self._client._call(remote.collection_get(reference, kind=CollectionKind.CHARGE))

    async def checkout(
        self,
        *,
        amount: Decimal | int,
        currency: str,
        description: str | None = None,
        merchant_reference: str | None = None,
        expires_in_minutes: int | None = None,
        idempotency_key: str | None = None,
    ) -> Collection:
        """:meth:`Collect.checkout`."""
        return await self._client._call(
            remote.checkout(
                amount=amount,
                currency=currency,
                description=description,
                merchant_reference=merchant_reference,
                expires_in_minutes=expires_in_minutes,
                idempotency_key=idempotency_key,
            )
        )

    async def get(self, reference: str) -> Collection:
        """:meth:`Collect.get`."""
        return await self._client._call(remote.collection_get(reference))

    async def list(
        self,
        *,
        limit: int = DEFAULT_LIMIT,
        starting_after: str | None = None,
        status: CollectionStatus | None = None,
        merchant_reference: str | None = None,
    ) -> AsyncListPage[Collection]:
        """:meth:`Collect.list`; ``async for`` pages on."""
        return await self._client._list(
            remote.collections(
                limit=limit,
                starting_after=starting_after,
                status=status,
                merchant_reference=merchant_reference,
            )
        )


class AsyncDisburse:
    """:class:`Disburse` for the :class:`AsyncClient`."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def create(
        self,
        *,
        amount: Decimal | int,
        currency: str,
        phone: str,
        idempotency_key: str | None = None,
        recipient_name: str | None = None,
        provider: str | None = None,
        country: str | None = None,
        merchant_reference: str | None = None,
    ) -> Payout:
        """:meth:`Disburse.create`."""
        return await self._client._call(
            remote.payout_create(
                amount=amount,
                currency=currency,
                phone=phone,
                idempotency_key=idempotency_key,
                recipient_name=recipient_name,
                provider=provider,
                country=country,
                merchant_reference=merchant_reference,
            )
        )

    async def create_bulk(
        self,
        *,
        items: Sequence[PayoutItem],
        mode: BatchMode | str,
        idempotency_key: str | None = None,
    ) -> PayoutBatch:
        """:meth:`Disburse.create_bulk`."""
        return await self._client._call(
            remote.bulk_create(items=items, mode=mode, idempotency_key=idempotency_key)
        )

    async def get_bulk(
        self, batch_id: str, *, limit: int = DEFAULT_LIMIT, starting_after: int | None = None
    ) -> PayoutBatch:
        """:meth:`Disburse.get_bulk`."""
        return await self._client._call(remote.bulk_get(batch_id, limit=limit, starting_after=starting_after))

    async def get(self, reference: str) -> Payout:
        """:meth:`Disburse.get`."""
        return await self._client._call(remote.payout_get(reference))

    async def list(
        self,
        *,
        limit: int = DEFAULT_LIMIT,
        starting_after: str | None = None,
        status: PayoutStatus | None = None,
        merchant_reference: str | None = None,
    ) -> AsyncListPage[Payout]:
        """:meth:`Disburse.list`; ``async for`` pages on."""
        return await self._client._list(
            remote.payouts(
                limit=limit,
                starting_after=starting_after,
                status=status,
                merchant_reference=merchant_reference,
            )
        )

    async def limits(self, currency: str) -> PayoutAllowance:
        """:meth:`Disburse.limits`."""
        return await self._client._call(remote.payout_limits(currency))


class AsyncAccount:
    """:class:`Account` for the :class:`AsyncClient`."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def balances(self) -> list[MerchantBalance]:
        """:meth:`Account.balances`."""
        return await self._client._call(remote.balances_get())

    async def ledger(
        self, currency: str, *, limit: int = DEFAULT_LIMIT, starting_after: str | None = None
    ) -> AsyncListPage[LedgerItem]:
        """:meth:`Account.ledger`; ``async for`` pages on."""
        return await self._client._list(remote.ledger(currency, limit=limit, starting_after=starting_after))


class AsyncWebhooks:
    """:class:`Webhooks` for the :class:`AsyncClient`."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def register(
        self, *, url: str, events: str | None = None, idempotency_key: str | None = None
    ) -> WebhookRegistration:
        """:meth:`Webhooks.register`."""
        return await self._client._call(
            remote.webhook_register(url=url, events=events, idempotency_key=idempotency_key)
        )

    async def get(self) -> WebhookSettings:
        """:meth:`Webhooks.get`."""
        return await self._client._call(remote.webhook_get())


class AsyncEvents:
    """:class:`Events` for the :class:`AsyncClient`."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def list(
        self,
        *,
        limit: int = DEFAULT_LIMIT,
        starting_after: str | None = None,
        type: str | None = None,
        delivery_status: EventDeliveryStatus | None = None,
    ) -> AsyncListPage[EventSummary]:
        """:meth:`Events.list`; ``async for`` pages on."""
        return await self._client._list(
            remote.events(
                limit=limit, starting_after=starting_after, type=type, delivery_status=delivery_status
            )
        )

    async def get(self, event_id: str) -> EventRecord:
        """:meth:`Events.get`."""
        return await self._client._call(remote.event_get(event_id))

    async def resend(self, event_id: str, *, idempotency_key: str | None = None) -> EventRecord:
        """:meth:`Events.resend`."""
        return await self._client._call(remote.event_resend(event_id, idempotency_key=idempotency_key))
