"""What the commands say about a ``--db`` value: a PostgreSQL URL or a SQLite path, and how a log line
shows it. Below both ``cli`` and ``_migrate_to``, which use it (``cli`` still exports the names)."""

from __future__ import annotations

__all__ = ["describe_db", "is_database_url"]


def is_database_url(db: str) -> bool:
    """``--db postgresql://...`` (or ``postgres://...``) selects PostgreSQL; anything else is SQLite."""
    return db.startswith(("postgresql://", "postgres://"))


def describe_db(db: str) -> str:
    """The database for a log line: a URL without its password."""
    if not is_database_url(db):
        return db
    scheme, _, rest = db.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at:
        return db
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}@{host}" if user else f"{scheme}://{host}"
