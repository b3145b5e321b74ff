"""The outbox's event types are one enum: every event the services write is a member, every member is
written somewhere, and the legacy names are derived from it."""

from __future__ import annotations

import ast
from pathlib import Path

import paymentcore
from paymentcore.events import (
    BATCH_EVENTS,
    COLLECTION_EVENTS,
    CURRENT_OF,
    LEGACY_NAMES,
    PAYOUT_EVENTS,
    UNRENAMED,
    EventType,
)

SERVICES = Path(paymentcore.__file__).parent / "_services"


def emitted() -> list[tuple[str, ast.expr]]:
    """Every event type argument of an ``emit``/``_emit`` call in the services: (where, the argument)."""
    found = []
    for path in sorted(SERVICES.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("emit", "_emit")
                and len(node.args) >= 3
            ):
                found.append((f"{path.name}:{node.lineno}", node.args[2]))
    return found


def test_every_event_the_services_write_is_an_event_type_member() -> None:
    calls = emitted()
    assert len(calls) >= 8
    named = set()
    for where, arg in calls:
        if isinstance(arg, ast.Name):  # a helper passing its own parameter on (typed EventType)
            continue
        assert isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name), where
        assert arg.value.id == "EventType", where
        named.add(EventType[arg.attr])
    assert named == set(EventType)  # and every member is written somewhere


def test_the_members_are_the_strings_stored_and_sent() -> None:
    assert str(EventType.DISBURSE_SUCCEEDED) == "disburse.succeeded"
    assert "disburse.succeeded" in set(EventType)  # equal to its text: stored and compared as before
    assert {t.value for t in EventType} == {
        "collect.succeeded",
        "collect.failed",
        "disburse.sent",
        "disburse.succeeded",
        "disburse.failed",
        "disburse.bulk.completed",
    }
    assert EventType("collect.failed") is EventType.COLLECT_FAILED
    assert paymentcore.EventType is EventType


def test_the_families_and_the_legacy_names_cover_every_member_once() -> None:
    families = [*COLLECTION_EVENTS, *PAYOUT_EVENTS, *BATCH_EVENTS]
    assert sorted(families) == sorted(EventType)
    assert set(LEGACY_NAMES) | set(UNRENAMED) == {t.value for t in EventType}
    assert not set(LEGACY_NAMES) & set(UNRENAMED)
    assert {t.value: t.legacy_name for t in EventType if t.value in LEGACY_NAMES} == LEGACY_NAMES
    assert EventType.DISBURSE_BULK_COMPLETED.legacy_name == "disburse.bulk.completed"
    assert {CURRENT_OF[legacy] for legacy in LEGACY_NAMES.values()} == set(LEGACY_NAMES)
    assert all(type(key) is str for key in LEGACY_NAMES)  # plain text keys, as stored
