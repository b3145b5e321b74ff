"""Routing fixes installed on the app by ``create_app``: no slash redirects, and a complete ``Allow``.

Starlette's router answers a path that differs from a route only by a trailing slash with a ``307``
whose ``Location`` is built from the client's ``Host`` header, before any authentication runs. Here
such a path is simply unknown: ``404 NOT_FOUND`` in the API's error shape, like any other.

On a ``405`` Starlette lists only the methods of the first route whose path matched, but a path can be
served by several routes (``/v1/webhook``: GET and PUT/POST; ``/checkout/{reference}``: GET and POST).
``Allow`` here is the union over every route matching the path, sorted, with ``HEAD`` wherever ``GET``
is served (Starlette adds it to a route's methods).

Starlette's router tries its routes one by one, each with a regular expression; the API's hot paths sat
a dozen routes down. :class:`RouteIndex` finds, in two dictionary lookups, the route the router would
choose for a path that is a route's fixed text, or its fixed text and one last ``{name}`` segment, and
hands every other request to the router as before.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from operator import is_
from typing import Any, cast

from starlette.applications import Starlette
from starlette.convertors import StringConvertor
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route, Router
from starlette.types import ASGIApp, HTTPExceptionHandler, Receive, Scope, Send

__all__ = ["DirectLane", "RouteIndex", "allowed_methods", "install_routing"]

#: (the route's place in the router's list, the route, the name of its last segment's parameter or None)
_Entry = tuple[int, Route, str | None]


def _literal_head(route: BaseRoute) -> str:
    """The text every path ``route`` can match starts with ("" when any path may match it)."""
    path = getattr(route, "path", None)
    if not isinstance(path, str) or not path.startswith("/"):
        return ""
    return path.split("{", 1)[0]


class RouteIndex:
    """The router's own choice for the common requests, found without trying each route.

    Starlette's router hands a request to the first route of its list that matches both the path and
    the method (``Match.FULL``). The index holds the routes whose path is a fixed text (``/v1/disburse``)
    or a fixed text and one last ``{name}`` segment of the default convertor (``/v1/disburse/{reference}``,
    a segment of one or more characters other than ``/``), by that text. Every other route stays in the
    router's list only, with the fixed text its paths start with: a request one of those could take
    before the index's candidate, a path the index does not hold, or a wrong method (the 405 and 404
    answers, with their ``Allow``) goes to the router, which decides as always.
    """

    def __init__(self, router: Router) -> None:
        self._router = router
        self._built_from: list[BaseRoute] = []  # the routes it was built from, in order
        self._fixed: dict[str, list[_Entry]] = {}
        self._by_head: dict[str, list[_Entry]] = {}
        self._opaque: list[tuple[int, str]] = []

    def _build(self) -> None:
        routes = list(self._router.routes)
        fixed: dict[str, list[_Entry]] = {}
        by_head: dict[str, list[_Entry]] = {}
        opaque: list[tuple[int, str]] = []
        for place, route in enumerate(routes):
            if isinstance(route, Route) and route.methods:
                names = list(route.param_convertors)
                head = _literal_head(route)
                if not names:
                    fixed.setdefault(route.path, []).append((place, route, None))
                    continue
                name = names[0]
                if (
                    len(names) == 1
                    and route.path == head + "{" + name + "}"
                    and head.endswith("/")
                    and isinstance(route.param_convertors[name], StringConvertor)
                ):
                    by_head.setdefault(head, []).append((place, route, name))
                    continue
            opaque.append((place, _literal_head(route)))
        self._fixed, self._by_head, self._opaque = fixed, by_head, opaque
        self._built_from = routes

    def find(self, scope: Scope) -> tuple[Route, dict[str, Any]] | None:
        """The route and path parameters the router would take for ``scope``, or None: let it decide."""
        path: str = scope["path"]
        if scope.get("root_path") or path.endswith("\n"):  # the router strips a root path first, and
            return None  # its patterns' "$" also matches before a last newline: leave both to it
        routes = self._router.routes
        if len(routes) != len(self._built_from) or not all(map(is_, routes, self._built_from)):
            self._build()  # routes added, removed or replaced since
        method = scope["method"]
        best: _Entry | None = None
        for entry in self._fixed.get(path, ()):
            if method in entry[1].methods:  # type: ignore[operator]
                best = entry
                break
        cut = path.rfind("/") + 1
        if 0 < cut < len(path):
            for entry in self._by_head.get(path[:cut], ()):
                if method in entry[1].methods:  # type: ignore[operator]
                    if best is None or entry[0] < best[0]:
                        best = entry
                    break
        if best is None:
            return None
        place, route, name = best
        for before, head in self._opaque:
            if before > place:
                break
            if path.startswith(head):
                return None
        params = dict(scope.get("path_params", {}))
        if name is not None:
            params[name] = path[cut:]
        return route, params

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = self.find(scope) if scope["type"] == "http" else None
        if found is None:
            await self._router.app(scope, receive, send)
            return
        await self.hand_over(scope, receive, send, *found)

    async def hand_over(
        self, scope: Scope, receive: Receive, send: Send, route: Route, params: dict[str, Any]
    ) -> None:
        """Serve the request with ``route`` as the router does once it has chosen it."""
        scope.setdefault("router", self._router)
        scope["route"] = route
        scope["endpoint"] = route.endpoint
        scope["path_params"] = params
        await route.handle(scope, receive, send)


class DirectLane:
    """ASGI middleware: a request the router would give to a route that ``direct`` accepts goes to that
    route at once, past Starlette's exception middleware and the router's own layers; every other
    request goes on through them. For routes whose app answers every error it knows in the API's shape
    itself, so that those layers have nothing to do for them (an error it does not know still goes up
    to the server's 500)."""

    def __init__(self, app: ASGIApp, *, index: RouteIndex, direct: Callable[[Route], bool]) -> None:
        self.app = app
        self._index = index  # the router's own (install_routing's): one index, built once
        self._direct = direct

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            found = self._index.find(scope)
            if found is not None and self._direct(found[0]):
                await self._index.hand_over(scope, receive, send, *found)
                return
        await self.app(scope, receive, send)


def allowed_methods(routes: Iterable[BaseRoute], scope: Scope) -> list[str]:
    """Every method some route among ``routes`` serves on the path of ``scope``, sorted.

    A route whose path matches answers ``Match.PARTIAL`` when only the method is wrong, ``Match.FULL``
    when it is right; either way its methods count. Routes without a method list (they accept any
    method) never lead to a 405 and are left out.
    """
    methods: set[str] = set()
    for route in routes:
        if not isinstance(route, Route) or route.methods is None:
            continue
        match, _ = route.matches(scope)
        if match is not Match.NONE:
            methods.update(route.methods)
    return sorted(methods)


def install_routing(app: Starlette) -> RouteIndex:
    """Turn off slash redirects on ``app``, make its 405s list every method the path serves, and put a
    :class:`RouteIndex` in front of its router; returns the index (for a :class:`DirectLane`).

    Call after the app is built, before it serves a request: the ``HTTPException`` handler already
    registered (which renders the error shape) is wrapped, not replaced.
    """
    app.router.redirect_slashes = False
    index = RouteIndex(app.router)
    if app.router.middleware_stack == app.router.app:  # no middleware of the router's own in between
        app.router.middleware_stack = index
    if HTTPException not in app.exception_handlers:
        raise RuntimeError("install_routing needs an HTTPException handler on the app")
    render = cast(HTTPExceptionHandler, app.exception_handlers[HTTPException])
    routes = app.router.routes

    async def http_error(request: Request, exc: Exception) -> Response:
        if isinstance(exc, HTTPException) and exc.status_code == 405:
            methods = allowed_methods(routes, request.scope)
            if methods:
                headers = {**(exc.headers or {}), "Allow": ", ".join(methods)}
                exc = HTTPException(405, detail=exc.detail, headers=headers)
        response = render(request, exc)
        if inspect.isawaitable(response):
            response = await response
        return response

    app.exception_handlers[HTTPException] = http_error
    return index
