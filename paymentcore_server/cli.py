"""The ``paymentcore`` command: the server, the worker and the operator actions (CONTRACT §1-2).

A thin layer over the library: every action is one call on ``PaymentCore.operator``,
``PaymentCore.disburse`` or ``PaymentCore.webhooks``. With ``--json`` each command prints one JSON
object; a refused command prints a one-line reason on stderr, changes nothing and exits 1.
"""

from __future__ import annotations

import argparse
import gc
import getpass
import logging
import os
import signal
import sqlite3
import sys
import threading
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from paymentcore import (
    UNSET,
    ApiKey,
    AuditEntry,
    Merchant,
    Observer,
    OperatorAccount,
    OperatorPayout,
    PaymentCore,
    PayoutStatus,
    Settings,
)
from paymentcore.catalogue import Catalogue
from paymentcore.config import Config
from paymentcore.errors import NotFoundError, PaymentError
from paymentcore.ports import StoreUnavailableError
from paymentcore_server._console_text import human_lines, json_line, visible
from paymentcore_server._dburl import describe_db, is_database_url
from paymentcore_server._migrate_to import add_migrate_parser, cmd_migrate_to
from paymentcore_server._wire import (
    allowance_json,
    balance_json,
    event_summary_json,
    iso,
    iso_ms,
    payout_json,
    webhook_settings_json,
)
from paymentcore_server.observability import LOG_FORMATS, configure_logging

if TYPE_CHECKING:
    from paymentcore_server.metrics import Metrics

__all__ = [
    "DEFAULT_DB",
    "DEMO_NAME",
    "CliError",
    "OneLineParser",
    "audit_entry_json",
    "build_parser",
    "cli_actor",
    "cmd_serve",
    "cmd_worker",
    "describe_db",
    "ensure_demo",
    "is_database_url",
    "key_json",
    "main",
    "merchant_json",
    "open_core",
    "operator_json",
    "operator_payout_json",
    "run_operator",
    "settings_json",
    "webhook_show_json",
]

DEFAULT_DB = "./paymentcore.db"
DEMO_NAME = "Demo Shop"
log = logging.getLogger("paymentcore.cli")


class CliError(Exception):
    """A refusal of the command line itself (bad flag value, unknown thing)."""


# --- records as JSON -----------------------------------------------------------------------------


def merchant_json(m: Merchant) -> dict[str, Any]:
    return {
        "merchantId": m.id,
        "name": m.name,
        "settlementCurrency": m.settlement_currency,
        "status": m.status.value,
        "approved": m.approved,
        "payoutsEnabled": m.payouts_enabled,
        "collectFeePercent": Decimal(m.collect_fee_ppm) / Decimal(10_000),
        "blockedProviders": sorted(m.blocked_providers),
        "createdAt": iso_ms(m.created_at),
    }


def key_json(k: ApiKey) -> dict[str, Any]:
    return {
        "keyId": k.id,
        "merchantId": k.merchant_id,
        "scopes": sorted(s.value for s in k.scopes),
        "perMinute": k.per_minute,
        "perHour": k.per_hour,
        "revoked": k.revoked,
        "createdAt": iso_ms(k.created_at),
    }


def settings_json(s: Settings) -> dict[str, Any]:
    return {
        "apiEnabled": s.api_enabled,
        "payoutsEnabled": s.payouts_enabled,
        "closedCurrencies": sorted(s.closed_currencies),
    }


def operator_json(operator: OperatorAccount) -> dict[str, Any]:
    """An operator (never the sign-in token, shown once by ``operator create``)."""
    return {
        "operatorId": operator.id,
        "name": operator.name,
        "revoked": operator.revoked,
        "createdAt": iso(operator.created_at),
    }


def operator_payout_json(item: OperatorPayout) -> dict[str, Any]:
    """A payout in an operator's list: whose it is, the payout record, and its resolution."""
    return {
        "merchantId": item.merchant_id,
        **payout_json(item.payout),
        "resolution": item.resolution,
        "updatedAt": iso(item.updated_at),
    }


def audit_entry_json(entry: AuditEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "at": iso(entry.at),
        "actor": entry.actor,
        "action": entry.action,
        "record": entry.record,
        "before": None if entry.before is None else dict(entry.before),
        "after": None if entry.after is None else dict(entry.after),
    }


RECENT_DELIVERIES = 10


def webhook_show_json(core: PaymentCore, merchant_id: str, recent: int = RECENT_DELIVERIES) -> dict[str, Any]:
    """A merchant's webhook endpoint and its most recent events, newest first, each with the outcome of
    its latest delivery attempt (``lastAttempt``: None before the first)."""
    core.operator.get_merchant(merchant_id)
    try:
        endpoint = core.webhooks.get(merchant_id)
    except NotFoundError:
        message = "No webhook endpoint is registered for this merchant."
        raise NotFoundError(message, param="merchant") from None
    recent_events = []
    for summary in core.webhooks.events(merchant_id, limit=recent).data:
        record = core.webhooks.event(merchant_id, summary.id)
        last = record.deliveries[-1] if record.deliveries else None
        recent_events.append(
            {
                **event_summary_json(summary),
                "lastAttempt": None
                if last is None
                else {
                    "at": iso(last.at),
                    "responseStatus": last.response_status,
                    "error": last.error,
                    "durationMs": last.duration_ms,
                },
            }
        )
    return {"merchantId": merchant_id, **webhook_settings_json(endpoint), "recentDeliveries": recent_events}


def cli_actor() -> str:
    """Who acts from the command line, for the audit trail: ``cli:<os user>``."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no user name in the environment or the password database
        user = f"uid{os.getuid()}" if hasattr(os, "getuid") else "unknown"
    printable = "".join(char for char in user if char.isprintable() and not char.isspace())
    return f"cli:{printable[:100] or 'unknown'}"


# --- the parser ----------------------------------------------------------------------------------


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (CONTRACT §2), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message}\n")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}")
    return port


def _observability_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-port",
        type=_port,
        default=None,
        help="serve Prometheus metrics at http://HOST:PORT/metrics (off unless given)",
    )
    parser.add_argument(
        "--log-format", default="text", choices=list(LOG_FORMATS), help="text (default) or json lines"
    )


#: the longest --sandbox-delay (a day) and webhook retry delay (30 days) taken, in seconds
MAX_SANDBOX_DELAY = 86_400
MAX_RETRY_DELAY = 30 * 86_400
MAX_RETRIES = 100


def _limit(text: str) -> int:
    try:
        limit = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= limit <= 100:
        raise argparse.ArgumentTypeError("--limit takes a whole number from 1 to 100")
    return limit


def _sandbox_delay(text: str) -> float:
    """Seconds from 0 to a day, finite (a float: the sandbox may answer in 0.5 s)."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= seconds <= MAX_SANDBOX_DELAY:  # NaN fails both comparisons
        raise argparse.ArgumentTypeError(f"takes seconds from 0 to {MAX_SANDBOX_DELAY}, not {text!r}")
    return seconds


def _retry_delays(text: str) -> tuple[int, ...]:
    """Whole seconds separated by commas, each from 0 to 30 days, at most 100 of them; or ``none``."""
    if text.strip().lower() == "none":
        return ()
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts or not all(part.isascii() and part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(
            f"takes whole seconds separated by commas (5,60,600), or 'none'; not {text!r}"
        )
    delays = tuple(int(part) for part in parts)
    if len(delays) > MAX_RETRIES or max(delays) > MAX_RETRY_DELAY:
        raise argparse.ArgumentTypeError(
            f"takes at most {MAX_RETRIES} delays of at most {MAX_RETRY_DELAY} seconds (30 days) each"
        )
    return delays


def _page_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=_limit, default=100, help="at most this many (1 to 100, default 100)")
    parser.add_argument("--starting-after", default=None, help="the last item of the previous page")


def build_parser() -> argparse.ArgumentParser:
    common = OneLineParser(add_help=False)
    common.add_argument(
        "--db",
        default=argparse.SUPPRESS,
        help=f"SQLite file (default {DEFAULT_DB}) or PostgreSQL URL postgresql://USER@HOST:PORT/DBNAME",
    )
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON object"
    )
    common.add_argument("--catalogue", default=argparse.SUPPRESS, help="an operator's catalogue JSON file")

    parser = OneLineParser(prog="paymentcore", description="paymentcore server, worker and operator CLI")
    parser.add_argument("--db", default=DEFAULT_DB)
    parser.add_argument("--json", action="store_true", default=False)
    parser.add_argument("--catalogue", default=None)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", parents=[common], help="run the HTTP server (and the worker)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=_port, default=8000)
    serve.add_argument("--public-url", default=None)
    serve.add_argument("--network", default="sandbox", choices=["sandbox"])
    serve.add_argument("--sandbox-delay", type=_sandbox_delay, default=2.0)
    _sandbox_hang_flags(serve)
    serve.add_argument("--webhook-retry-delays", type=_retry_delays, default=None)
    serve.add_argument("--allow-private-webhooks", action="store_true")
    serve.add_argument("--demo", action="store_true")
    serve.add_argument(
        "--no-worker", action="store_true", help="leave background work to `paymentcore worker`"
    )
    serve.add_argument("--synchronous", default="FULL", choices=["FULL", "NORMAL"])
    _observability_flags(serve)

    worker = sub.add_parser("worker", parents=[common], help="run the background work alone")
    worker.add_argument("--sandbox-delay", type=_sandbox_delay, default=2.0)
    _sandbox_hang_flags(worker)
    worker.add_argument("--webhook-retry-delays", type=_retry_delays, default=None)
    worker.add_argument("--allow-private-webhooks", action="store_true")
    worker.add_argument("--public-url", default=None)
    worker.add_argument("--synchronous", default="FULL", choices=["FULL", "NORMAL"])
    worker.add_argument("--host", default="127.0.0.1", help="address the metrics port listens on")
    _observability_flags(worker)

    merchant = sub.add_parser("merchant", help="merchants").add_subparsers(dest="action", required=True)
    m_create = merchant.add_parser("create", parents=[common])
    m_create.add_argument("name")
    m_create.add_argument("--settlement-currency", default="XAF")
    m_create.add_argument("--not-approved", action="store_true")
    for action in ("approve", "suspend"):
        merchant.add_parser(action, parents=[common]).add_argument("merchant")
    m_payouts = merchant.add_parser("payouts", parents=[common])
    m_payouts.add_argument("switch", choices=["enable", "disable"])
    m_payouts.add_argument("merchant")
    m_fee = merchant.add_parser("fee", parents=[common])
    m_fee.add_argument("merchant")
    m_fee.add_argument("--collect-percent", required=True)

    key = sub.add_parser("key", help="API keys").add_subparsers(dest="action", required=True)
    k_create = key.add_parser("create", parents=[common])
    k_create.add_argument("merchant")
    k_create.add_argument("--scope", action="append", required=True, choices=["collect", "disburse"])
    k_create.add_argument("--per-minute", type=int, default=None)
    k_create.add_argument("--per-hour", type=int, default=None)
    key.add_parser("revoke", parents=[common]).add_argument("key_id")
    k_rate = key.add_parser("rate-limit", parents=[common])
    k_rate.add_argument("key_id")
    k_rate.add_argument("--per-minute", type=int, default=None)
    k_rate.add_argument("--per-hour", type=int, default=None)

    limits = sub.add_parser("limits", help="payout limits").add_subparsers(dest="action", required=True)
    l_set = limits.add_parser("set", parents=[common])
    l_set.add_argument("merchant")
    l_set.add_argument("currency")
    for flag in ("--per-transaction", "--per-day", "--per-week", "--review-threshold"):
        l_set.add_argument(flag, default=None)

    payout = sub.add_parser("payout", help="payout review and resolution").add_subparsers(
        dest="action", required=True
    )
    for action in ("release", "reject", "resolve"):
        payout.add_parser(action, parents=[common]).add_argument("reference")
    p_list = payout.add_parser("list", parents=[common], help="every merchant's payouts, oldest first")
    p_list.add_argument("--status", choices=[status.value for status in PayoutStatus], default=None)
    p_list.add_argument("--awaiting-review", action="store_true", help="only payouts held for review")
    p_list.add_argument(
        "--unresolved", action="store_true", help="only payouts whose reservation is not resolved yet"
    )
    p_list.add_argument("--merchant", default=None)
    _page_flags(p_list)

    webhook = sub.add_parser("webhook", help="webhooks").add_subparsers(dest="action", required=True)
    webhook.add_parser("reactivate", parents=[common]).add_argument("merchant")
    webhook.add_parser("show", parents=[common], help="the endpoint and its recent deliveries").add_argument(
        "merchant"
    )

    operator = sub.add_parser("operator", help="operators of the console").add_subparsers(
        dest="action", required=True
    )
    operator.add_parser("create", parents=[common], help="a new operator and its sign-in token").add_argument(
        "name"
    )
    operator.add_parser("revoke", parents=[common]).add_argument("operator_id")
    operator.add_parser("list", parents=[common])

    audit = sub.add_parser("audit", parents=[common], help="operator actions, newest first")
    audit.add_argument("--record", default=None, help="only the entries about this record")
    _page_flags(audit)

    platform = sub.add_parser("platform", help="platform switches").add_subparsers(
        dest="action", required=True
    )
    for what in ("payouts", "api"):
        p = platform.add_parser(what, parents=[common])
        p.add_argument("switch", choices=["enable", "disable"])

    currency = sub.add_parser("currency", help="currency switches").add_subparsers(
        dest="action", required=True
    )
    c_payouts = currency.add_parser("payouts", parents=[common])
    c_payouts.add_argument("switch", choices=["open", "close"])
    c_payouts.add_argument("currency")

    provider = sub.add_parser("provider", help="per-merchant provider blocks").add_subparsers(
        dest="action", required=True
    )
    for action in ("block", "unblock"):
        p = provider.add_parser(action, parents=[common])
        p.add_argument("merchant")
        p.add_argument("provider")

    balance = sub.add_parser("balance", parents=[common], help="balances of a merchant")
    balance.add_argument("merchant")

    add_migrate_parser(sub, common)  # migrate-to URL: this SQLite database into PostgreSQL
    return parser


# --- running -------------------------------------------------------------------------------------


def open_core(
    args: argparse.Namespace, *, observer: Observer | None = None, **config_changes: Any
) -> PaymentCore:
    catalogue = Catalogue.from_file(args.catalogue) if args.catalogue else None
    config = Config(**config_changes)
    kwargs: dict[str, Any] = {"config": config, "catalogue": catalogue, "observer": observer}
    if args.command not in ("serve", "worker"):
        kwargs["sender"] = None
    if is_database_url(args.db):
        return PaymentCore.postgresql(args.db, **kwargs)
    return PaymentCore.sqlite(Path(args.db), synchronous=getattr(args, "synchronous", "FULL"), **kwargs)


def _sandbox_hang_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sandbox-hang",
        action="append",
        default=[],
        metavar="PROVIDER_OR_NUMBER",
        help="make the sandbox hang on every call for this provider (e.g. mtn_cm) or phone number"
        " (repeatable, or comma-separated)",
    )
    parser.add_argument(
        "--sandbox-hang-seconds",
        type=_sandbox_delay,
        default=30.0,
        help="how long a hanging sandbox call blocks before failing as unanswered (default 30)",
    )


def _server_config(args: argparse.Namespace) -> dict[str, Any]:
    changes: dict[str, Any] = {
        "sandbox_delay": args.sandbox_delay,
        "allow_private_webhooks": args.allow_private_webhooks,
        "sandbox_hang": tuple(
            value.strip() for flag in args.sandbox_hang for value in flag.split(",") if value.strip()
        ),
        "sandbox_hang_seconds": args.sandbox_hang_seconds,
    }
    if args.webhook_retry_delays is not None:  # checked by the parser (_retry_delays)
        changes["webhook_retry_delays"] = args.webhook_retry_delays
    public_url = args.public_url
    if public_url is None and args.command == "serve":
        public_url = f"http://{args.host}:{args.port}"
    if public_url:
        changes["public_url"] = public_url.rstrip("/")
    return changes


def ensure_demo(core: PaymentCore, *, actor: str | None = None) -> dict[str, str] | None:
    """Create the demo merchant and its two keys once; returns what to print (None if it existed).

    ``actor`` is who creates them in the audit trail (default: this command line's ``cli:<os user>``).
    """
    if any(m.name == DEMO_NAME for m in core.operator.list_merchants()):
        return None
    actor = actor if actor is not None else cli_actor()
    merchant = core.operator.create_merchant(DEMO_NAME, settlement_currency="XAF", actor=actor)
    collect = core.operator.create_key(merchant.id, ["collect"], actor=actor)
    disburse = core.operator.create_key(merchant.id, ["disburse"], actor=actor)
    return {
        "merchantId": merchant.id,
        "collectKey": collect.api_key,
        "collectKeyId": collect.key.id,
        "disburseKey": disburse.api_key,
        "disburseKeyId": disburse.key.id,
    }


def settle_memory() -> None:
    """Before a long-running command serves: collect what start-up left behind, then move every object
    alive now (modules, the app, the catalogue, the core) out of the garbage collector's sight.

    They live as long as the process, yet each full collection walked them all again: under load those
    collections stopped the event loop for tens of milliseconds, the longest waits of the requests
    then in flight (a GET's p99 at concurrency 32 was 55-73 ms, 25-28 ms with no collection). Objects made
    afterwards are collected as ever."""
    gc.collect()
    gc.freeze()


def cmd_serve(args: argparse.Namespace) -> int:
    from paymentcore_server._http import http_protocol
    from paymentcore_server._serving import run
    from paymentcore_server.app import MAX_HEADERS, create_app

    configure_logging(args.log_format)
    metrics = _metrics(args)
    core = open_core(args, observer=_observer(metrics), **_server_config(args))
    if args.allow_private_webhooks:
        log.warning("--allow-private-webhooks is on: webhooks may target loopback and private addresses")
    if args.demo:
        demo = ensure_demo(core)
        if demo is None:
            print(f"Demo merchant '{DEMO_NAME}' already exists; its keys were shown when it was created.")
        else:
            print(f"Demo merchant '{DEMO_NAME}' created: {demo['merchantId']}")
            print(f"  Collect key:  {demo['collectKey']}  (key id {demo['collectKeyId']})")
            print(f"  Disburse key: {demo['disburseKey']}  (key id {demo['disburseKeyId']})")
            print("  (keys are shown only now; keep them)")
        sys.stdout.flush()
    json_logs = args.log_format == "json"
    app = create_app(
        core, run_worker=not args.no_worker, close_core=True, metrics=metrics, log_requests=json_logs
    )
    try:
        if metrics is not None:
            _serve_metrics(metrics, core, args.host, args.metrics_port)
        # with JSON logs uvicorn configures no logging of its own: its lines go through ours
        extra: dict[str, Any] = {"log_config": None} if json_logs else {}
        # a request the parser refuses (headers past MAX_HEADERS: 431) answers in the error shape too
        extra["http"] = http_protocol(MAX_HEADERS)
        extra["h11_max_incomplete_event_size"] = MAX_HEADERS
        settle_memory()
        # uvicorn, accepting every waiting connection at each turn of the loop (paymentcore_server._serving)
        run(app, host=args.host, port=args.port, log_level="info", access_log=False, **extra)
    finally:
        if metrics is not None:
            metrics.close()
    return 0


def _metrics(args: argparse.Namespace) -> Metrics | None:
    if args.metrics_port is None:
        return None
    if args.command == "serve" and args.metrics_port == args.port:
        raise CliError("--metrics-port must differ from --port: the API's port never serves the metrics")
    from paymentcore_server.metrics import Metrics

    return Metrics()


def _observer(metrics: Metrics | None) -> Observer | None:
    return None if metrics is None else metrics.observer()


def _serve_metrics(metrics: Metrics, core: PaymentCore, host: str, port: int) -> None:
    metrics.watch(core)
    server = metrics.serve(host, port)
    log.info("metrics at http://%s:%d/metrics", host, server.port)


def cmd_worker(args: argparse.Namespace) -> int:
    configure_logging(args.log_format)
    metrics = _metrics(args)
    core = open_core(args, observer=_observer(metrics), **_server_config(args))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        if metrics is not None:
            _serve_metrics(metrics, core, args.host, args.metrics_port)
        settle_memory()
        core.start_worker()
        log.info("worker running on %s", describe_db(args.db))
        stop.wait()
    finally:
        if metrics is not None:
            metrics.close()
        core.close()
    return 0


def _money_flag(value: str | None) -> object:
    return UNSET if value is None else value


def run_operator(args: argparse.Namespace, core: PaymentCore, *, actor: str | None = None) -> dict[str, Any]:
    """Run one operator command; every action is recorded in the audit trail as ``actor`` (default
    :func:`cli_actor`, ``cli:<os user>``)."""
    op = core.operator
    who = actor if actor is not None else cli_actor()
    command, action = args.command, getattr(args, "action", None)
    if command == "merchant":
        if action == "create":
            created = op.create_merchant(
                args.name,
                settlement_currency=args.settlement_currency,
                approved=not args.not_approved,
                actor=who,
            )
            return merchant_json(created)
        if action == "approve":
            return merchant_json(op.approve_merchant(args.merchant, actor=who))
        if action == "suspend":
            return merchant_json(op.suspend_merchant(args.merchant, actor=who))
        if action == "payouts":
            return merchant_json(op.set_merchant_payouts(args.merchant, args.switch == "enable", actor=who))
        if action == "fee":
            return merchant_json(op.set_collect_fee(args.merchant, args.collect_percent, actor=who))
    if command == "key":
        if action == "create":
            created_key = op.create_key(
                args.merchant, args.scope, per_minute=args.per_minute, per_hour=args.per_hour, actor=who
            )
            return {
                "keyId": created_key.key.id,
                "apiKey": created_key.api_key,
                "scopes": sorted(s.value for s in created_key.key.scopes),
                "merchantId": created_key.key.merchant_id,
            }
        if action == "revoke":
            return key_json(op.revoke_key(args.key_id, actor=who))
        if action == "rate-limit":
            return key_json(
                op.set_rate_limit(args.key_id, per_minute=args.per_minute, per_hour=args.per_hour, actor=who)
            )
    if command == "limits":
        op.set_limits(
            args.merchant,
            args.currency,
            per_transaction=_money_flag(args.per_transaction),
            per_day=_money_flag(args.per_day),
            per_week=_money_flag(args.per_week),
            review_threshold=_money_flag(args.review_threshold),
            actor=who,
        )
        return allowance_json(core.disburse.limits(args.merchant, args.currency))
    if command == "payout":
        if action == "list":
            page = op.payouts(
                status=args.status,
                awaiting_review=True if args.awaiting_review else None,
                unresolved=True if args.unresolved else None,
                merchant_id=args.merchant,
                limit=args.limit,
                starting_after=args.starting_after,
            )
            return {"data": [operator_payout_json(item) for item in page.data], "hasMore": page.has_more}
        handler = {
            "release": core.disburse.release,
            "reject": core.disburse.reject,
            "resolve": core.disburse.resolve,
        }
        payout = handler[str(action)](args.reference, actor=who)
        return payout_json(payout)
    if command == "webhook":
        if action == "show":
            return webhook_show_json(core, args.merchant)
        core.webhooks.reactivate(args.merchant, actor=who)
        return {"merchantId": args.merchant, **webhook_settings_json(core.webhooks.get(args.merchant))}
    if command == "platform":
        enabled = args.switch == "enable"
        if action == "payouts":
            return settings_json(op.set_platform_payouts(enabled, actor=who))
        return settings_json(op.set_platform_api(enabled, actor=who))
    if command == "currency":
        return settings_json(op.set_currency_payouts(args.currency, args.switch == "open", actor=who))
    if command == "provider":
        merchant = op.block_provider(args.merchant, args.provider, blocked=action == "block", actor=who)
        provider = core.catalogue.providers[args.provider]
        blocked = provider.code in merchant.blocked_providers
        return {
            "providerCode": provider.code,
            "method": provider.channel_method,
            "country": provider.country,
            "available": not blocked,
            "reason": "restricted" if blocked else None,
        }
    if command == "balance":
        balances = [balance_json(balance) for balance in op.balances(args.merchant)]
        return {"merchantId": args.merchant, "balances": balances}
    if command == "operator":
        if action == "create":
            created_operator = op.create_operator(args.name, actor=who)
            return {"operatorId": created_operator.operator.id, "token": created_operator.token}
        if action == "revoke":
            return operator_json(op.revoke_operator(args.operator_id, actor=who))
        if action == "list":
            return {"operators": [operator_json(operator) for operator in op.operators()]}
    if command == "audit":
        entries = op.audit_log(record=args.record, limit=args.limit, starting_after=args.starting_after)
        return {"data": [audit_entry_json(entry) for entry in entries.data], "hasMore": entries.has_more}
    raise CliError(f"unknown command {command} {action or ''}".strip())


def _print_human(result: dict[str, Any]) -> None:
    """``key: value`` lines, every merchant-supplied string made visible (control characters escaped)."""
    for line in human_lines(result):
        print(line)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            return cmd_serve(args)
        if args.command == "worker":
            return cmd_worker(args)
        if args.command == "migrate-to":
            return cmd_migrate_to(args)
        core = open_core(args)
        try:
            result = run_operator(args, core)
        finally:
            core.close()
    except PaymentError as error:
        print(f"error: {error.code}: {visible(error.message)}", file=sys.stderr)
        return 1
    except (CliError, ValueError, OSError, StoreUnavailableError) as error:
        print(f"error: {visible(str(error))}", file=sys.stderr)
        return 1
    except sqlite3.Error as error:  # e.g. a write to a read-only database file
        problem = f"cannot use the SQLite database {args.db}: {error}"
        print(f"error: {visible(problem)}", file=sys.stderr)
        return 1
    if args.json:
        print(json_line(result))
    else:
        _print_human(result)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
