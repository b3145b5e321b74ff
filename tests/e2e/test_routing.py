"""Routing edges: a trailing slash is a plain 404 (never a redirect), and a 405 lists every method served."""

from __future__ import annotations

import re
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Match, Route, Router
from starlette.testclient import TestClient

from paymentcore_server._routing import DirectLane, RouteIndex, allowed_methods, install_routing

from conftest import Client
from test_api_foundation import assert_error

CHARGE = {"amount": 5000, "currency": "XAF", "country": "CM", "provider": "mtn_cm", "phone": "670000000"}
HOSTILE_HOST = {"Host": "evil.example"}


def assert_not_found(response: Any) -> None:
    """404 NOT_FOUND in the error shape, exactly as an unknown path answers, and no redirect at all."""
    assert response.status_code != 307
    assert "location" not in response.headers
    body = assert_error(response, 404, "NOT_FOUND")
    assert body["message"] == "No such path."
    assert response.headers["content-type"].startswith("application/json")


def allow_of(response: Any) -> list[str]:
    return [method.strip() for method in response.headers["allow"].split(",")]


def checkout_reference(client: Client) -> str:
    reference: str = client.post("/v1/collect/checkout", {"amount": 5000, "currency": "XAF"}).json()[
        "reference"
    ]
    return reference


# --- trailing slashes ---------------------------------------------------------------------------------


def test_trailing_slash_on_a_collection_is_404_with_or_without_a_key(client: Client) -> None:
    reference = client.post("/v1/collect/charge", CHARGE).json()["reference"]
    assert client.get(f"/v1/collect/{reference}").status_code == 200
    path = f"/v1/collect/{reference}/"
    for key in (client.collect_key, None):
        headers = {**client.headers(key), **HOSTILE_HOST}
        assert_not_found(client.http.get(path, headers=headers, follow_redirects=False))
    assert_not_found(client.http.get("/v1/collect/REQ-123/", follow_redirects=False))
    assert_not_found(client.http.get(f"/v1/payments/{reference}/", follow_redirects=False))


@pytest.mark.parametrize(
    "path",
    ["/v1/countries/", "/v1/account/balances/", "/v1/webhook/", "/openapi.json/", "/v1/countries//"],
)
def test_trailing_slash_on_api_gets_is_404(client: Client, path: str) -> None:
    assert_not_found(client.http.get(path, headers=HOSTILE_HOST, follow_redirects=False))
    assert_not_found(client.get(path))
    head = client.http.head(path, follow_redirects=False)
    assert head.status_code == 404 and "location" not in head.headers
    assert head.headers["x-request-id"] and head.content == b""


def test_trailing_slash_on_a_post_is_404_and_writes_nothing(client: Client) -> None:
    headers = {**client.headers(client.collect_key, "idem-slash"), "Content-Type": "application/json"}
    for path in ("/v1/collect/charge/", "/v1/collect/checkout/", "/v1/payments/", "/v1/webhook/"):
        response = client.http.post(path, json=CHARGE, headers=headers, follow_redirects=False)
        assert_not_found(response)
    disburse = {**client.headers(client.disburse_key), "Content-Type": "application/json"}
    assert_not_found(client.http.post("/v1/disburse/", json={}, headers=disburse, follow_redirects=False))
    assert client.sandbox.prompt_count == 0
    with client.core.store.read() as tx:
        assert tx.collections.due(client.clock.now() + 10**12, 10) == []


def test_trailing_slash_on_checkout_pages_is_404(client: Client) -> None:
    reference = checkout_reference(client)
    assert client.http.get(f"/checkout/{reference}").status_code == 200
    for path in (f"/checkout/{reference}/", f"/checkout/{reference}/status/", "/checkout-assets/page.js/"):
        assert_not_found(client.http.get(path, headers=HOSTILE_HOST, follow_redirects=False))
    form = {"provider": "mtn_cm", "phone": "670000000"}
    submitted = client.http.post(f"/checkout/{reference}/", data=form, follow_redirects=False)
    assert_not_found(submitted)
    assert client.sandbox.prompt_count == 0


def test_trailing_slash_on_healthz_is_404(client: Client) -> None:
    assert client.http.get("/healthz").status_code == 200
    assert_not_found(client.http.get("/healthz/", headers=HOSTILE_HOST, follow_redirects=False))


def test_missing_slash_is_not_redirected_either(client: Client) -> None:
    # No route ends in "/", so the router's other redirect (adding a slash) must not fire either.
    assert_not_found(client.http.get("/v1/nothing-here", follow_redirects=False))
    assert_not_found(client.http.get("/checkout", follow_redirects=False))


def test_unknown_paths_are_404_in_the_error_shape(client: Client) -> None:
    for path in ("/v1/nothing-here", "/v1/nothing-here/", "/", "/checkout/", "/v1/collect/"):
        assert_not_found(client.http.get(path, follow_redirects=False))
        assert_not_found(client.get(path))


# --- 405 and Allow ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("DELETE", "/v1/webhook", ["GET", "HEAD", "POST", "PUT"]),
        ("PATCH", "/v1/webhook", ["GET", "HEAD", "POST", "PUT"]),
        # GET /v1/disburse lists payouts (issue 17): the path serves GET and POST
        ("DELETE", "/v1/disburse", ["GET", "HEAD", "POST"]),
        ("PUT", "/v1/disburse", ["GET", "HEAD", "POST"]),
        ("DELETE", "/v1/collect/REQ-123", ["GET", "HEAD"]),
        ("POST", "/v1/countries", ["GET", "HEAD"]),
        ("GET", "/v1/webhooks", ["POST"]),
        ("POST", "/healthz", ["GET", "HEAD"]),
    ],
)
def test_405_lists_every_method_the_path_serves(
    client: Client, method: str, path: str, allow: list[str]
) -> None:
    for key in (client.collect_key, None):
        response = client.http.request(method, path, headers=client.headers(key))
        body = assert_error(response, 405, "INVALID_REQUEST")
        assert body["message"] == f"{method} is not allowed on this path."
        assert allow_of(response) == allow
        assert method not in allow_of(response)


def test_405_on_the_checkout_page_includes_post(client: Client) -> None:
    reference = checkout_reference(client)
    for method in ("PUT", "DELETE", "PATCH"):
        response = client.http.request(method, f"/checkout/{reference}")
        assert_error(response, 405, "INVALID_REQUEST")
        assert allow_of(response) == ["GET", "HEAD", "POST"]
    status = client.http.post(f"/checkout/{reference}/status")
    assert_error(status, 405, "INVALID_REQUEST")
    assert allow_of(status) == ["GET", "HEAD"]


def test_every_path_of_the_app_advertises_the_union_of_its_routes(client: Client) -> None:
    """Independent of the list above: for each route's path, the union of every route whose regex matches.

    Paths overlap: ``/v1/collect/charge`` (POST) is also ``/v1/collect/{reference}`` (GET), so a GET there
    is routed, to the lookup, and ``Allow`` says so.
    """
    app = client.http.app
    assert isinstance(app, Starlette)
    routes = [route for route in app.routes if isinstance(route, Route)]
    assert len(routes) == len(app.routes)
    paths = {re.sub(r"\{[^}]+\}", "X1", route.path) for route in routes}
    for path in sorted(paths):
        served: set[str] = set()
        for route in routes:
            assert route.methods is not None
            if route.path_regex.match(path):
                served |= route.methods
        assert served and ("GET" not in served or "HEAD" in served)
        for method in ("DELETE", "PATCH", "GET", "POST", "PUT"):
            if method in served:
                continue
            response = client.http.request(method, path, headers=client.headers(client.collect_key))
            assert_error(response, 405, "INVALID_REQUEST")
            assert allow_of(response) == sorted(served), (method, path)
    assert allow_of(client.http.delete("/v1/collect/charge")) == ["GET", "HEAD", "POST"]


def test_served_methods_still_work(client: Client) -> None:
    assert client.get("/v1/countries").status_code == 200
    assert client.http.head("/healthz").status_code == 200
    assert client.http.get("/healthz").json() == {"status": "ok"}


# --- the helpers on their own -------------------------------------------------------------------------


async def _ok(request: Request) -> Response:
    return PlainTextResponse("ok")


async def _render(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return PlainTextResponse(f"{exc.status_code}", status_code=exc.status_code, headers=exc.headers)


def _http_scope(method: str, path: str) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "root_path": ""}


def test_allowed_methods_unions_matching_routes_only() -> None:
    routes = [
        Route("/a", _ok, methods=["PUT", "POST"]),
        Route("/b/{x}", _ok, methods=["DELETE"]),
        Route("/a", _ok, methods=["GET"]),
        Route("/b/{x}/c", _ok, methods=["GET"]),
    ]
    assert allowed_methods(routes, _http_scope("DELETE", "/a")) == ["GET", "HEAD", "POST", "PUT"]
    assert allowed_methods(routes, _http_scope("GET", "/a")) == ["GET", "HEAD", "POST", "PUT"]
    assert allowed_methods(routes, _http_scope("GET", "/b/1")) == ["DELETE"]
    assert allowed_methods(routes, _http_scope("GET", "/b/1/")) == []
    assert allowed_methods(routes, _http_scope("GET", "/nowhere")) == []


def test_install_routing_wraps_a_sync_handler_and_needs_one() -> None:
    def render_sync(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return PlainTextResponse("sync", status_code=exc.status_code, headers=exc.headers)

    routes = [Route("/a", _ok, methods=["POST"]), Route("/a", _ok, methods=["GET"])]
    app = Starlette(routes=routes, exception_handlers={HTTPException: render_sync})
    install_routing(app)
    with TestClient(app) as http:
        response = http.delete("/a")
        assert response.status_code == 405 and response.text == "sync"
        assert response.headers["allow"] == "GET, HEAD, POST"
        slash = http.get("/a/", follow_redirects=False)
        assert slash.status_code == 404 and "location" not in slash.headers

    with pytest.raises(RuntimeError):
        install_routing(Starlette(routes=routes))


def test_install_routing_keeps_an_async_handler() -> None:
    app = Starlette(routes=[Route("/a", _ok, methods=["GET"])], exception_handlers={HTTPException: _render})
    install_routing(app)
    with TestClient(app) as http:
        response = http.post("/a")
        assert response.status_code == 405 and response.text == "405"
        assert response.headers["allow"] == "GET, HEAD"


# --- the route index ----------------------------------------------------------------------------------


def _routers_choice(router: Router, scope: dict[str, Any]) -> tuple[BaseRoute, dict[str, Any]] | None:
    """What Starlette's router does: the first route of its list that matches path and method."""
    for route in router.routes:
        match, child = route.matches(scope)
        if match is Match.FULL:
            return route, child["path_params"]
    return None


def _sample_paths(template: str) -> list[str]:
    segments = ["X1", "bulk", "charge", "a b", "%2F", "caf\u00e9", "-"]
    paths = [re.sub(r"\{[^}]+\}", value, template) for value in segments]
    return [variant for path in paths for variant in (path, path + "/", path + "\n", path + "/x", path[:-1])]


def test_the_index_chooses_the_route_the_router_would(client: Client) -> None:
    """Over every path shape the app serves (and near misses), the index names the router's own choice
    with the same parameters, or leaves the request to the router; the API's hot paths it answers."""
    app = client.http.app
    assert isinstance(app, Starlette)
    index = RouteIndex(app.router)
    found = 0
    templates = {route.path for route in app.routes if isinstance(route, Route)}
    for template in sorted(templates):
        for path in _sample_paths(template):
            for method in ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH"):
                scope = {"type": "http", "method": method, "path": path, "root_path": ""}
                chosen = index.find(scope)
                if chosen is not None:
                    found += 1
                    assert _routers_choice(app.router, scope) == chosen, (method, path)
    assert found > 100
    hot = {
        ("GET", "/v1/disburse/po_1"): "/v1/disburse/{reference}",
        ("GET", "/v1/collect/pay_1"): "/v1/collect/{reference}",
        ("POST", "/v1/disburse"): "/v1/disburse",
    }
    for (method, path), template in hot.items():
        chosen = index.find({"type": "http", "method": method, "path": path, "root_path": ""})
        assert chosen is not None and getattr(chosen[0], "path", None) == template


def _echo_route(request: Request) -> Response:
    return PlainTextResponse(f"{request.scope['route'].path} {sorted(request.path_params.items())}")


def test_the_index_keeps_the_routers_order_and_sees_routes_added_later() -> None:
    async def echo(request: Request) -> Response:
        return _echo_route(request)

    routes = [
        Route("/a/{x}", echo, methods=["GET"]),
        Route("/a/b", echo, methods=["GET", "POST"]),
        Route("/n/{x:int}", echo, methods=["GET"]),
        Route("/n/{y}", echo, methods=["GET"]),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _render})
    install_routing(app)
    with TestClient(app) as http:
        assert http.get("/a/b").text == "/a/{x} [('x', 'b')]"  # the first in the list wins, as in the router
        assert http.post("/a/b").text == "/a/b []"
        assert http.get("/n/5").text == "/n/{x:int} [('x', 5)]"  # left to the router: it converts
        assert http.get("/n/five").text == "/n/{y} [('y', 'five')]"
        assert http.put("/a/b").status_code == 405
        assert http.get("/a/b/c").status_code == 404
        app.router.routes.insert(0, Route("/a/b", echo, methods=["GET"]))
        assert http.get("/a/b").text == "/a/b []"
    index = RouteIndex(app.router)
    assert index.find({"type": "http", "method": "GET", "path": "/n/5", "root_path": ""}) is None
    assert index.find({"type": "http", "method": "GET", "path": "/a/b", "root_path": "/mounted"}) is None


def test_the_direct_lane_serves_its_routes_and_leaves_the_rest_to_the_router() -> None:
    served: list[str] = []

    class Raw:  # an ASGI app, as the API's endpoints are
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            past = "starlette.exception_handlers" not in scope  # the exception middleware was skipped
            served.append(f"{scope['route'].path} {scope['path_params']} {past}")
            await PlainTextResponse("raw")(scope, receive, send)

    raw = Raw()

    async def refuses(request: Request) -> Response:
        raise HTTPException(409)

    routes = [Route("/d/{x}", raw, methods=["GET"]), Route("/d/x", refuses, methods=["POST"])]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _render})
    index = install_routing(app)
    app.add_middleware(DirectLane, index=index, direct=lambda route: route.endpoint is raw)
    with TestClient(app) as http:
        assert http.get("/d/7").text == "raw" and served == ["/d/{x} {'x': '7'} True"]
        assert http.head("/d/7").status_code == 200
        refused = http.post("/d/x")  # not direct: through the exception middleware, rendered
        assert refused.status_code == 409 and refused.text == "409"
        wrong = http.put("/d/7")  # a wrong method is the router's 405, with every method of the path
        assert wrong.status_code == 405 and wrong.headers["allow"] == "GET, HEAD"
        assert http.get("/e/7").status_code == 404
    assert len(served) == 2


def test_the_index_sees_a_route_replaced_in_place_and_leaves_a_last_newline_to_the_router() -> None:
    async def fixed(request: Request) -> Response:
        return PlainTextResponse("fixed")

    async def by_id(request: Request) -> Response:
        return PlainTextResponse("id")

    routes = [Route("/items/new", fixed, methods=["GET"]), Route("/items/{id}", by_id, methods=["GET"])]
    router = Router(routes)
    index = RouteIndex(router)
    newline = {"type": "http", "method": "GET", "path": "/items/new\n", "root_path": ""}
    assert _routers_choice(router, newline) == (router.routes[0], {})  # "$" matches before a last "\n"
    assert index.find(newline) is None  # so the router decides
    one = {"type": "http", "method": "GET", "path": "/items/1", "root_path": ""}
    assert index.find(one) == (router.routes[1], {"id": "1"})
    router.routes[1] = Route("/items/{key}", fixed, methods=["GET"])  # the same length, another route
    assert index.find(one) == (router.routes[1], {"key": "1"})
