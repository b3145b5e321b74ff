"""``paymentcore --db SQLITE_FILE migrate-to postgresql://...``: the command over :mod:`paymentcore.transfer`.

Prints a short summary (tables and rows copied, the server key, the ledger check), or one JSON object with
``--json``; a refusal is one line on stderr, exit status 1, and nothing written to the target. The
transfer module (and psycopg with it) is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from paymentcore.transfer import TransferReport

__all__ = ["add_migrate_parser", "cmd_migrate_to", "report_json"]


def add_migrate_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """The ``migrate-to`` subcommand (``sub`` is the command line's subparsers)."""
    command = sub.add_parser(
        "migrate-to",
        parents=[common],
        help="copy the SQLite database (--db) into an empty PostgreSQL database, then check the ledger",
    )
    command.add_argument("url", help="the PostgreSQL database: postgresql://USER@HOST:PORT/DBNAME")
    command.add_argument(
        "--key-file", default=None, help="the SQLite database's server key (default: the --db path + .key)"
    )


def report_json(report: TransferReport, target: str) -> dict[str, Any]:
    return {
        "source": report.source,
        "target": target,
        "schemaVersion": report.schema_version,
        "sourceUpgradedFrom": report.upgraded_from,
        "tables": dict(report.tables),
        "rows": report.rows,
        "serverKey": report.server_key,
        "replacedServerKey": report.replaced_server_key,
        "ledger": {
            "ok": True,
            "merchants": report.ledger.merchants,
            "balances": report.ledger.balances,
            "entries": report.ledger.entries,
        },
    }


def cmd_migrate_to(args: argparse.Namespace) -> int:
    from paymentcore.transfer import TransferError, copy_sqlite_to_postgresql  # psycopg: only now
    from paymentcore_server._dburl import describe_db, is_database_url

    if is_database_url(args.db):
        return _refuse("--db names the SQLite database to copy from, not a PostgreSQL URL")
    if not is_database_url(args.url):
        return _refuse(f"migrate-to takes a postgresql:// URL, not {args.url!r}")
    target = describe_db(args.url)
    try:
        report = copy_sqlite_to_postgresql(args.db, args.url, key_file=args.key_file)
    except TransferError as error:
        return _refuse(str(error))
    if args.json:
        print(json.dumps(report_json(report, target)))
        return 0
    upgraded = "" if report.upgraded_from is None else f", migrated from {report.upgraded_from} first"
    key = f"copied from {report.server_key}" if report.server_key else "none (made on first start)"
    ledger = report.ledger
    lines = [
        f"copied {report.source} (schema {report.schema_version}{upgraded}) to {target} in one transaction",
        f"  {len(report.tables)} tables, {report.rows} rows: "
        + ", ".join(f"{table} {rows}" for table, rows in report.tables),
        f"  server key: {key}",
    ]
    if report.replaced_server_key:
        lines.append(
            "  (it replaces the key a process made when it started on the empty database: restart any "
            "paymentcore process that was started on it before the move)"
        )
    lines.append(
        f"  ledger check: ok ({ledger.merchants} merchants, {ledger.balances} balances, "
        f"{ledger.entries} entries; every table's rows equal the source's)"
    )
    for line in lines:
        print(_printable(line))
    return 0


def _refuse(reason: str) -> int:
    print(f"error: {_printable(reason)}", file=sys.stderr)
    return 1


def _printable(text: str) -> str:
    """One line, whatever a file's table names or paths hold: control characters as escapes."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)
