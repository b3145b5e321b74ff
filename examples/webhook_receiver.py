"""A webhook receiver with nothing but the standard library's ``http.server``.

Every delivery is checked with ``paymentcore.verify_webhook(secret, headers, raw_body)`` before
anything else happens: the HMAC signature over ``<timestamp>.<raw body>`` and the freshness of the
timestamp (five minutes either way). A delivery that fails the check gets 400 and is otherwise ignored.
A verified one gets 204, quickly, and is handled once: deliveries are at-least-once, so the same event
can arrive again (a retry after a timeout, for instance); the ``eventId`` in the body tells repeats
apart.

The secret is the ``signingSecret`` returned when the endpoint was registered with ``PUT /v1/webhook``
(shown only then). With a server on this machine, registration needs ``--allow-private-webhooks``::

    paymentcore --db demo.db serve --demo --allow-private-webhooks
    curl -X PUT http://127.0.0.1:8000/v1/webhook -H "Authorization: Bearer pck_..." \\
         -H "Content-Type: application/json" -d '{"url": "http://127.0.0.1:9000/hooks"}'
    python examples/webhook_receiver.py --secret whsec_...

Each event is printed as ``verified <event name> <eventId> <reference> <status>``.
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from paymentcore import WebhookVerificationError, verify_webhook, wire

MAX_BODY = 1024 * 1024


class Receiver(ThreadingHTTPServer):
    """The HTTP server plus what the handlers share: the secret and the events already seen."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], secret: str, max_events: int | None) -> None:
        super().__init__(address, WebhookHandler)
        self.secret = secret
        self.max_events = max_events
        self.lock = threading.Lock()
        self.seen: set[str] = set()  # eventIds handled; a real app keeps them in its database
        self.handled = 0  # events whose handling has finished (deliveries arrive concurrently)

    def accept(self, event_id: str) -> bool:
        """Record ``event_id``; False when it was handled before (a repeated delivery)."""
        with self.lock:
            if event_id in self.seen:
                return False
            self.seen.add(event_id)
            return True

    def finished_one(self) -> bool:
        """Count one handled event; True when ``max_events`` have been handled."""
        with self.lock:
            self.handled += 1
            return self.max_events is not None and self.handled >= self.max_events


class WebhookHandler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        length = self.headers.get("Content-Length", "")
        if not length.isdigit() or int(length) > MAX_BODY:
            self.answer(400 if not length.isdigit() else 413)
            return
        raw_body = self.rfile.read(int(length))  # the raw bytes: verify these, never a re-encoding
        headers = {name: value for name, value in self.headers.items()}
        try:
            verify_webhook(self.server.secret, headers, raw_body)
        except WebhookVerificationError as error:
            print(f"rejected delivery: {error}", flush=True)
            self.answer(400)
            return

        event = headers.get("X-Service-Event", "?")
        body: Any = wire.loads(raw_body)  # amounts come back as Decimal, never float
        if not isinstance(body, dict):
            self.answer(400)
            return
        event_id = str(body.get("eventId", ""))
        if not self.server.accept(event_id):
            print(f"duplicate {event} {event_id}: already handled", flush=True)
            self.answer(204)
            return
        self.answer(204)  # answer first and fast; do slow work after (or in a queue)
        handle_event(event, event_id, body)
        if self.server.finished_one():
            # shutdown() waits for serve_forever() to stop, so call it from another thread.
            threading.Thread(target=self.server.shutdown, daemon=True).start()

    def answer(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per event is printed by handle_event instead of the access log


def handle_event(event: str, event_id: str, body: dict[str, Any]) -> None:
    """Your business logic. Collection events are flat; payout events carry ``{event, data}``."""
    if event.startswith(("collect.", "payment.")):
        reference, status = body.get("invoiceReference"), body.get("status")
        detail = f"settled {body.get('settledAmount')} {body.get('settledCurrency')}"
    else:
        data = body.get("data") or {}
        reference, status = data.get("reference"), data.get("status")
        detail = f"{data.get('amount')} {data.get('currency')} to {data.get('phone')}"
    print(f"verified {event} {event_id} {reference} {status} ({detail})", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Receive and verify paymentcore webhooks.")
    parser.add_argument("--secret", required=True, help="the signingSecret from PUT /v1/webhook")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--max-events", type=int, default=None, help="exit after this many events")
    args = parser.parse_args(argv)

    server = Receiver((args.host, args.port), args.secret, args.max_events)
    print(f"listening on http://{args.host}:{server.server_port}/", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    print(f"stopped after {len(server.seen)} event(s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
