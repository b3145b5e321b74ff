"""The arguments every list takes (``limit``, ``starting_after``, filters) and the page it answers.

A list asks its repository's ``page`` method for one item more than ``limit``: whether that item came
back is ``has_more``. ``param`` of a refusal is the library's argument name (the server shows the wire's).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import TypeVar

from paymentcore._domain.errors import InvalidRequestError
from paymentcore._domain.records import Page

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "check_cursor",
    "check_limit",
    "check_member",
    "check_text",
    "page_of",
    "unknown_cursor",
]

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
MAX_CURSOR = 200  # longer than any reference or id

E = TypeVar("E", bound=enum.Enum)
R = TypeVar("R")
T = TypeVar("T")


def check_limit(limit: object) -> int:
    """A whole number from 1 to :data:`MAX_LIMIT`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequestError(f"limit must be a whole number from 1 to {MAX_LIMIT}.", param="limit")
    return limit


def check_cursor(value: object) -> str | None:
    """None, or the non-empty reference or id a previous page ended with."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_CURSOR:
        raise InvalidRequestError(
            "starting_after must be the reference or id of the last item of the previous page.",
            param="starting_after",
        )
    return value


def unknown_cursor(what: str) -> InvalidRequestError:
    """``starting_after`` names nothing in this list (or another merchant's item): the same answer."""
    return InvalidRequestError(f"starting_after is not one of this account's {what}.", param="starting_after")


def check_text(value: object, param: str, *, max_length: int) -> str | None:
    """An optional filter on a text field: None, or a non-empty string of at most ``max_length``."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > max_length or "\x00" in value:
        raise InvalidRequestError(
            f"{param} must be a non-empty string of at most {max_length} characters, without NUL.",
            param=param,
        )
    return value


def check_member(value: object, kind: type[E], param: str) -> E | None:
    """An optional filter on an enum: None, a member of ``kind``, or a member's value."""
    if value is None or isinstance(value, kind):
        return value
    for member in kind:
        if isinstance(value, str) and value == member.value:
            return member
    allowed = ", ".join(str(member.value) for member in kind)
    raise InvalidRequestError(f"{param} must be one of {allowed}.", param=param)


def page_of(rows: Sequence[R], limit: int, render: Callable[[R], T]) -> Page[T]:
    """The page of ``rows`` (fetched with ``limit + 1``): the first ``limit``, rendered."""
    return Page(data=tuple(render(row) for row in rows[:limit]), has_more=len(rows) > limit)
