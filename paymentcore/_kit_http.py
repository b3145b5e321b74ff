"""An ASGI app in the same process, reached through httpx: the testing kit's wire to its core.

:class:`AppThread` runs the app (its lifespan started once, and ended at :meth:`AppThread.close`) on an
event loop of its own, on a daemon thread; every request goes to it through ``httpx.ASGITransport``.
:class:`SyncBridge` and :class:`AsyncBridge` are the httpx transports a blocking and an async client
use to reach it: the request and the whole answer cross between threads, nothing else. So a test
drives the real app (routing, authentication, rate limits, the JSON on the wire) with the same client
an integration runs with, without a port or a server process.

Imported only by ``paymentcore.testing`` when a kit makes a client (it loads httpx).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import httpx

__all__ = ["AppThread", "AsyncBridge", "SyncBridge"]

T = TypeVar("T")
Message = dict[str, Any]
ASGIApp = Any  # (scope, receive, send) -> awaitable: typed loosely, so the library needs no ASGI types


class AppThread:
    """An ASGI app served on its own event loop thread, its lifespan started at once."""

    def __init__(self, app: ASGIApp, *, timeout: float = 30.0) -> None:
        self._app = app
        self._timeout = timeout
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="paymentcore-kit-app", daemon=True
        )
        self._thread.start()
        self._asgi = httpx.ASGITransport(app=app)
        self._lifespan_in: asyncio.Queue[Message] | None = None
        self._lifespan_out: asyncio.Queue[Message] | None = None
        self._lifespan: asyncio.Future[None] | None = None
        self._closed = False
        self.run(self._start())

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` on the app's loop and wait for its result (from any other thread)."""
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(self._timeout)

    def submit(self, work: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        """Run ``work`` on the app's loop; a future of the caller's running loop for its result."""
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self._loop))

    async def call(
        self, method: str, url: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> httpx.Response:
        """One request to the app; the answer read whole (so it can cross to another thread)."""
        request = httpx.Request(method, url, headers=headers, content=body)
        answer = await self._asgi.handle_async_request(request)
        content = await answer.aread()
        return httpx.Response(answer.status_code, headers=answer.headers.raw, content=content)

    async def _start(self) -> None:
        self._lifespan_in, self._lifespan_out = asyncio.Queue(), asyncio.Queue()
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
        self._lifespan = asyncio.ensure_future(
            self._app(scope, self._lifespan_in.get, self._lifespan_out.put)
        )
        await self._lifespan_in.put({"type": "lifespan.startup"})
        answer = await self._lifespan_out.get()
        if answer["type"] != "lifespan.startup.complete":
            raise RuntimeError(f"the app did not start: {answer.get('message', answer['type'])}")

    async def _stop(self) -> None:
        assert self._lifespan_in is not None and self._lifespan_out is not None and self._lifespan is not None
        await self._lifespan_in.put({"type": "lifespan.shutdown"})
        await self._lifespan_out.get()
        await self._lifespan

    def close(self) -> None:
        """End the app's lifespan and stop its loop (once)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.run(self._stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(self._timeout)
            self._loop.close()


def _parts(request: httpx.Request, body: bytes) -> tuple[str, str, list[tuple[bytes, bytes]], bytes]:
    return request.method, str(request.url), list(request.headers.raw), body


class SyncBridge(httpx.BaseTransport):
    """The transport of a blocking ``httpx.Client`` (``paymentcore.client.Client``) to an
    :class:`AppThread`."""

    def __init__(self, app: AppThread) -> None:
        self._app = app

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._app.run(self._app.call(*_parts(request, request.read())))


class AsyncBridge(httpx.AsyncBaseTransport):
    """The transport of an ``httpx.AsyncClient`` (``paymentcore.client.AsyncClient``), on any event loop,
    to an :class:`AppThread`."""

    def __init__(self, app: AppThread) -> None:
        self._app = app

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        return await self._app.submit(self._app.call(*_parts(request, body)))
