"""The servers of the HTTP benchmarks, each started by ``python benchmarks/bench_serve.py KIND ...``.

- ``bare``: a Starlette app with one endpoint, GET /json -> {"ok": true};
- ``echo``: POST /echo doing our API's plumbing without the core: the Bearer key looked up in a dict,
  the Idempotency-Key header read, the JSON body parsed, the body echoed back (201);
- ``core``: our server, ``paymentcore_server.app.create_app`` on a database prepared beforehand: a SQLite
  file, or a PostgreSQL URL (``--db postgresql://...``; several ``core`` servers may share one).

All three run through the same call as ``paymentcore serve`` (``paymentcore_server._serving.run``:
uvicorn, every waiting connection accepted at each turn of the loop) with :data:`UVICORN_FLAGS`, so they
differ only in the app. uvicorn picks its event loop and HTTP parser with ``auto`` as ``paymentcore
serve`` does: uvloop and httptools when installed (every install has them: uvicorn's standard extras),
asyncio and h11 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

HOST = "127.0.0.1"
UVICORN_FLAGS: dict[str, Any] = {
    "host": HOST,
    "log_level": "warning",
    "access_log": False,
    "loop": "auto",
    "http": "auto",
    "workers": None,  # one process, as `paymentcore serve`
}


def event_loop_and_parser() -> tuple[str, str]:
    """What uvicorn's ``auto`` settles on in this environment."""
    loop = "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"
    http = "httptools" if importlib.util.find_spec("httptools") is not None else "h11"
    return loop, http


def bare_app() -> Starlette:
    async def json_endpoint(request: Request) -> Response:
        return JSONResponse({"ok": True})

    return Starlette(routes=[Route("/json", json_endpoint, methods=["GET"])])


def echo_app(tokens: dict[str, str]) -> Starlette:
    """The echo baseline: our API's auth and header parsing, a JSON parse, no core."""

    async def echo(request: Request) -> Response:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        merchant = tokens.get(token.strip()) if scheme.lower() == "bearer" else None
        if merchant is None:
            return JSONResponse({"code": "UNAUTHORIZED"}, status_code=401)
        key = request.headers.get("idempotency-key")
        try:
            body = json.loads(await request.body())
        except ValueError:
            return JSONResponse({"code": "INVALID_REQUEST"}, status_code=400)
        return JSONResponse({"merchantId": merchant, "idempotencyKey": key, "body": body}, status_code=201)

    return Starlette(routes=[Route("/echo", echo, methods=["POST"])])


def core_app(db: str, synchronous: str, worker: bool, pool_size: int | None = None) -> Starlette:
    from paymentcore import Config, PaymentCore
    from paymentcore_server.app import create_app

    config = Config(sandbox_delay=2.0)
    if db.startswith(("postgresql://", "postgres://")):  # as `paymentcore --db URL serve` decides
        core = PaymentCore.postgresql(db, pool_size=pool_size, sender=None, config=config)
    else:
        core = PaymentCore.sqlite(Path(db), synchronous=synchronous, sender=None, config=config)
    return create_app(core, run_worker=worker, close_core=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a server for the benchmarks")
    parser.add_argument("kind", choices=["bare", "echo", "core"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", help="core: the prepared SQLite file or PostgreSQL URL")
    parser.add_argument("--synchronous", choices=["FULL", "NORMAL"], default="FULL")
    parser.add_argument(
        "--pool-size", type=int, default=None, help="core on PostgreSQL: connections (default: the library's)"
    )
    parser.add_argument("--worker", action="store_true", help="core: run the background worker too")
    parser.add_argument("--tokens", type=Path, help="echo: a JSON object of API key -> merchant id")
    args = parser.parse_args(argv)
    app: Starlette
    if args.kind == "bare":
        app = bare_app()
    elif args.kind == "echo":
        if args.tokens is None:
            parser.error("echo needs --tokens")
        app = echo_app(json.loads(args.tokens.read_text()))
    else:
        if args.db is None:
            parser.error("core needs --db")
        app = core_app(args.db, args.synchronous, args.worker, args.pool_size)
    from paymentcore_server._serving import run

    run(app, port=args.port, **UVICORN_FLAGS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
