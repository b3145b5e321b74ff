"""Routing fixes installed on the app by ``create_app``: no slash redirects, and a complete ``Allow``.

Starlette's router answers a path that differs from a route only by a trailing slash with a ``307``
whose ``Location`` is built from the client's ``Host`` header, before any authentication runs. Here
such a path is simply unknown: ``404 NOT_FOUND`` in the API's error shape, like any other.

On a ``405`` Starlette lists only the methods of the first route whose path matched, but a path can be
served by several routes (``/v1/webhook``: GET and PUT/POST; ``/checkout/{reference}``: GET and POST).
``Allow`` here is the union over every route matching the path, sorted, with ``HEAD`` wherever ``GET``
is served (Starlette adds it to a route's methods).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import cast

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import HTTPExceptionHandler, Scope

__all__ = ["allowed_methods", "install_routing"]


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


def install_routing(app: Starlette) -> None:
    """Turn off slash redirects on ``app`` and make its 405s list every method the path serves.

    Call after the app is built, before it serves a request: the ``HTTPException`` handler already
    registered (which renders the error shape) is wrapped, not replaced.
    """
    app.router.redirect_slashes = False
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
